package config

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"

	commoncfg "github.com/prometheus/common/config"
)

// APIMaxResponseBytes caps a response body from the API: the largest honest
// answer (one address, four feeds) is a few kilobytes.
const APIMaxResponseBytes = 4 << 20

// Snapshot is everything one load of the configuration produced: the file,
// the token, the webhook secrets and the HTTP client for the API. It is
// immutable; a reload builds a new one and swaps it whole (Current), so no
// reader ever sees half of one config and half of another.
type Snapshot struct {
	Config *Config
	// BaseURL is api.base_url, parsed.
	BaseURL *url.URL
	// Token is the API token, re-read from its file after a 401.
	Token *TokenSource
	// Secrets are the webhook's HMAC keys, in webhook.secret_files order;
	// at least one when the receiver is on.
	Secrets [][]byte
	// HTTPClient carries api.tls_config and the proxy settings.
	HTTPClient *http.Client
}

// LoadOptions are the parts of a load that come from flags.
type LoadOptions struct {
	UserAgent string // sent with every API request
	// Webhook is true when the receiver is on: a secret is then required.
	Webhook bool
}

// LoadSnapshot is the one load path, for a start, a reload and
// --config.check alike: the file, the token, the secrets and the HTTP
// client. Any error leaves nothing half-loaded.
func LoadSnapshot(path string, o LoadOptions) (*Snapshot, error) {
	cfg, err := Load(path)
	if err != nil {
		return nil, err
	}
	secrets, err := cfg.Webhook.ReadSecrets()
	if err != nil {
		return nil, err
	}
	if o.Webhook && len(secrets) == 0 {
		return nil, fmt.Errorf("webhook: the receiver is enabled (--webhook.listen-address) but no secret is configured: set webhook.secret_files or %s", WebhookSecretEnv)
	}
	// Validate has checked the URL; this only keeps the parsed form.
	baseURL, err := url.Parse(cfg.API.BaseURL)
	if err != nil {
		return nil, fmt.Errorf("api.base_url: %w", err)
	}
	token, err := cfg.API.ReadToken()
	if err != nil {
		return nil, err
	}
	httpClient, err := commoncfg.NewClientFromConfig(commoncfg.HTTPClientConfig{
		TLSConfig:   cfg.API.TLSConfig,
		ProxyConfig: cfg.API.ProxyConfig,
	}, "breach_api", commoncfg.WithUserAgent(o.UserAgent))
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	return &Snapshot{
		Config:     cfg,
		BaseURL:    baseURL,
		Token:      NewTokenSource(token, cfg.API.ReadToken),
		Secrets:    secrets,
		HTTPClient: httpClient,
	}, nil
}

// Current holds the snapshot in force. Readers take it once per unit of work
// (a request, a scrape, a webhook) and use that one throughout.
type Current struct{ p atomic.Pointer[Snapshot] }

// NewCurrent returns a holder of s.
func NewCurrent(s *Snapshot) *Current {
	c := &Current{}
	c.p.Store(s)
	return c
}

// Load returns the snapshot in force.
func (c *Current) Load() *Snapshot { return c.p.Load() }

// Store puts s in force.
func (c *Current) Store(s *Snapshot) { c.p.Store(s) }

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
