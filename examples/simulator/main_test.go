// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-kit/log"
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
