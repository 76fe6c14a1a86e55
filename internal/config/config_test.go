// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

const minimalYAML = "api:\n  base_url: https://breaches.example.com/api/v1\n"

// loadFile is the file's part of LoadBundle (load): strict parse,
// defaults, validation, relative paths made relative to the file's
// folder; not the token nor the secrets.
func loadFile(path string) (*Config, error) {
	c, _, problems := load(path)
	if len(problems) > 0 {
		return nil, problems
	}
	return c, nil
}

// parseFile is loadFile of yml, written to config.yml in a folder of the
// test's.
func parseFile(t *testing.T, yml string) (*Config, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return loadFile(path)
}

func mustParse(t *testing.T, yml string) *Config {
	t.Helper()
	c, err := parseFile(t, yml)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, yml)
	}
	return c
}

func minutes(n int) model.Duration { return model.Duration(time.Duration(n) * time.Minute) }

func TestDefaults(t *testing.T) {
	// The same defaults apply whether a section is absent or present but
	// empty (a null node, e.g. "refresh:" with its keys commented out).
	inputs := map[string]string{
		"absent sections": minimalYAML,
		"empty sections":  minimalYAML + "refresh:\nlabels:\nwebhook:\naddresses:\n",
		"partial section": minimalYAML + "  token_file: /t\nwebhook:\n  secret_files: [/s]\n",
	}
	for name, yml := range inputs {
		t.Run(name, func(t *testing.T) {
			c := mustParse(t, yml)
			for _, tc := range []struct {
				field     string
				got, want any
			}{
				{"api.requests_per_minute", c.API.RequestsPerMinute, 55},
				{"api.timeout", c.API.Timeout, model.Duration(10 * time.Second)},
				{"api.tls_config", c.API.TLSConfig, config.TLSConfig{}},
				{"refresh.interval", c.Refresh.Interval, minutes(15)},
				{"refresh.me_interval", c.Refresh.MeInterval, minutes(5)},
				{"labels.address", c.Labels.Address, breach.LabelEmail},
				{"webhook.max_body_bytes", c.Webhook.MaxBodyBytes, int64(65536)},
				{"webhook.dedup_window", c.Webhook.DedupWindow, model.Duration(24 * time.Hour)},
				{"webhook.dedup_max_entries", c.Webhook.DedupMaxEntries, 100000},
				{"webhook.max_event_age", c.Webhook.MaxEventAge, model.Duration(0)},
				{"webhook.discover_addresses", c.Webhook.Discover(), true},
				{"webhook.max_discovered_addresses", c.Webhook.DiscoveryLimit(), 1000},
				{"addresses", len(c.Addresses), 0},
			} {
				if !reflect.DeepEqual(tc.got, tc.want) {
					t.Errorf("%s = %v, want %v", tc.field, tc.got, tc.want)
				}
			}
		})
	}
}

func TestLoadFullExample(t *testing.T) {
	c, err := loadFile(filepath.Join("testdata", "full.yml"))
	if err != nil {
		t.Fatal(err)
	}
	discover := false
	want := Config{
		API: APIConfig{
			BaseURL:           "https://breaches.example.com/api/v1",
			TokenFile:         "/run/secrets/breach_api_token",
			RequestsPerMinute: 30,
			Timeout:           model.Duration(20 * time.Second),
		},
		Refresh: RefreshConfig{Interval: minutes(30), MeInterval: minutes(10), FilesInterval: minutes(1)},
		Addresses: []Address{
			{Email: "alice@example.com", Labels: map[string]string{"team": "payments", "owner": "jdoe"}},
			{Email: "ops@example.com", Alias: "ops"},
			{Email: "Security.Team@Example.org", Alias: "security"},
		},
		// A relative glob is relative to the config's directory.
		AddressesFiles: []AddressFiles{{Glob: "/etc/breach_exporter/addresses/*.txt"},
			{Glob: filepath.Join("testdata", "departments", "*.yaml"), Labels: map[string]string{"team": "it"}}},
		AddressesSDFiles: []string{filepath.Join("testdata", "owners", "*.json")},
		OwnerLabels:      []string{"team", "owner", "cost_center"},
		Labels:           LabelsConfig{Address: "email"},
		Webhook: WebhookConfig{
			SecretFiles:            []string{"/run/secrets/breach_webhook_secret", "/run/secrets/breach_webhook_secret.next"},
			MaxBodyBytes:           131072,
			DedupWindow:            model.Duration(12 * time.Hour),
			DedupMaxEntries:        5000,
			MaxEventAge:            model.Duration(time.Hour),
			DiscoverAddresses:      &discover,
			MaxDiscoveredAddresses: 1000,
		},
	}
	// The prometheus/common types are compared field by field: they hold
	// unexported state that DeepEqual would trip on.
	tls, proxy := c.API.TLSConfig, c.API.ProxyConfig
	c.API.TLSConfig, c.API.ProxyConfig = config.TLSConfig{}, config.ProxyConfig{}
	if !reflect.DeepEqual(*c, want) {
		t.Errorf("loadFile(full.yml) =\n%+v\nwant\n%+v", *c, want)
	}
	if tls.CAFile != "/etc/ssl/certs/breaches-ca.pem" || tls.ServerName != "breaches.example.com" || tls.MinVersion != config.TLSVersions["TLS12"] {
		t.Errorf("tls_config = %+v", tls)
	}
	if proxy.ProxyURL.URL == nil || proxy.ProxyURL.String() != "http://proxy.example.com:3128" || proxy.NoProxy != "localhost,127.0.0.1" {
		t.Errorf("proxy settings = %+v", proxy)
	}
	if c.Webhook.Discover() || c.Webhook.DiscoveryLimit() != 0 {
		t.Errorf("Discover() = %v, DiscoveryLimit() = %d; want false and 0 as configured", c.Webhook.Discover(), c.Webhook.DiscoveryLimit())
	}
}

