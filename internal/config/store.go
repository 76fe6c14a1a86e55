// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/prometheus/common/config"
)

// StoreConfig is the optional store section: the Redis or Valkey that the
// replicas of one deployment share (internal/sharedstore). Absent, the exporter
// runs alone as it always did. One server (URL), a Redis or Valkey cluster
// (Servers) or a primary found through Sentinels (Servers and MasterName).
type StoreConfig struct {
	// URL is redis:// or rediss:// (TLS), host, port and an optional
	// database number: one server. URL and Servers exclude each other.
	URL string `yaml:"url"`
	// Servers are host:port addresses: the nodes of a cluster, or with
	// MasterName the Sentinels.
	Servers []string `yaml:"servers"`
	// MasterName is the name the Sentinels know the primary by.
	MasterName string `yaml:"master_name"`
	// SentinelPasswordFile holds the Sentinels' password.
	SentinelPasswordFile string `yaml:"sentinel_password_file"`
	// Username is the store's ACL user.
	Username string `yaml:"username"`
	// PasswordFile holds the store's password; it replaces one in URL.
	PasswordFile string `yaml:"password_file"`
	// TLS, when set, makes every connection TLS (with URL, a rediss:// one).
	TLS *StoreTLS `yaml:"tls"`
	// KeyPrefix starts every key, so that several deployments can share
	// one store.
	KeyPrefix string `yaml:"key_prefix"`
	// Deployment names the deployment in the store; empty, the name is
	// derived from the accounts (Bundle.StoreDeployment).
	Deployment string `yaml:"deployment"`
	// SigningKeyFile holds a secret the replicas share, one or two
	// lines: the first signs what they write to the store, both verify
	// (Bundle.StoreKeys). Optional: the API keys sign without it.
	SigningKeyFile string `yaml:"signing_key_file"`
	// AcceptUnsigned reads unsigned entries after the deployment is
	// signed only: for a rollback to a release that does not sign.
	AcceptUnsigned bool `yaml:"accept_unsigned"`
}

// StoreTLS is store.tls: the names are those of Prometheus' tls_config,
// and of the redis clients of Thanos and Cortex.
type StoreTLS struct {
	// CAFile holds the CAs the store's certificate is checked against;
	// empty, the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a client certificate, both or neither.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName is the name the store's certificate must hold; empty,
	// the host of each address.
	ServerName         string `yaml:"server_name"`
	InsecureSkipVerify bool   `yaml:"insecure_skip_verify"`
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
	s.validateServers(fail)
	s.validateAuth(fail)
	switch {
	case s.KeyPrefix == "":
		fail("store.key_prefix: must not be empty")
	case len(s.KeyPrefix) > maxKeyPrefixBytes:
		fail("store.key_prefix: %q has %d bytes, at most %d", echo(s.KeyPrefix), len(s.KeyPrefix), maxKeyPrefixBytes)
	case strings.ContainsFunc(s.KeyPrefix, func(r rune) bool { return unicode.IsSpace(r) || r == '{' || r == '}' }):
		// On a cluster the client puts the prefix in braces, the keys'
		// hash tag (sharedstore): braces of its own would change the tag.
		fail("store.key_prefix: %q must not contain whitespace or braces", echo(s.KeyPrefix))
	}
	if len(s.Deployment) > maxDeploymentBytes {
		fail("store.deployment: has %d bytes, at most %d", len(s.Deployment), maxDeploymentBytes)
	} else if strings.ContainsFunc(s.Deployment, func(r rune) bool { return !isNameRune(r) }) {
		fail("store.deployment: %q may hold letters, digits, '.', '_' and '-' only", s.Deployment)
	}
}

// maxServers bounds store.servers: a cluster's seed nodes or the
// Sentinels, a handful each.
const maxServers = 32

// maxStoreNameBytes bounds store.master_name and store.username.
const maxStoreNameBytes = 128

// validateServers checks that the section names one server (url) or
// several (servers), and the Sentinels' settings.
func (s *StoreConfig) validateServers(fail func(string, ...any)) {
	switch {
	case s.URL != "" && len(s.Servers) > 0:
		fail("store.servers: and store.url exclude each other: url names one server, servers the nodes of a cluster or, with master_name, the Sentinels")
	case len(s.Servers) > 0:
		checkServers(s.Servers, fail)
	default:
		if err := checkStoreURL(s.URL); err != nil {
			fail("store.url: %w", err)
		}
	}
	if s.MasterName != "" && len(s.Servers) == 0 {
		fail("store.master_name: needs store.servers, the Sentinels' addresses")
	}
	if s.SentinelPasswordFile != "" && s.MasterName == "" {
		fail("store.sentinel_password_file: is for Sentinels: set store.master_name and store.servers")
	}
	if err := checkStoreName(s.MasterName); err != nil {
		fail("store.master_name: %w", err)
	}
}

