// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
)

func TestValidationErrors(t *testing.T) {
	const base = "api:\n  base_url: https://breaches.example.com/api/v1\n"
	for _, tc := range []struct {
		name  string
		yml   string
		wants []string // the field path first, then the bad value
	}{
		{"base_url missing", "api:\n  timeout: 5s\n", []string{"api.base_url", "required"}},
		{"base_url relative", "api:\n  base_url: breaches.example.com/api/v1\n", []string{"api.base_url", `"breaches.example.com/api/v1"`}},
		{"base_url not http", "api:\n  base_url: ftp://breaches.example.com\n", []string{"api.base_url", `"ftp://breaches.example.com"`}},
		{"base_url no host", "api:\n  base_url: 'https:///api/v1'\n", []string{"api.base_url", `"https:///api/v1"`, "no host"}},
		{"base_url query", "api:\n  base_url: https://x.org/api/v1?a=b\n", []string{"api.base_url", `"https://x.org/api/v1?a=b"`}},
		{"base_url unparsable", "api:\n  base_url: 'http://[::1'\n", []string{"api.base_url", "not a valid URL"}},
		{"requests_per_minute 0", base + "  requests_per_minute: 0\n", []string{"api.requests_per_minute", "0 is out of range 1..60"}},
		{"requests_per_minute 61", base + "  requests_per_minute: 61\n", []string{"api.requests_per_minute", "61 is out of range 1..60"}},
		{"timeout 0", base + "  timeout: 0s\n", []string{"api.timeout", "0s"}},
		{"proxy settings", base + "  no_proxy: localhost\n", []string{"api:", "no_proxy"}},
		{"interval 0", base + "refresh:\n  interval: 0s\n", []string{"refresh.interval", "0s"}},
		{"me_interval 0", base + "refresh:\n  me_interval: 0s\n", []string{"refresh.me_interval", "0s"}},
		{"labels.address", base + "labels:\n  address: name\n", []string{"labels.address", `"name"`}},
		{"bad email", base + "addresses:\n  - a@x.org\n  - b@x.org\n  - bob@\n", []string{"addresses[2]", `"bob@" is not a valid email address`}},
		{"display name", base + "addresses:\n  - 'Alice <alice@x.org>'\n", []string{"addresses[0]", `"Alice <alice@x.org>"`}},
		{"surrounding space", base + "addresses:\n  - ' alice@x.org'\n", []string{"addresses[0]", `" alice@x.org"`}},
		{"email missing", base + "addresses:\n  - {alias: ops}\n", []string{"addresses[0]", "email is required"}},
		{"duplicate address", base + "addresses: [a@x.org, b@x.org, c@x.org, A@X.org]\n", []string{"addresses[3]", `"A@X.org" duplicates addresses[0]`}},
		{"alias missing", base + "labels: {address: alias}\naddresses:\n  - {email: a@x.org, alias: a}\n  - b@x.org\n", []string{"addresses[1].alias", "required"}},
		{"alias duplicate", base + "labels: {address: alias}\naddresses:\n  - {email: a@x.org, alias: ops}\n  - {email: b@x.org, alias: ops}\n", []string{"addresses[1].alias", `"ops" duplicates addresses[0].alias`}},
		{"alias looks like a hash", base + "labels: {address: alias}\naddresses:\n  - {email: a@x.org, alias: 'sha256:0011'}\n", []string{"addresses[0].alias", `"sha256:0011"`}},
		{"alias looks like an hmac", base + "labels: {address: alias}\naddresses:\n  - {email: a@x.org, alias: 'hmac:0011'}\n", []string{"addresses[0].alias", `"hmac:0011"`}},
		// Labels are cut to 254 bytes: aliases equal up to there would be
		// one series.
		{"aliases equal in their first 254 bytes", base + "labels: {address: alias}\naddresses:\n  - {email: a@x.org, alias: " + strings.Repeat("o", 254) + "-a}\n  - b@x.org\n  - {email: c@x.org, alias: " + strings.Repeat("o", 254) + "-c}\n",
			[]string{"addresses[2].alias", "equals addresses[0].alias in its first 254 bytes"}},
		{"hmac without a key", base + "labels: {address: hmac}\n", []string{"labels.address_key_file", "required", "hmac"}},
		{"key file in hash mode", base + "labels: {address: hash, address_key_file: key}\n", []string{"labels.address_key_file", "only used", "not hash"}},
		{"key file in email mode", base + "labels: {address_key_file: key}\n", []string{"labels.address_key_file", "not email"}},
		{"secret_files empty path", base + "webhook:\n  secret_files: ['']\n", []string{"webhook.secret_files[0]", "empty path"}},
		{"secret_files duplicate", base + "webhook:\n  secret_files: [/s, /s]\n", []string{"webhook.secret_files[1]", `"/s" duplicates webhook.secret_files[0]`}},
		{"max_body_bytes 0", base + "webhook:\n  max_body_bytes: 0\n", []string{"webhook.max_body_bytes", "0 is out of range"}},
		{"max_body_bytes too big", base + "webhook:\n  max_body_bytes: 16777217\n", []string{"webhook.max_body_bytes", "16777217 is out of range 1..16777216"}},
		{"dedup_window 0", base + "webhook:\n  dedup_window: 0s\n", []string{"webhook.dedup_window", "0s"}},
		{"dedup_max_entries 0", base + "webhook:\n  dedup_max_entries: 0\n", []string{"webhook.dedup_max_entries", "0 is out of range"}},
	} {
		t.Run(tc.name, func(t *testing.T) { assertParseFails(t, tc.yml, tc.wants...) })
	}
}