func TestLoadMinimalExample(t *testing.T) {
	c, err := loadFile(filepath.Join("testdata", "minimal.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if c.API.BaseURL != "https://breaches.example.com/api/v1" || c.API.TokenFile != "" {
		t.Errorf("api = %+v", c.API)
	}
}

func TestLoadBrokenExamples(t *testing.T) {
	for file, wants := range map[string][]string{
		"unknown_key.yml":       {`unknown key "token_fle"`, "unknown_key.yml:3: api:"},
		"bad_duration.yml":      {"refresh.interval", `"15 minutes"`},
		"duplicate_address.yml": {"addresses[2]", `"Alice@Example.com" duplicates addresses[0]`},
		"alias_missing.yml":     {"addresses[1].alias", "required when labels.address is alias"},
		"tls_conflict.yml":      {"api.tls_config", "ca_file"},
		"no_base_url.yml":       {"api.base_url", "required"},
		"not_a_mapping.yml":     {"not_a_mapping.yml:1: the file: must be a mapping of keys, not a list"},
	} {
		t.Run(file, func(t *testing.T) {
			path := filepath.Join("testdata", "broken", file)
			c, err := loadFile(path)
			if err == nil {
				t.Fatalf("loadFile(%s) = %+v, want an error", file, c)
			}
			for _, want := range append(wants, path) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yml")
	if _, err := loadFile(path); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("loadFile(absent) error = %v, want one naming %s", err, path)
	}
}

func TestLoadResolvesRelativePathsAgainstConfigDir(t *testing.T) {
	dir := t.TempDir()
	yml := minimalYAML +
		"  token_file: secrets/token\n" +
		"  tls_config:\n    ca_file: ca.pem\n" +
		"webhook:\n  secret_files: [hook, /abs/hook]\n" +
		"acknowledgements_file: acks/handled.yml\n"
	path := filepath.Join(dir, "breach_exporter.yml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := loadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ field, got, want string }{
		{"api.token_file", c.API.TokenFile, filepath.Join(dir, "secrets", "token")},
		{"api.tls_config.ca_file", c.API.TLSConfig.CAFile, filepath.Join(dir, "ca.pem")},
		{"webhook.secret_files[0]", c.Webhook.SecretFiles[0], filepath.Join(dir, "hook")},
		{"webhook.secret_files[1]", c.Webhook.SecretFiles[1], "/abs/hook"},
		{"acknowledgements_file", c.AcknowledgementsFile, filepath.Join(dir, "acks", "handled.yml")},
	} {
		if tc.got != tc.want {
			t.Errorf("%s = %q, want %q", tc.field, tc.got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yml   string
		wants []string
	}{
		{"unknown top-level key", minimalYAML + "adresses: [a@x.org]\n", []string{`unknown key "adresses"`, "config.yml:3"}},
		{"unknown api key", minimalYAML + "  rate: 5\n", []string{`unknown key "rate"`}},
		{"unknown refresh key", minimalYAML + "refresh:\n  every: 5m\n", []string{`unknown key "every"`}},
		{"unknown labels key", minimalYAML + "labels:\n  adress: hash\n", []string{`unknown key "adress"`}}, //nolint:misspell // the misspelt key is the test
		{"unknown webhook key", minimalYAML + "webhook:\n  secret_file: /s\n", []string{`unknown key "secret_file"`}},
		{"unknown tls_config key", minimalYAML + "  tls_config:\n    ca_fil: /ca\n", []string{`unknown key "ca_fil"`}},
		{"unknown address key", minimalYAML + "addresses:\n  - {email: a@x.org, name: A}\n", []string{`unknown key "name"`}},
		{"duplicate key", minimalYAML + "  timeout: 5s\n  timeout: 6s\n", []string{`duplicate key "timeout"`}},
		{"bad api.timeout", minimalYAML + "  timeout: soon\n", []string{"api.timeout", `"soon"`}},
		{"bad refresh.me_interval", minimalYAML + "refresh:\n  me_interval: 5x\n", []string{"refresh.me_interval", `"5x"`}},
		{"bad webhook.dedup_window", minimalYAML + "webhook:\n  dedup_window: -1h\n", []string{"webhook.dedup_window", `"-1h"`}},
		{"bad webhook.max_event_age", minimalYAML + "webhook:\n  max_event_age: old\n", []string{"webhook.max_event_age", `"old"`}},
		{"bad api.proxy_url", minimalYAML + "  proxy_url: '::'\n", []string{"api.proxy_url", `"::"`}},
		{"bad tls min_version", minimalYAML + "  tls_config:\n    min_version: TLS99\n", []string{"api.tls_config", "TLS99"}},
		{"api not a mapping", "api: https://x.org\n", []string{"config.yml:1: api: must be a mapping of keys"}},
		{"address a list", minimalYAML + "addresses:\n  - [a@x.org]\n", []string{"config.yml:4", "into address"}},
		{"requests_per_minute not a number", minimalYAML + "  requests_per_minute: many\n", []string{"config.yml:3", "many"}},
		{"discover_addresses not a bool", minimalYAML + "webhook:\n  discover_addresses: maybe\n", []string{"config.yml:4", "maybe"}},
	} {
		t.Run(tc.name, func(t *testing.T) { assertParseFails(t, tc.yml, tc.wants...) })
	}
}

func TestAddressForms(t *testing.T) {
	c := mustParse(t, minimalYAML+`addresses:
  - alice@example.com
  - {email: ops@example.com, alias: ops}
  - email: bob@example.com
  - email: carol@example.com
    alias: carol
`)
	want := []Address{
		{Email: "alice@example.com"},
		{Email: "ops@example.com", Alias: "ops"},
		{Email: "bob@example.com"},
		{Email: "carol@example.com", Alias: "carol"},
	}
	if !reflect.DeepEqual(c.Addresses, want) {
		t.Errorf("addresses = %+v, want %+v", c.Addresses, want)
	}
}

func TestDiscover(t *testing.T) {
	for _, tc := range []struct {
		yml  string
		want bool
	}{
		{"", true},
		{"webhook:\n  discover_addresses: true\n", true},
		{"webhook:\n  discover_addresses: false\n", false},
	} {
		c := mustParse(t, minimalYAML+tc.yml)
		if got := c.Webhook.Discover(); got != tc.want {
			t.Errorf("%q: Discover() = %v, want %v", tc.yml, got, tc.want)
		}
	}
}

// Five independent mistakes are five problems, each with the file and the
// line of its key or item, in the order of the file.
func TestLoadReportsEveryProblemWithItsLine(t *testing.T) {
	path := filepath.Join("testdata", "broken", "five_errors.yml")
	_, err := loadFile(path)
	var problems Problems
	if !errors.As(err, &problems) {
		t.Fatalf("Load error = %v, want a Problems", err)
	}
	want := []string{
		path + `:3: api.requests_per_minute: 61 is out of range 1..60`,
		path + `:5: refresh.interval: unknown unit " minutes" in duration "15 minutes"`,
		path + `:6: refresh: unknown key "me_intervall"`,
		path + `:9: addresses[1]: "not-an-address" is not a valid email address`,
		path + `:10: addresses[2]: "Alice@Example.com" duplicates addresses[0]`,
	}
	if got := strings.Split(err.Error(), "\n"); !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseDuplicateKeyNamesBothLines(t *testing.T) {
	assertParseFails(t, minimalYAML+"refresh:\n  interval: 5m\n  interval: 6m\n",
		`config.yml:5: refresh: duplicate key "interval" (first at line 4)`)
}

func TestParseSyntaxErrorHasLine(t *testing.T) {
	assertParseFails(t, minimalYAML+"refresh:\n\tinterval: 5m\n", "config.yml:4: not valid YAML")
}

func TestParseMergeKeys(t *testing.T) {
	c := mustParse(t, minimalYAML+
		"refresh:\n  <<: {interval: 30m, me_interval: 10m}\n  me_interval: 20m\n")
	if c.Refresh.Interval != minutes(30) || c.Refresh.MeInterval != minutes(20) {
		t.Errorf("refresh = %+v, want the merged interval and the written me_interval", c.Refresh)
	}
}
