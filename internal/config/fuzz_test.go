// SPDX-License-Identifier: Apache-2.0

package config

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// localFiles points a seed's file settings at the files the fuzz target
// writes, so that seeds reach a valid bundle and not only a missing file.
var localFiles = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`token_file: .*`), "token_file: token"},
	{regexp.MustCompile(`address_key_file: .*`), "address_key_file: key"},
	{regexp.MustCompile(`acknowledgements_file: .*`), "acknowledgements_file: acks.yml"},
	{regexp.MustCompile(`secret_files: .*`), "secret_files: [secret]"},
	{regexp.MustCompile(`password_file: .*`), "password_file: secret"},
}

// FuzzLoadBundle loads any config, acknowledgements and label key: the
// outcome is an error or a bundle that works (every configured address
// gets a label, acknowledgements answer), never a panic. Run it with
// go test -fuzz FuzzLoadBundle ./internal/config/.
func FuzzLoadBundle(f *testing.F) {
	f.Setenv(TokenEnv, "svc_ak_fuzz")
	f.Setenv(WebhookSecretEnv, "")
	var configs, acks []string
	for _, pattern := range []string{"../../examples/*.yml", "../../examples/release/*.yml", "testdata/*.yml", "testdata/broken/*.yml"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			if filepath.Base(file) == "acknowledgements.yml" {
				acks = append(acks, string(data))
				continue
			}
			configs = append(configs, string(data))
			local := data
			for _, r := range localFiles {
				local = r.re.ReplaceAll(local, []byte(r.with))
			}
			configs = append(configs, string(local))
		}
	}
	const base = "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"
	configs = append(configs,
		// hmac labels without their key once panicked; it and its neighbours.
		base+"labels: {address: hmac}\naddresses: [a@example.com, b@example.com]\n",
		base+"labels: {address: hmac, address_key_file: key}\naddresses: [a@example.com, b@example.com]\nacknowledgements_file: acks.yml\n",
		base+"labels: {address: alias, address_key_file: key}\naddresses: [{email: a@example.com, alias: a}, b@example.com]\n",
		base+"labels: {address: bogus}\naddresses: [a@example.com, a@example.com]\n",
		base+"acknowledgements_file: acks.yml\nwebhook: {secret_files: [secret, secret]}\n",
		base+"acknowledgements_file: /dev/zero\n",
		base+"acknowledgements_file: .\n",
		base+"store: {url: 'redis://:pw@127.0.0.1:6379/0', password_file: secret, key_prefix: p}\n",
		base+"store: {url: 'rediss://[::1]:6380/x', key_prefix: '{p}'}\n",
	)
	acks = append(acks, "", "acknowledgements:\n  - address: a.secret@@example.com\n    handled_at: 2026-01-01T00:00:00Z\n    by: ops\n",
		"acknowledgements: {}\n", "a@example.com: []\n", "acknowledgements:\n  - [x]\n  - address: a@example.com\n    handled_at: 2099-01-01T00:00:00Z\n")
	for i, c := range configs {
		for j, key := range []string{"a-label-key-of-enough-bytes\n", "short", ""} {
			f.Add(c, acks[(i+j)%len(acks)], key, i%2 == 0)
		}
	}
	f.Fuzz(func(t *testing.T, config, acks, key string, webhook bool) {
		dir := t.TempDir()
		for name, content := range map[string]string{
			"config.yml": config, "acks.yml": acks, "key": key,
			"token": "svc_ak_fuzz\n", "secret": "a-webhook-secret-of-enough-bytes\n",
		} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		b, err := LoadBundle(filepath.Join(dir, "config.yml"), LoadOptions{Webhook: webhook})
		if err != nil {
			if b != nil {
				t.Fatalf("an error and a bundle: %v", err)
			}
			if len(problemsOf(err)) > MaxProblems+1 {
				t.Fatalf("%d problems, want at most %d", len(problemsOf(err)), MaxProblems+1)
			}
			return
		}
		if b.Config == nil || len(b.Accounts) == 0 || b.HTTPClient == nil || b.Labels == nil {
			t.Fatalf("a bundle with a part missing: %+v", b)
		}
		if s := b.Config.Store; s != nil && (s.KeyPrefix == "" || (s.PasswordFile != "") != (b.StorePassword != "")) {
			t.Fatalf("a store without its prefix or password: %+v", s)
		}
		for _, a := range b.Accounts {
			if a.BaseURL == nil || a.Token == nil {
				t.Fatalf("account %q with a part missing: %+v", a.Name, a)
			}
			if webhook && len(a.Secrets) == 0 {
				t.Fatalf("the receiver is on without a secret for account %q", a.Name)
			}
		}
		seen := map[string]bool{}
		for _, a := range b.Config.Watched() {
			label := b.Labels.Label(a)
			if label == "" || seen[label] {
				t.Fatalf("address label %q empty or repeated", label)
			}
			seen[label] = true
			if (b.Config.Labels.Address == breach.LabelHash || b.Config.Labels.Address == breach.LabelHMAC) && label == a.Email {
				t.Fatalf("mode %s labels an address with itself", b.Config.Labels.Address)
			}
			b.Acknowledgements.For(breach.Key(a.Email), "combolist")
		}
		for _, e := range b.Acknowledgements.Entries() {
			if !breach.ValidEmail(e.Address) || e.HandledAt.After(time.Now().Add(time.Hour)) {
				t.Fatalf("an invalid acknowledgement in force: %+v", e)
			}
		}
	})
}
