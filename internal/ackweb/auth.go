// SPDX-License-Identifier: Apache-2.0

package ackweb

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// Auth is how a write's user is known. exporter-toolkit checks basic auth
// and client certificates before any handler runs, for every request of
// the listener, when the web config asks for them: the handler cannot see
// that check, so it trusts a request's user only when the web config
// makes the check happen (BasicAuth, ClientCerts), or from a header that an
// authenticating proxy sets, only on connections from the proxy.
type Auth struct {
	// BasicAuth: the web config has basic_auth_users, so every request
	// here passed the toolkit's password check; the user is its name.
	BasicAuth bool
	// ClientCerts: the web config requires and verifies client
	// certificates; the user is the certificate's common name.
	ClientCerts bool
	// UserHeader is the header an authenticating proxy sets to the user
	// (--web.acknowledgements.user-header); empty: none is trusted.
	UserHeader string
	// Proxies are the addresses the header is accepted from
	// (--web.acknowledgements.proxy).
	Proxies []netip.Prefix
}

// Any reports whether some way of authenticating writes is configured.
func (a Auth) Any() bool {
	return a.BasicAuth || a.ClientCerts || (a.UserHeader != "" && len(a.Proxies) > 0)
}

// ReadWebConfig returns the Auth that the exporter-toolkit web config at
// path ("" for none) gives: whether it has basic_auth_users and whether it
// requires verified client certificates.
func ReadWebConfig(path string) (Auth, error) {
	if path == "" {
		return Auth{}, nil
	}
	data, err := fileread.Read(path, fileread.MaxWebConfigBytes)
	if err != nil {
		return Auth{}, err
	}
	var wc struct {
		Users map[string]string `yaml:"basic_auth_users"`
		TLS   struct {
			ClientAuth string `yaml:"client_auth_type"`
		} `yaml:"tls_server_config"`
	}
	if err := yaml.Unmarshal(data, &wc); err != nil {
		return Auth{}, fmt.Errorf("%s: %w", path, err)
	}
	return Auth{BasicAuth: len(wc.Users) > 0, ClientCerts: wc.TLS.ClientAuth == "RequireAndVerifyClientCert"}, nil
}

// ParseProxies parses --web.acknowledgements.proxy: addresses or CIDR
// prefixes, comma-separated.
func ParseProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for v := range strings.SplitSeq(list, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if p, err := netip.ParsePrefix(v); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("--web.acknowledgements.proxy %q is neither an address nor a CIDR prefix", v)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// auth is the Auth in force for a request: Options.Auth, with what the
// web config says now. A web config that cannot be read trusts neither
// basic auth nor certificates (the toolkit then refuses the request
// anyway).
func (h *Handler) auth() Auth {
	a := h.o.Auth
	if h.o.WebConfigFile == "" {
		return a
	}
	wc, err := ReadWebConfig(h.o.WebConfigFile)
	if err != nil {
		wc = Auth{}
	}
	a.BasicAuth, a.ClientCerts = wc.BasicAuth, wc.ClientCerts
	return a
}

// Errors of user, each a refusal's reason.
var (
	errUntrustedProxy  = errors.New("the user header is accepted only from a configured proxy")
	errUnauthenticated = errors.New("writing needs an authenticated user: basic auth or client certificates in --web.config.file, or --web.acknowledgements.user-header from a --web.acknowledgements.proxy")
)

// user returns the authenticated user of r and how it was authenticated.
func (a Auth) user(r *http.Request) (name, how string, err error) {
	if a.UserHeader != "" {
		if v := r.Header.Get(a.UserHeader); v != "" {
			if !a.fromProxy(r.RemoteAddr) {
				return "", "", errUntrustedProxy
			}
			return bounded(v), "proxy", nil
		}
	}
	if a.ClientCerts && r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.VerifiedChains[0]) > 0 {
		return bounded(r.TLS.VerifiedChains[0][0].Subject.CommonName), "client_certificate", nil
	}
	if a.BasicAuth {
		if u, _, ok := r.BasicAuth(); ok && u != "" {
			return bounded(u), "basic_auth", nil
		}
	}
	return "", "", errUnauthenticated
}

func (a Auth) fromProxy(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	addr, err := netip.ParseAddr(host)
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	for _, p := range a.Proxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// bounded is a user name cut to what by holds, as valid UTF-8: it fills
// by and goes into the audit line.
func bounded(s string) string {
	s = strings.ToValidUTF8(s, "?")
	for len(s) > acknowledge.MaxByBytes {
		_, n := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-n]
	}
	return s
}
