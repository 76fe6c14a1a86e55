// SPDX-License-Identifier: Apache-2.0

package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	commoncfg "github.com/prometheus/common/config"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/addrfile"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// APIMaxResponseBytes caps a response body from the API: the largest honest
// answer (one address, four feeds) is a few kilobytes.
const APIMaxResponseBytes = 4 << 20

// Bundle is everything one load of the configuration produced: the file,
// the token, the webhook secrets and the HTTP client for the API. It is
// immutable; a reload builds a new one and swaps it whole (Current), so no
// reader ever sees half of one config and half of another.
type Bundle struct {
	Config *Config
	// Accounts are the accounts in force (Config.AccountsInForce), in
	// file order, each with its key and secrets.
	Accounts []*AccountBundle
	// HTTPClient carries api.tls_config and the proxy settings, the same
	// for every account.
	HTTPClient *http.Client
	// Labels makes the address labels: labels.address, with the key of
	// labels.address_key_file when one is set.
	Labels breach.Labeler
	// Warnings name what is wrong in the file but unused, such as an
	// unreadable secret file while the receiver is off.
	Warnings []string
	// Acknowledgements are those of acknowledgements_file; nil without one.
	Acknowledgements *acknowledge.Set
	// StorePassword is the content of store.password_file; empty without
	// one. Never logged, never in an error.
	StorePassword string
	// StoreSentinelPassword is the content of
	// store.sentinel_password_file, as StorePassword.
	StoreSentinelPassword string
	// StoreTLS is store.tls with its files read; nil without it.
	StoreTLS *tls.Config
	// StoreSigningKeys are the lines of store.signing_key_file; nil
	// without one. Never logged, never in an error.
	StoreSigningKeys [][]byte
}

// AccountBundle is what one load produced for one account.
type AccountBundle struct {
	Name string
	// Config is the account's entry (Config.AccountsInForce).
	Config Account
	// BaseURL is api.base_url, parsed.
	BaseURL *url.URL
	// Token is the API token, re-read from its file after a 401.
	Token *TokenSource
	// Secrets are the account's webhook HMAC keys, in
	// webhook.secret_files order; at least one when the receiver is on,
	// none when it is off.
	Secrets [][]byte
}

