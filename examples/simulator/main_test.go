// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/go-kit/log"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestOptionsReadFiles(t *testing.T) {
	c := config{
		token:             demoToken,
		tokenFile:         writeFile(t, "token", "svc_ak_from_file\n"),
		plan:              "pro",
		rateLimit:         60,
		addressesFile:     writeFile(t, "addresses.yml", "- email: a@example.com\n  verified: true\n"),
		webhookURL:        "http://127.0.0.1:9/hook",
		webhookSecretFile: writeFile(t, "secret", "s3cret \n\n"),
	}
	opts, err := options(c, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	if opts.Token != "svc_ak_from_file" || string(opts.WebhookSecret) != "s3cret" || len(opts.Addresses) != 1 {
		t.Errorf("options %+v", opts)
	}
}

// --accounts.file adds keys next to the flags' one, each with its own
// addresses and webhook secret; its files are relative to it.
func TestOptionsReadAccountsFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"labs.token":  "svc_ak_labs_key\n",
		"labs.yml":    "- email: zoe@labs.example\n  verified: true\n",
		"labs.secret": "whsec-labs\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	accounts := filepath.Join(dir, "accounts.yml")
	err := os.WriteFile(accounts, []byte(`- token_file: labs.token
  plan: business
  addresses_file: labs.yml
  webhook_secret_file: labs.secret
- token: svc_ak_ops_key
  addresses: [{email: yan@ops.example, verified: false}]
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	c := config{token: demoToken, plan: "pro", rateLimit: 60, accountsFile: accounts,
		webhookURL: "http://127.0.0.1:9/hook", webhookSecretFile: writeFile(t, "secret", "whsec-main")}
	opts, err := options(c, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	want := []sim.Account{
		{Token: "svc_ak_labs_key", Plan: "business", Addresses: []sim.Address{{Email: "zoe@labs.example", Verified: true}}, WebhookSecret: []byte("whsec-labs")},
		{Token: "svc_ak_ops_key", Plan: "pro", Addresses: []sim.Address{{Email: "yan@ops.example"}}},
	}
	if !reflect.DeepEqual(opts.MoreAccounts, want) || string(opts.WebhookSecret) != "whsec-main" {
		t.Errorf("accounts %+v, secret %q; want %+v", opts.MoreAccounts, opts.WebhookSecret, want)
	}
	// The simulator serves every key.
	s, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	for token, email := range map[string]string{demoToken: "alice@example.com", "svc_ak_labs_key": "zoe@labs.example"} {
		req := httptest.NewRequest(http.MethodGet, sim.APIPrefix+"/breaches?email="+email, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Errorf("%s with its own key: %d %s", email, rec.Code, rec.Body)
		}
	}
}

func TestOptionsRejectBadFlags(t *testing.T) {
	base := config{token: demoToken, plan: "pro", rateLimit: 60}
	for name, tc := range map[string]struct {
		mutate  func(*config)
		wantErr string
	}{
		"token and token file": {func(c *config) {
			c.tokenSetByUser, c.tokenFile = true, writeFile(t, "token", "svc_ak_x")
		}, "mutually exclusive"},
		"missing token file":     {func(c *config) { c.tokenFile = "/nonexistent/token" }, "--api.token-file"},
		"webhook without secret": {func(c *config) { c.webhookURL = "http://127.0.0.1:9/hook" }, "--webhook.secret-file"},
		"empty secret":           {func(c *config) { c.webhookSecretFile = writeFile(t, "secret", "\n") }, "empty"},
		"bad addresses":          {func(c *config) { c.addressesFile = writeFile(t, "a.yml", "- mail: x\n") }, "--addresses.file"},
		"zero rate limit":        {func(c *config) { c.rateLimit = 0 }, "--rate-limit"},
		"missing accounts file":  {func(c *config) { c.accountsFile = "/nonexistent/accounts.yml" }, "--accounts.file"},
		"empty accounts file":    {func(c *config) { c.accountsFile = writeFile(t, "a.yml", "") }, "no account"},
		"unknown account key": {func(c *config) {
			c.accountsFile = writeFile(t, "a.yml", "- token: svc_ak_x\n  adresses: []\n")
		}, "adresses"},
		"account without token": {func(c *config) {
			c.accountsFile = writeFile(t, "a.yml", "- addresses: [{email: a@b.example}]\n")
		}, "account 2: token or token_file is required"},
		"account without addresses": {func(c *config) {
			c.accountsFile = writeFile(t, "a.yml", "- token: svc_ak_x\n")
		}, "account 2: addresses or addresses_file is required"},
		"account with an empty secret": {func(c *config) {
			c.accountsFile = writeFile(t, "a.yml", "- token: svc_ak_x\n  addresses: [{email: a@b.example}]\n  webhook_secret_file: /dev/null\n")
		}, "webhook_secret_file /dev/null is empty"},
	} {
		c := base
		tc.mutate(&c)
		if _, err := options(c, log.NewNopLogger()); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: error %v, want one containing %q", name, err, tc.wantErr)
		}
	}
}

func TestAdminListensOnLoopbackOnly(t *testing.T) {
	for _, ok := range []string{"", "127.0.0.1:0", "[::1]:8100", "localhost:8100"} {
		if err := loopbackOnly(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{":8100", "0.0.0.0:8100", "192.0.2.1:8100", "example.com:8100", "127.0.0.1"} {
		if err := loopbackOnly(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
