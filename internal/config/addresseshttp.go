// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	commoncfg "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// AddressesHTTP is one entry of addresses_http: a URL that answers an
// account's addresses with their owner labels in Prometheus' http_sd
// shape (the file_sd shape of addresses_sd_files, by HTTP), fetched every
// refresh_interval by internal/addrhttp. The key names are the issue's
// (tls, not Prometheus' tls_config); ClientConfig maps them.
type AddressesHTTP struct {
	URL string `yaml:"url"`
	// RefreshInterval is how often the URL is fetched; nil: the default.
	RefreshInterval *model.Duration `yaml:"refresh_interval"`
	// BearerTokenFile holds the token sent as "Authorization: Bearer",
	// read on every request (a rotated token needs no reload).
	BearerTokenFile string               `yaml:"bearer_token_file"`
	BasicAuth       *commoncfg.BasicAuth `yaml:"basic_auth"`
	TLS             commoncfg.TLSConfig  `yaml:"tls"`
	// MaxShrink is the share of its addresses by which a list may shrink
	// from the last good one and be taken at once; a list that shrinks
	// more is held as a failure until the same list is answered twice in
	// a row (a directory export cut short looks just like that). nil: the
	// default.
	MaxShrink *float64 `yaml:"max_shrink"`
}

// The defaults and limits of addresses_http.
const (
	// DefaultHTTPRefreshInterval is Prometheus' http_sd default.
	DefaultHTTPRefreshInterval = time.Minute
	// MinHTTPRefreshInterval keeps a source from fetching in a tight loop;
	// a second still lets a test see a change at once.
	MinHTTPRefreshInterval = time.Second
	// MaxHTTPTimeout bounds one fetch, answer and body: the timeout is the
	// refresh interval, at most this, so fetches never overlap and a hung
	// server holds a source (and a start) back this long at most.
	MaxHTTPTimeout = 10 * time.Second
	// DefaultMaxShrink: a list that loses more than half its addresses at
	// once is held until it is answered twice in a row.
	DefaultMaxShrink = 0.5
	// MaxAddressesHTTP bounds an account's addresses_http: each is a
	// goroutine, a client and seven series.
	MaxAddressesHTTP = 10
)

// Interval is refresh_interval, or its default.
func (h *AddressesHTTP) Interval() time.Duration {
	if h.RefreshInterval == nil {
		return DefaultHTTPRefreshInterval
	}
	return time.Duration(*h.RefreshInterval)
}

// Timeout bounds one fetch: never longer than the interval, so that the
// next fetch never waits for the one before.
func (h *AddressesHTTP) Timeout() time.Duration { return min(h.Interval(), MaxHTTPTimeout) }

// Shrink is max_shrink, or its default.
func (h *AddressesHTTP) Shrink() float64 {
	if h.MaxShrink == nil {
		return DefaultMaxShrink
	}
	return *h.MaxShrink
}

// ClientConfig is the entry's authentication and TLS in prometheus/common's
// terms, from which the source's HTTP client is built.
func (h *AddressesHTTP) ClientConfig() commoncfg.HTTPClientConfig {
	c := commoncfg.HTTPClientConfig{
		BasicAuth:       h.BasicAuth,
		TLSConfig:       h.TLS,
		FollowRedirects: true,
		EnableHTTP2:     true,
	}
	if h.BearerTokenFile != "" {
		c.Authorization = &commoncfg.Authorization{Type: "Bearer", CredentialsFile: h.BearerTokenFile}
	}
	return c
}

func (h *AddressesHTTP) setDirectory(dir string) {
	h.BearerTokenFile = commoncfg.JoinDir(dir, h.BearerTokenFile)
	if h.BasicAuth != nil {
		h.BasicAuth.SetDirectory(dir)
	}
	h.TLS.SetDirectory(dir)
}

