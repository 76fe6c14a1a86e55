// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"net/url"
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
}

// DefaultKeyPrefix is store.key_prefix when the section leaves it out.
const DefaultKeyPrefix = "breach_exporter"

// maxKeyPrefixBytes keeps the prefix short next to the keys it starts.
const maxKeyPrefixBytes = 64

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