func TestValidationAccepts(t *testing.T) {
	for _, tc := range []struct{ name, yml string }{
		{"no addresses (webhook only)", "api:\n  base_url: http://127.0.0.1:8080/api/v1\n"},
		{"range edges", "api:\n  base_url: https://x.org/api/v1/\n  requests_per_minute: 1\nwebhook:\n  max_body_bytes: 16777216\n  dedup_max_entries: 1\n"},
		{"60 per minute", "api:\n  base_url: https://x.org\n  requests_per_minute: 60\n"},
		{"aliases only checked in alias mode", "api:\n  base_url: https://x.org\naddresses:\n  - {email: a@x.org, alias: same}\n  - {email: b@x.org, alias: same}\n  - c@x.org\n"},
		{"hash mode", "api:\n  base_url: https://x.org\nlabels: {address: hash}\naddresses: [a@x.org]\n"},
		{"hmac mode", "api:\n  base_url: https://x.org\nlabels: {address: hmac, address_key_file: key}\naddresses: [a@x.org]\n"},
		{"alias mode with a key", "api:\n  base_url: https://x.org\nlabels: {address: alias, address_key_file: key}\naddresses: [{email: a@x.org, alias: a}]\n"},
		{"long aliases that differ early", "api:\n  base_url: https://x.org\nlabels: {address: alias}\naddresses:\n  - {email: a@x.org, alias: a" + strings.Repeat("o", 300) + "}\n  - {email: b@x.org, alias: b" + strings.Repeat("o", 300) + "}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := parseFile(t, tc.yml); err != nil {
				t.Errorf("Parse: %v", err)
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	_, err := parseFile(t, "api:\n  requests_per_minute: 99\nrefresh:\n  interval: 0s\naddresses: [nope]\n")
	if err == nil {
		t.Fatal("Parse succeeded, want errors")
	}
	for _, field := range []string{"api.base_url", "api.requests_per_minute", "refresh.interval", "addresses[0]"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not mention %s", err, field)
		}
	}
}

func TestValidateZeroConfig(t *testing.T) {
	// A Config built in code gets no defaults: Validate must still catch it.
	var c Config
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate() on a zero Config = nil")
	}
	for _, field := range []string{"api.base_url", "api.timeout", "refresh.interval", "labels.address", "webhook.max_body_bytes"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not mention %s", err, field)
		}
	}
}

func TestValidateTLSConfigBuiltInCode(t *testing.T) {
	// Parsing already rejects this through TLSConfig's own unmarshaler;
	// a Config assembled in code only meets it in Validate.
	c := mustParse(t, "api:\n  base_url: https://x.org\n")
	c.API.TLSConfig.CA = "-----BEGIN CERTIFICATE-----"
	c.API.TLSConfig.CAFile = "/ca.pem"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "api.tls_config") {
		t.Errorf("Validate() = %v, want an api.tls_config error", err)
	}
}

func TestBaseURLPasswordNeverShown(t *testing.T) {
	_, err := parseFile(t, "api:\n  base_url: https://user:hunter2@x.org/api/v1\n")
	if err == nil {
		t.Fatal("credentials in base_url accepted")
	}
	if !strings.Contains(err.Error(), "api.base_url") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q must name api.base_url and hide the password", err)
	}
}

// assertParseFails parses yml and wants an error containing every one of wants.
// Validation errors are logged (at start and on a failed reload): outside
// email mode they name an address by its index, never show it.
func TestValidationErrorsHideAddresses(t *testing.T) {
	const base = "api:\n  base_url: https://breaches.example.com/api/v1\n"
	for _, mode := range []string{"hash", "alias", "hmac"} {
		yml := base + "labels: {address: " + mode + ", address_key_file: key}\naddresses:\n" +
			"  - {email: secret.person@x.org, alias: a}\n  - {email: Secret.Person@x.org, alias: b}\n  - {email: 'Secret <secret.person@x.org>', alias: c}\n  - secret.other@x.org\n"
		if mode == "hash" {
			yml = strings.Replace(yml, ", address_key_file: key", "", 1)
		}
		_, err := parseFile(t, yml)
		if err == nil {
			t.Fatalf("%s: accepted", mode)
		}
		if strings.Contains(strings.ToLower(err.Error()), "secret") {
			t.Errorf("%s: the error shows an address: %v", mode, err)
		}
		for _, want := range []string{"addresses[1]: duplicates addresses[0]", "addresses[2]: is not a valid email address"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %q does not say %q", mode, err, want)
			}
		}
	}
}

func assertParseFails(t *testing.T, yml string, wants ...string) {
	t.Helper()
	c, err := parseFile(t, yml)
	if err == nil {
		t.Fatalf("parse = %+v, want an error", c)
	}
	for _, want := range wants {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