// validateAddressesHTTP checks an account's addresses_http (path is the
// key with its account's prefix); urls holds every URL seen so far, in
// every account, by where it is: one URL is one source, one set of series.
func validateAddressesHTTP(path string, sources []AddressesHTTP, urls map[string]string, fail func(string, ...any)) {
	if len(sources) > MaxAddressesHTTP {
		fail("%s: %d entries, at most %d", path, len(sources), MaxAddressesHTTP)
	}
	for i := range sources {
		h := &sources[i]
		at := fmt.Sprintf("%s[%d]", path, i)
		if h.URL == "" {
			fail("%s.url: is required", at)
		} else if err := checkSourceURL(h.URL); err != nil {
			fail("%s.url: %w", at, err)
		} else if other, dup := urls[h.URL]; dup {
			fail("%s.url: duplicates %s.url", at, other)
		} else {
			urls[h.URL] = at
		}
		if d := h.Interval(); d < MinHTTPRefreshInterval {
			fail("%s.refresh_interval: %s must be at least %s", at, model.Duration(d), model.Duration(MinHTTPRefreshInterval))
		}
		if s := h.Shrink(); s < 0 || s > 1 {
			fail("%s.max_shrink: %v must be a share from 0 to 1 (0.5: half the addresses)", at, s)
		}
		h.validateAuth(at, fail)
	}
}

// validateAuth checks the entry at path's authentication and TLS. Secrets
// come from files only, as everywhere in this config.
func (h *AddressesHTTP) validateAuth(at string, fail func(string, ...any)) {
	if b := h.BasicAuth; b != nil {
		switch {
		case h.BearerTokenFile != "":
			fail("%s: bearer_token_file and basic_auth are mutually exclusive", at)
		case b.Password != "":
			fail("%s.basic_auth.password: a secret is not written in the config: use password_file", at)
		case b.UsernameRef != "" || b.PasswordRef != "":
			fail("%s.basic_auth: username_ref and password_ref need a secret manager, which the exporter has not: use username and password_file", at)
		case b.Username == "" && b.UsernameFile == "":
			fail("%s.basic_auth.username: is required", at)
		}
	}
	if err := h.TLS.Validate(); err != nil {
		fail("%s.tls: %w", at, err)
	}
}

// checkFiles reads the entry's credential and TLS files as the exporter
// reads every file (fileread: regular, bounded, never blocking), so that
// the client, which reads them itself on every request or handshake,
// finds regular files; a bad one is said at the load, not at the fetch.
func (h *AddressesHTTP) checkFiles(at string) error {
	var errs []error
	for _, f := range []struct{ key, path string }{{"bearer_token_file", h.BearerTokenFile}, {"basic_auth.password_file", h.basicAuthFile()}} {
		if f.path == "" {
			continue
		}
		if _, err := fileread.Read(f.path, fileread.MaxSecretBytes); err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", at, f.key, err))
		}
	}
	if err := checkTLSFiles(h.TLS.CAFile, h.TLS.CertFile, h.TLS.KeyFile); err != nil {
		errs = append(errs, fmt.Errorf("%s.tls: %w", at, err))
	}
	return errors.Join(errs...)
}

func (h *AddressesHTTP) basicAuthFile() string {
	if h.BasicAuth == nil {
		return ""
	}
	return h.BasicAuth.PasswordFile
}

// checkSourceURL checks an addresses_http URL: absolute, http or https,
// with no credentials (they go in bearer_token_file or basic_auth). A
// query is allowed (a directory export may select by it).
func checkSourceURL(raw string) error {
	u, shown, err := parseURL(raw)
	if err != nil {
		return err
	}
	if u.User != nil {
		return fmt.Errorf("%q must not contain credentials; use bearer_token_file or basic_auth", shown)
	}
	return nil
}

// parseURL parses raw as an absolute http:// or https:// URL with a host,
// and returns it with how an error shows it: redacted, so that a password
// in it never reaches a log.
func parseURL(raw string) (*url.URL, echo, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the raw URL; keep only the reason.
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err
		}
		return nil, "", fmt.Errorf("not a valid URL: %w", err)
	}
	shown := echo(u.Redacted())
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, "", fmt.Errorf("%q must be an absolute http:// or https:// URL", shown)
	case u.Host == "":
		return nil, "", fmt.Errorf("%q has no host", shown)
	}
	return u, shown, nil
}
