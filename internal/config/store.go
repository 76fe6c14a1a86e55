// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// StoreConfig is the optional store section: the Redis or Valkey that the
// replicas of one deployment share (internal/sharedstore). Absent, the exporter
// runs alone as it always did.
type StoreConfig struct {
	// URL is redis:// or rediss:// (TLS), host, port and an optional
	// database number.
	URL string `yaml:"url"`
	// PasswordFile holds the store's password; it replaces one in URL.
	PasswordFile string `yaml:"password_file"`
	// KeyPrefix starts every key, so that several deployments can share
	// one store.
	KeyPrefix string `yaml:"key_prefix"`
	// Deployment names the deployment in the store; empty, the name is
	// derived from the accounts (Bundle.StoreDeployment).
	Deployment string `yaml:"deployment"`
}

// DefaultKeyPrefix is store.key_prefix when the section leaves it out.
const DefaultKeyPrefix = "breach_exporter"

// maxKeyPrefixBytes keeps the prefix short next to the keys it starts.
const maxKeyPrefixBytes = 64

// maxDeploymentBytes bounds store.deployment, which every health check
// sends.
const maxDeploymentBytes = 64

// StorePasswordWarning is the warning of a store.url that holds a password:
// the config file is often readable by more people than a secret file.
const StorePasswordWarning = "store.url: holds a password: put the password in store.password_file"

// completeStore gives a store section its default prefix. Only a prefix
// the file leaves out gets it: one written empty is a mistake to report.
func (c *Config) completeStore(lines lineIndex) {
	if c.Store == nil {
		return
	}
	if _, set := lines["store.key_prefix"]; !set && c.Store.KeyPrefix == "" {
		c.Store.KeyPrefix = DefaultKeyPrefix
	}
}

func (s *StoreConfig) validate(fail func(string, ...any)) {
	if s == nil {
		return
	}
	if err := checkStoreURL(s.URL); err != nil {
		fail("store.url: %w", err)
	}
	switch {
	case s.KeyPrefix == "":
		fail("store.key_prefix: must not be empty")
	case len(s.KeyPrefix) > maxKeyPrefixBytes:
		fail("store.key_prefix: %q has %d bytes, at most %d", echo(s.KeyPrefix), len(s.KeyPrefix), maxKeyPrefixBytes)
	case strings.ContainsFunc(s.KeyPrefix, func(r rune) bool { return unicode.IsSpace(r) || r == '{' || r == '}' }):
		// Braces would make a Redis Cluster hash tag of part of the prefix.
		fail("store.key_prefix: %q must not contain whitespace or braces", echo(s.KeyPrefix))
	}
	if len(s.Deployment) > maxDeploymentBytes {
		fail("store.deployment: has %d bytes, at most %d", len(s.Deployment), maxDeploymentBytes)
	} else if strings.ContainsFunc(s.Deployment, func(r rune) bool { return !isNameRune(r) }) {
		fail("store.deployment: %q may hold letters, digits, '.', '_' and '-' only", s.Deployment)
	}
}

func isNameRune(r rune) bool {
	return r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-')
}

// StoreDeployment is the deployment's identity in the store
// (sharedstore.Options.Deployment): store.deployment when set; else a
// digest over each account's name, API base URL and a digest of its key,
// so that two deployments configured apart never share a store by
// accident (their account names alone default alike). Never a key. A
// rotated key changes the derived identity: setting store.deployment to
// the identity in use (the value the error of a refused start shows)
// before rotating keeps the deployment one.
func (b *Bundle) StoreDeployment() string {
	if b.Config.Store != nil && b.Config.Store.Deployment != "" {
		return b.Config.Store.Deployment
	}
	accounts := slices.Clone(b.Accounts)
	slices.SortFunc(accounts, func(x, y *AccountBundle) int { return strings.Compare(x.Name, y.Name) })
	h := sha256.New()
	for _, a := range accounts {
		key := sha256.Sum256([]byte(a.Token.Get()))
		fmt.Fprintf(h, "%s\x00%s\x00%x\x00", a.Name, a.BaseURL, key)
	}
	return "derived-" + hex.EncodeToString(h.Sum(nil)[:8])
}

// checkStoreURL parses the URL the way the store's client will and says
// what is wrong with it; its errors show the URL redacted, so a password
// in it never reaches a log.
func checkStoreURL(raw string) error {
	if raw == "" {
		return errors.New("is required in the store section")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url's reason quotes the URL, password included: only say it
		// is not one.
		return errors.New("not a valid URL")
	}
	shown := echo(u.Redacted())
	db := strings.TrimPrefix(u.Path, "/")
	switch {
	case u.Scheme != "redis" && u.Scheme != "rediss":
		return fmt.Errorf("%q must be a redis:// or rediss:// (TLS) URL", shown)
	case u.Hostname() == "":
		return fmt.Errorf("%q has no host", shown)
	case db != "" && !isDatabaseNumber(db):
		return fmt.Errorf("%q: the path must be a database number, like /0", shown)
	case u.Fragment != "":
		return fmt.Errorf("%q must not have a fragment", shown)
	}
	return nil
}

func isDatabaseNumber(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && strconv.Itoa(n) == s
}

// hasPassword reports whether the store URL carries a password.
func (s *StoreConfig) hasPassword() bool {
	u, err := url.Parse(s.URL)
	if err != nil || u.User == nil {
		return false
	}
	_, set := u.User.Password()
	return set
}

// readStorePassword reads store.password_file; "" when none is set.
// Trailing whitespace (the newline an editor adds) is not part of it. Its
// errors name the setting and the file, never the content.
func (s *StoreConfig) readStorePassword() (string, error) {
	if s == nil || s.PasswordFile == "" {
		return "", nil
	}
	data, err := fileread.Read(s.PasswordFile, fileread.MaxSecretBytes)
	if err != nil {
		return "", fmt.Errorf("store.password_file: %w", err)
	}
	password := string(trimTrailingSpace(data))
	if password == "" {
		return "", fmt.Errorf("store.password_file: %q is empty", echo(s.PasswordFile))
	}
	return password, nil
}
