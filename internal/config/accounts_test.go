// SPDX-License-Identifier: Apache-2.0

package config

import (
	"reflect"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

const twoAccountsYAML = `api:
  timeout: 5s
accounts:
  - name: corp
    api:
      base_url: https://breaches.example.com/api/v1
      token_file: corp.token
      requests_per_minute: 30
    webhook:
      secret_files: [corp.secret]
    addresses: [alice@corp.example]
    addresses_files: ["addresses/corp/*.txt"]
  - name: labs
    api:
      base_url: https://breaches.example.com/api/v1
      token_file: labs.token
    webhook:
      secret_files: [labs.secret]
    addresses: [bob@labs.example]
`

func TestAccountsParse(t *testing.T) {
	c := mustParse(t, twoAccountsYAML)
	if c.Single() || !reflect.DeepEqual(c.AccountNames(), []string{"corp", "labs"}) {
		t.Fatalf("accounts %v, single %v: want corp and labs", c.AccountNames(), c.Single())
	}
	if rpm := c.Accounts[1].API.RequestsPerMinute; rpm != DefaultRequestsPerMinute {
		t.Errorf("labs requests_per_minute = %d, want the default %d", rpm, DefaultRequestsPerMinute)
	}
	want := []breach.Address{{Email: "alice@corp.example", Account: "corp"}, {Email: "bob@labs.example", Account: "labs"}}
	if got := c.Watched(); !reflect.DeepEqual(got, want) {
		t.Errorf("Watched() = %+v, want %+v", got, want)
	}
}

// The single-account shape is the account "default", its top-level
// addresses_files included.
func TestSingleAccountShapeIsDefault(t *testing.T) {
	c := mustParse(t, minimalYAML+"  requests_per_minute: 20\naddresses_files: [\"/a/*.txt\"]\naddresses: [a@x.org]\n")
	got := c.AccountsInForce()
	if len(got) != 1 || got[0].Name != breach.DefaultAccount || got[0].API.RequestsPerMinute != 20 ||
		!reflect.DeepEqual(Globs(got[0].AddressesFiles), []string{"/a/*.txt"}) || len(got[0].Addresses) != 1 {
		t.Errorf("AccountsInForce() = %+v, want one default account with the top-level settings", got)
	}
}

func TestAccountsProblemsHaveTheirLines(t *testing.T) {
	yml := `api:
  base_url: https://x.org
accounts:
  - name: Corp
    api: {base_url: "ftp://x.org", requests_per_minute: 0}
    addresses: [a@x.org, A@x.org]
    addresses_files: ["[bad"]
  - name: labs
    api: {base_url: https://x.org, requests_per_minute: 61}
    addresses: [a@X.org]
  - name: labs
    api: {}
addresses: [b@x.org]
webhook:
  secret_files: [s]
`
	_, err := parseFile(t, yml)
	if err == nil {
		t.Fatal("Parse: no error")
	}
	for _, want := range []string{
		`config.yml:2: api.base_url: not with accounts`,
		`config.yml:4: accounts[0].name: "Corp" must be`,
		`config.yml:5: accounts[0].api.base_url: "ftp://x.org" must be an absolute`,
		`config.yml:5: accounts[0].api.requests_per_minute: 0 is out of range`,
		`config.yml:6: accounts[0].addresses[1]: "A@x.org" duplicates accounts[0].addresses[0]`,
		`config.yml:7: accounts[0].addresses_files[0]: "[bad" is not a valid glob`,
		`config.yml:9: accounts[1].api.requests_per_minute: 61 is out of range`,
		`config.yml:10: accounts[1].addresses[0]: "a@X.org" is in accounts "Corp" (accounts[0].addresses[0]) and "labs"`,
		`config.yml:11: accounts[2].name: "labs" duplicates accounts[1].name`,
		`config.yml:12: accounts[2].api.base_url: is required`,
		`config.yml:13: addresses: not with accounts`,
		`config.yml:15: webhook.secret_files: not with accounts`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems lack %q:\n%v", want, err)
		}
	}
}