// checkServers checks each of store.servers as host:port.
func checkServers(servers []string, fail func(string, ...any)) {
	if len(servers) > maxServers {
		fail("store.servers: has %d addresses, at most %d", len(servers), maxServers)
		return
	}
	seen := map[string]bool{}
	for i, addr := range servers {
		host, port, err := net.SplitHostPort(addr)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "" || perr != nil || n < 1 || n > 65535:
			fail("store.servers[%d]: %q must be host:port, like redis-0.redis:6379", i, echo(addr))
		case seen[addr]:
			fail("store.servers[%d]: %q is listed twice", i, echo(addr))
		}
		seen[addr] = true
	}
}

// checkStoreName checks a name the store is told: a master name, a user.
func checkStoreName(name string) error {
	switch {
	case len(name) > maxStoreNameBytes:
		return fmt.Errorf("has %d bytes, at most %d", len(name), maxStoreNameBytes)
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		return fmt.Errorf("%q must not contain whitespace", echo(name))
	}
	return nil
}

// validateAuth checks the ACL user and the TLS settings.
func (s *StoreConfig) validateAuth(fail func(string, ...any)) {
	if err := checkStoreName(s.Username); err != nil {
		fail("store.username: %w", err)
	}
	u, err := url.Parse(s.URL)
	if err != nil || s.URL == "" {
		u = nil // store.url's own error says it
	}
	if u != nil && u.User != nil && u.User.Username() != "" && s.Username != "" {
		fail("store.username: and the user in store.url exclude each other")
	}
	if s.TLS == nil {
		return
	}
	if u != nil && u.Scheme == "redis" {
		fail("store.tls: the url is redis://, without TLS: make it rediss://")
	}
	if (s.TLS.CertFile == "") != (s.TLS.KeyFile == "") {
		fail("store.tls: cert_file and key_file go together: a client certificate needs both")
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

// storeKeyLabel starts the derived signing key's message: the key signs
// the store's entries and nothing else.
const storeKeyLabel = "breach_exporter store entries v1"

// StoreKeys is the deployment's signing key set (sharedstore.Keys): the
// first line of store.signing_key_file (when set) and the key derived
// from the API keys sign; every line of the file and the derived key
// verify. The derived key is an HMAC over the accounts' API keys, sorted
// by account name, so that replicas of one config share it and nobody
// without the API keys has it. Never logged.
func (b *Bundle) StoreKeys() (sign, verify [][]byte) {
	accounts := slices.Clone(b.Accounts)
	slices.SortFunc(accounts, func(x, y *AccountBundle) int { return strings.Compare(x.Name, y.Name) })
	mac := hmac.New(sha256.New, []byte(storeKeyLabel))
	for _, a := range accounts {
		token := a.Token.Get()
		fmt.Fprintf(mac, "%d:%s%d:%s", len(a.Name), a.Name, len(token), token)
	}
	derived := mac.Sum(nil)
	if len(b.StoreSigningKeys) > 0 {
		sign = append(sign, b.StoreSigningKeys[0])
	}
	verify = append(slices.Clone(b.StoreSigningKeys), derived)
	return append(sign, derived), verify
}

// checkStoreURL parses the URL the way the store's client will and says
// what is wrong with it; its errors show the URL redacted, so a password
// in it never reaches a log.
func checkStoreURL(raw string) error {
	if raw == "" {
		return errors.New("is required in the store section (or store.servers: a cluster, or the Sentinels)")
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

// setDirectory makes the section's file paths relative to dir.
func (s *StoreConfig) setDirectory(dir string) {
	s.PasswordFile = config.JoinDir(dir, s.PasswordFile)
	s.SentinelPasswordFile = config.JoinDir(dir, s.SentinelPasswordFile)
	s.SigningKeyFile = config.JoinDir(dir, s.SigningKeyFile)
	if t := s.TLS; t != nil {
		t.CAFile = config.JoinDir(dir, t.CAFile)
		t.CertFile = config.JoinDir(dir, t.CertFile)
		t.KeyFile = config.JoinDir(dir, t.KeyFile)
	}
}
