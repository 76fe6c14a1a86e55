// SPDX-License-Identifier: Apache-2.0

package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The shape the owners e2e writes, with the defaults of what it leaves
// out, and relative files made relative to the config's directory.
func TestAddressesHTTPParse(t *testing.T) {
	c := mustParse(t, minimalYAML+`addresses_http:
  - {url: "http://127.0.0.1:9/owners.json", refresh_interval: 5s}
  - url: https://directory.example/export?group=all
    bearer_token_file: directory.token
    tls: {ca_file: ca.pem}
    max_shrink: 0.2
`)
	got := c.AccountsInForce()[0].AddressesHTTP
	if len(got) != 2 {
		t.Fatalf("addresses_http %+v, want two", got)
	}
	if got[0].Interval() != 5*time.Second || got[0].Timeout() != 5*time.Second || got[0].Shrink() != DefaultMaxShrink {
		t.Errorf("first: interval %s, timeout %s, shrink %v", got[0].Interval(), got[0].Timeout(), got[0].Shrink())
	}
	if got[1].Interval() != DefaultHTTPRefreshInterval || got[1].Timeout() != MaxHTTPTimeout || got[1].Shrink() != 0.2 {
		t.Errorf("second: interval %s, timeout %s, shrink %v", got[1].Interval(), got[1].Timeout(), got[1].Shrink())
	}
	if !filepath.IsAbs(got[1].BearerTokenFile) || !filepath.IsAbs(got[1].TLS.CAFile) {
		t.Errorf("files %q, %q: want them relative to the config's directory", got[1].BearerTokenFile, got[1].TLS.CAFile)
	}
	cc := got[1].ClientConfig()
	if cc.Authorization == nil || cc.Authorization.Type != "Bearer" || cc.Authorization.CredentialsFile != got[1].BearerTokenFile || cc.TLSConfig.CAFile != got[1].TLS.CAFile {
		t.Errorf("client config %+v: want the bearer token file and the TLS settings", cc)
	}
}

// Every problem names its field, in either shape.
func TestAddressesHTTPProblems(t *testing.T) {
	_, err := parseFile(t, minimalYAML+`addresses_http:
  - {url: "ftp://x.example/a", refresh_interval: 500ms, max_shrink: 1.5}
  - {url: "https://user:pw@x.example/a"}
  - {url: "http://127.0.0.1:9/a", bearer_token_file: t, basic_auth: {username: u, password_file: p}}
  - {url: "http://127.0.0.1:9/a", basic_auth: {username: u, password: secret}}
  - {refresh_interval: 0s, tls: {tls_ca_file: x}}
  - {url: "http://127.0.0.1:9/b", basic_auth: {password_file: p}}
`)
	for _, want := range []string{
		`addresses_http[0].url: "ftp://x.example/a" must be an absolute http:// or https:// URL`,
		"addresses_http[0].refresh_interval: 500ms must be at least 1s",
		"addresses_http[0].max_shrink: 1.5 must be a share from 0 to 1",
		"addresses_http[1].url: \"https://user:xxxxx@x.example/a\" must not contain credentials",
		"addresses_http[2]: bearer_token_file and basic_auth are mutually exclusive",
		"addresses_http[3].url: duplicates addresses_http[2].url",
		"addresses_http[3].basic_auth.password: a secret is not written in the config: use password_file",
		"addresses_http[4].url: is required",
		"addresses_http[4].refresh_interval: 0s must be at least 1s",
		`addresses_http[4].tls: unknown key "tls_ca_file"`,
		"addresses_http[5].basic_auth.username: is required",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "user:pw@") {
		t.Error("a password in a URL reaches the error")
	}

	_, err = parseFile(t, twoAccountsYAML+`    addresses_http: [{url: "http://127.0.0.1:9/a"}]
addresses_http: [{url: "http://127.0.0.1:9/a"}]
`)
	for _, want := range []string{
		"addresses_http: not with accounts",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	var many strings.Builder
	many.WriteString(minimalYAML + "addresses_http:\n")
	for i := range MaxAddressesHTTP + 1 {
		many.WriteString("  - {url: \"http://127.0.0.1:9/" + string(rune('a'+i)) + "\"}\n")
	}
	if _, err := parseFile(t, many.String()); err == nil || !strings.Contains(err.Error(), "addresses_http: 11 entries, at most 10") {
		t.Errorf("%d sources: %v, want the limit named", MaxAddressesHTTP+1, err)
	}
}

// One URL is one source across accounts.
func TestAddressesHTTPOnceAcrossAccounts(t *testing.T) {
	yml := strings.Replace(twoAccountsYAML, "    addresses: [alice@corp.example]\n",
		"    addresses: [alice@corp.example]\n    addresses_http: [{url: \"http://127.0.0.1:9/a\"}]\n", 1) +
		"    addresses_http: [{url: \"http://127.0.0.1:9/a\"}]\n"
	_, err := parseFile(t, yml)
	if want := "accounts[1].addresses_http[0].url: duplicates accounts[0].addresses_http[0].url"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v lacks %q", err, want)
	}
}

// The load reads the credential files as every file (a missing one is a
// problem of the field), and names the field.
func TestLoadBundleChecksHTTPFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_test\n")
	path := writeFile(t, dir, "config.yml", "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"+
		"addresses_http:\n  - {url: 'http://127.0.0.1:9/a', bearer_token_file: missing.token}\n"+
		"  - {url: 'http://127.0.0.1:9/b', basic_auth: {username: u, password_file: missing.pw}, tls: {ca_file: missing.pem}}\n")
	_, err := LoadBundle(path, LoadOptions{})
	for _, want := range []string{
		"addresses_http[0].bearer_token_file: ",
		"addresses_http[1].basic_auth.password_file: ",
		"addresses_http[1].tls: ",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	writeFile(t, dir, "missing.token", "t\n")
	writeFile(t, dir, "missing.pw", "p\n")
	path = writeFile(t, dir, "config.yml", "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"+
		"addresses_http:\n  - {url: 'http://127.0.0.1:9/a', bearer_token_file: missing.token}\n"+
		"  - {url: 'http://127.0.0.1:9/b', basic_auth: {username: u, password_file: missing.pw}}\n")
	if _, err := LoadBundle(path, LoadOptions{}); err != nil {
		t.Errorf("with the files: %v", err)
	}
}