func TestLoadBundleAccounts(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "corp.token", "svc_ak_corp\n")
	writeFile(t, dir, "labs.token", "svc_ak_labs\n")
	writeFile(t, dir, "corp.secret", "corp-secret-0123456789\n")
	writeFile(t, dir, "labs.secret", "labs-secret-0123456789\n")
	path := writeFile(t, dir, "breach_exporter.yml", twoAccountsYAML)
	b, err := LoadBundle(path, LoadOptions{Webhook: true})
	if err != nil {
		t.Fatalf("LoadBundle: %v", err)
	}
	corp, labs := b.Account("corp"), b.Account("labs")
	if corp == nil || labs == nil || b.Account("default") != nil {
		t.Fatalf("accounts %+v, want corp and labs only", b.Accounts)
	}
	if corp.Token.Get() != "svc_ak_corp" || labs.Token.Get() != "svc_ak_labs" ||
		string(corp.Secrets[0]) != "corp-secret-0123456789" || string(labs.Secrets[0]) != "labs-secret-0123456789" {
		t.Errorf("corp %q %q, labs %q %q: each account must have its own token and secret", corp.Token.Get(), corp.Secrets, labs.Token.Get(), labs.Secrets)
	}
	// A rotated token is re-read from the account's own file.
	writeFile(t, dir, "labs.token", "svc_ak_labs2\n")
	if err := labs.Token.Reread(); err != nil || labs.Token.Get() != "svc_ak_labs2" || corp.Token.Get() != "svc_ak_corp" {
		t.Errorf("Reread: %v, labs %q corp %q", err, labs.Token.Get(), corp.Token.Get())
	}

	// One key or one secret in two accounts is a problem, at its line.
	writeFile(t, dir, "labs.token", "svc_ak_corp\n")
	writeFile(t, dir, "labs.secret", "corp-secret-0123456789\n")
	_, err = LoadBundle(path, LoadOptions{Webhook: true})
	for _, want := range []string{
		path + `:16: accounts[1].api.token_file: holds the same token as account "corp"`,
		path + `:18: accounts[1].webhook.secret_files[0]: holds the same secret as account "corp"`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadBundle error lacks %q:\n%v", want, err)
		}
	}
}

// The environment variables name one token and one secret: with accounts,
// each account's files are required.
func TestAccountsNeedTheirFiles(t *testing.T) {
	t.Setenv(TokenEnv, "svc_ak_env")
	t.Setenv(WebhookSecretEnv, "env-secret-0123456789")
	dir := t.TempDir()
	path := writeFile(t, dir, "breach_exporter.yml", "accounts:\n  - name: corp\n    api: {base_url: https://x.org}\n")
	_, err := LoadBundle(path, LoadOptions{Webhook: true})
	for _, want := range []string{
		path + ":3: accounts[0].api.token_file: is required",
		path + ":2: accounts[0].webhook.secret_files: the receiver is enabled",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadBundle error lacks %q:\n%v", want, err)
		}
	}
}

// One secret in two accounts is refused however the load is run: a
// --config.check without the webhook flags (as docs/accounts.md runs it)
// refuses what a start with the receiver on refuses, naming the field.
// Before, the secrets were compared only with the receiver on, and the
// check passed a config the start then refused.
func TestSameSecretRefusedWithoutTheReceiver(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "corp.token", "svc_ak_corp\n")
	writeFile(t, dir, "labs.token", "svc_ak_labs\n")
	writeFile(t, dir, "corp.secret", "corp-secret-0123456789\n")
	writeFile(t, dir, "labs.secret", "corp-secret-0123456789\n")
	path := writeFile(t, dir, "breach_exporter.yml", twoAccountsYAML)
	want := path + `:18: accounts[1].webhook.secret_files[0]: holds the same secret as account "corp"`
	for _, o := range []LoadOptions{{Webhook: true}, {AddressFiles: true}, {}} {
		_, err := LoadBundle(path, o)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("LoadBundle(%+v) error lacks %q:\n%v", o, want, err)
		}
	}
}