// Account returns the named account's part of the bundle; nil when the
// bundle has no such account (a reload removed it).
func (b *Bundle) Account(name string) *AccountBundle {
	for _, a := range b.Accounts {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// LoadOptions are the parts of a load that come from flags.
type LoadOptions struct {
	UserAgent string // sent with every API request
	// Webhook is true when the receiver is on: a secret is then required.
	// Off, the secrets are not needed, and one that cannot be read is a
	// warning, so dropping the webhook flags is enough to start without it.
	Webhook bool
	// WebConfigs are the listeners' web config files, read by
	// exporter-toolkit; each load checks them (checkWebConfig).
	WebConfigs []WebConfig
	// AddressFiles makes every problem of the address files a problem of
	// the load: for --config.check. A start or a reload goes on without
	// them, since the exporter reads those files on its own (a broken one
	// keeps its last good content) and no config change can fix them.
	AddressFiles bool
}

// LoadBundle is the one load path, for a start, a reload and
// --config.check alike: the file, the token, the secrets, the HTTP client
// and the acknowledgements. Its error is a Problems with everything wrong at once, each
// naming the file (and the line where the file has it); any error leaves
// nothing half-loaded. The bundle's Warnings are what is wrong but does not
// stop a start.
func LoadBundle(path string, o LoadOptions) (*Bundle, error) {
	cfg, lines, problems := load(path)
	if cfg == nil {
		return nil, problems
	}
	l := bundleLoader{file: path, lines: lines, problems: problems}
	b := &Bundle{Config: cfg}

	tokens := l.readAccounts(b, o.Webhook)
	for _, w := range o.WebConfigs {
		if w.File != "" {
			l.add(checkWebConfig(w))
		}
	}
	l.httpClient(b, o.UserAgent)
	labels, err := labelerOf(&cfg.Labels)
	l.add(err)
	if labels != nil {
		l.add(checkLabelsUnique(cfg, labels))
	}
	l.readFiles(b)
	if o.AddressFiles {
		l.problems = append(l.problems, addressFileProblems(cfg)...)
	}
	if len(l.problems) > 0 {
		return nil, l.problems.capped()
	}
	for i, a := range b.Accounts {
		path, file, single := cfg.accountPath(i), a.Config.API.TokenFile, cfg.Single()
		a.Token = NewTokenSource(tokens[i], func() (string, error) { return readToken(path, file, single) })
	}
	b.Labels = labels
	return b, nil
}

// httpClient checks the TLS files and, when nothing is wrong so far,
// builds b's API client and the accounts' base URLs.
func (l *bundleLoader) httpClient(b *Bundle, userAgent string) {
	cfg := b.Config
	// The API client reads these itself (and the CA file again on new
	// connections when it changed); checked first, they are regular files
	// of bounded size when it does.
	tls := &cfg.API.TLSConfig
	if err := checkTLSFiles(tls.CAFile, tls.CertFile, tls.KeyFile); err != nil {
		l.add(fmt.Errorf("api.tls_config: %w", err))
	}
	for i, a := range cfg.AccountsInForce() {
		for j := range a.AddressesHTTP {
			l.add(a.AddressesHTTP[j].checkFiles(fmt.Sprintf("%saddresses_http[%d]", cfg.accountPath(i), j)))
		}
	}
	if len(l.problems) > 0 {
		// Only a valid config has a client to build: its TLS and proxy
		// problems are already listed otherwise.
		return
	}
	var err error
	for _, a := range b.Accounts {
		a.BaseURL, err = url.Parse(a.Config.API.BaseURL)
		l.add(err)
	}
	b.HTTPClient, err = commoncfg.NewClientFromConfig(commoncfg.HTTPClientConfig{
		TLSConfig:   cfg.API.TLSConfig,
		ProxyConfig: cfg.API.ProxyConfig,
	}, "breach_api", commoncfg.WithUserAgent(userAgent))
	if err != nil {
		l.add(fmt.Errorf("api.tls_config: %w", err))
	}
}

// readFiles reads the acknowledgements and the store's password into b.
func (l *bundleLoader) readFiles(b *Bundle) {
	cfg := b.Config
	var err error
	if cfg.AcknowledgementsFile != "" {
		b.Acknowledgements, err = acknowledge.Load(cfg.AcknowledgementsFile, time.Now())
		for _, p := range acknowledge.Problems(err) {
			l.add(fmt.Errorf("acknowledgements_file: %w", p))
		}
	}
	for _, err := range cfg.Store.readFiles(b) {
		l.add(err)
	}
	if cfg.Store != nil && cfg.Store.hasPassword() {
		b.Warnings = append(b.Warnings, l.placed(errors.New(StorePasswordWarning)).Error())
	}
}

// readAccounts reads every account's token and secrets into b.Accounts,
// and returns the tokens, in the accounts' order. Two accounts with one
// secret would not know whose an alert is, and two with one token would
// spend one key's budget twice: both are problems, with the receiver on
// or off, so that a --config.check without the webhook flags refuses what
// a start with them refuses.
func (l *bundleLoader) readAccounts(b *Bundle, webhook bool) []string {
	cfg := b.Config
	tokens := make([]string, 0, len(cfg.AccountsInForce()))
	tokenOf := map[string]string{}
	secretOf := map[string]string{}
	for i, a := range cfg.AccountsInForce() {
		path := cfg.accountPath(i)
		ab := &AccountBundle{Name: a.Name, Config: a}
		b.Accounts = append(b.Accounts, ab)
		for j, secret := range l.readSecrets(b, ab, path, webhook) {
			if other, dup := secretOf[string(secret)]; dup && other != a.Name {
				l.add(fmt.Errorf("%swebhook.secret_files[%d]: holds the same secret as account %q: an alert must belong to one account", path, j, other))
			}
			secretOf[string(secret)] = a.Name
		}
		token, err := readToken(path, a.API.TokenFile, cfg.Single())
		l.add(err)
		if other, dup := tokenOf[token]; dup && err == nil {
			l.add(fmt.Errorf("%sapi.token_file: holds the same token as account %q: one key has one budget", path, other))
		}
		tokenOf[token] = a.Name
		tokens = append(tokens, token)
	}
	return tokens
}

// readSecrets reads the secrets of the account ab (at path) and returns
// those it read, receiver on or off; ab keeps them only with the receiver
// on, which needs at least one.
func (l *bundleLoader) readSecrets(b *Bundle, ab *AccountBundle, path string, webhook bool) [][]byte {
	single := b.Config.Single()
	secrets, err := readSecrets(path, ab.Config.Webhook.SecretFiles, single)
	switch {
	case !webhook && err != nil:
		for _, p := range l.placed(err) {
			b.Warnings = append(b.Warnings, p.Error()+" (ignored: the receiver is off)")
		}
	case err != nil:
		l.add(err)
	case len(secrets) == 0 && webhook && single:
		l.add(fmt.Errorf("webhook: the receiver is enabled (--webhook.listen-address) but no secret is configured: set webhook.secret_files or %s", WebhookSecretEnv))
	case len(secrets) == 0 && webhook:
		l.add(fmt.Errorf("%swebhook.secret_files: the receiver is enabled (--webhook.listen-address): every account needs a secret", path))
	case webhook:
		ab.Secrets = secrets
	}
	return secrets
}

// addressFileProblems reads the address files as the exporter will and
// returns what it would count and log, each with the file and, for a line,
// its line.
func addressFileProblems(cfg *Config) Problems {
	var globs, sdGlobs []string
	for _, a := range cfg.AccountsInForce() {
		globs = append(globs, Globs(a.AddressesFiles)...)
		sdGlobs = append(sdGlobs, a.AddressesSDFiles...)
	}
	sd := addrfile.NewSDSource(nil)
	sd.Allow(cfg.OwnerLabels)
	return append(readProblems("addresses_files", addrfile.NewSource(nil), globs, cfg),
		readProblems("addresses_sd_files", sd, sdGlobs, cfg)...)
}

// readProblems reads globs with src and returns its problems, each
// starting with key.
func readProblems(key string, src *addrfile.Source, globs []string, cfg *Config) Problems {
	r := src.Read(globs, time.Now(), cfg.Labels.ShowsAddresses())
	var ps Problems
	for _, err := range r.Failed {
		ps = append(ps, Problem{Msg: key + ": " + err.Error()})
	}
	for _, e := range r.Invalid {
		ps = append(ps, Problem{File: e.File, Line: e.Line, Msg: key + ": " + e.Reason})
	}
	if r.OverLimit > 0 {
		ps = append(ps, Problem{Msg: fmt.Sprintf("%s: %d files past the limit of %d a glob would not be read", key, r.OverLimit, addrfile.MaxFilesPerGlob)})
	}
	return ps
}

// bundleLoader collects the problems of the steps after the file's own.
type bundleLoader struct {
	file     string
	lines    lineIndex
	problems Problems
}

func (l *bundleLoader) placed(err error) Problems {
	return problemsOf(err).place(l.file, l.lines)
}

func (l *bundleLoader) add(err error) {
	l.problems = append(l.problems, l.placed(err)...)
}

// labelerOf reads the label key, if any, and returns what makes the labels:
// none (nil) when the key cannot be read, or when hmac has no key file,
// which Validate reports; a LabelMode of hmac would panic on its first
// label.
func labelerOf(l *LabelsConfig) (breach.Labeler, error) {
	key, err := l.ReadLabelKey()
	switch {
	case err != nil:
		return nil, err
	case key != nil:
		return breach.Keyed{Mode: l.Address, Key: key}, nil
	case l.Address == breach.LabelHMAC:
		return nil, nil
	}
	return l.Address, nil
}

// checkLabelsUnique fails when two configured addresses get the same label
// under labels: their series would be one. Validate already refuses equal
// emails and aliases; this also covers the hashes, which only the key (read
// here, not by Validate) determines.
func checkLabelsUnique(c *Config, labels breach.Labeler) error {
	addresses, paths := c.Watched(), c.addressPaths()
	seen := make(map[string]int, len(addresses))
	for i, a := range addresses {
		label := labels.Label(a)
		if j, dup := seen[label]; dup {
			return fmt.Errorf("%s and %s get the same address label %q: change an alias or the label key", paths[j], paths[i], label)
		}
		seen[label] = i
	}
	return nil
}

// Current holds the bundle in force. Readers take it once per unit of work
// (a request, a scrape, a webhook) and use that one throughout.
type Current struct{ p atomic.Pointer[Bundle] }

// NewCurrent returns a holder of s.
func NewCurrent(s *Bundle) *Current {
	c := &Current{}
	c.p.Store(s)
	return c
}

// Load returns the bundle in force.
func (c *Current) Load() *Bundle { return c.p.Load() }

// Store puts s in force.
func (c *Current) Store(s *Bundle) { c.p.Store(s) }

// TokenSource holds the API token and re-reads its file after a 401, so a
// token rotated in the file is picked up without a restart or reload.
type TokenSource struct {
	mu    sync.RWMutex
	token string
	read  func() (string, error)
}

// NewTokenSource returns a source holding token that re-reads with read.
func NewTokenSource(token string, read func() (string, error)) *TokenSource {
	return &TokenSource{token: token, read: read}
}

// Get returns the current token.
func (t *TokenSource) Get() string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.token
}

// ErrSameToken says the token file still holds the token the API rejected.
var ErrSameToken = errors.New("the token file still holds the same token: rotate it in the dashboard and update the file")

// Reread reads the token again. It returns ErrSameToken when nothing
// changed, and keeps the old token when the file cannot be read.
func (t *TokenSource) Reread() error {
	token, err := t.read()
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if token == t.token {
		return ErrSameToken
	}
	t.token = token
	return nil
}
