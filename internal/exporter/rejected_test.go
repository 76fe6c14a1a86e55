// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Each shape of file a reload must refuse (too large, a named pipe, an
// address in an error, hmac without its key)
// fails that reload promptly with a clear error, keeps the config in force
// and the exporter running: the next good reload goes through.
func TestReloadRefusesBadFilesAndKeepsRunning(t *testing.T) {
	f := newFixture(t, "addresses: [alice@example.com]\n")
	testkit.AdvanceUntil(t, f.clock, "the first round", 100*time.Millisecond, func() bool { return f.api.Reads("alice@example.com") == 1 })
	cfg, acks, key := filepath.Join(f.dir, "config.yml"), filepath.Join(f.dir, "acks.yml"), filepath.Join(f.dir, "key")
	original, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	withConfig := func(tail string) { testkit.WriteFile(t, cfg, string(original)+tail) }
	alice := testkit.Series("breach_address_state", "address", "alice@example.com", "account", breach.DefaultAccount, "state", "verified")

	for _, tc := range []struct {
		name   string
		setup  func()
		want   string
		hidden string // must not appear in the error or the log
	}{
		{"config is a named pipe", func() {
			os.Remove(cfg)
			if err := syscall.Mkfifo(cfg, 0o600); err != nil {
				t.Fatal(err)
			}
		}, cfg + ": not a regular file (a named pipe)", ""},
		{"acknowledgements are a named pipe", func() {
			withConfig("acknowledgements_file: acks.yml\n")
			if err := syscall.Mkfifo(acks, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "acknowledgements_file: stat " + acks + ": not a regular file (a named pipe)", ""},
		{"acknowledgements are /dev/zero", func() {
			withConfig("acknowledgements_file: acks.yml\n")
			if err := os.Symlink("/dev/zero", acks); err != nil {
				t.Fatal(err)
			}
		}, acks + ": not a regular file (a device)", ""},
		{"acknowledgements over the limit", func() {
			withConfig("acknowledgements_file: acks.yml\n")
			testkit.WriteFile(t, acks, "# "+strings.Repeat("x", fileread.MaxAcknowledgementsBytes)+"\n")
		}, fmt.Sprintf("%s: larger than the limit of %d bytes", acks, fileread.MaxAcknowledgementsBytes), ""},
		{"hmac without a key file", func() {
			withConfig("labels: {address: hmac}\n")
		}, "labels.address_key_file: is required when labels.address is hmac", ""},
		{"an invalid address in the acknowledgements in hmac mode", func() {
			withConfig("labels: {address: hmac, address_key_file: key}\nacknowledgements_file: acks.yml\n")
			testkit.WriteFile(t, key, "a-label-key-of-enough-bytes\n")
			testkit.WriteFile(t, acks, "acknowledgements:\n  - address: alice.secret@@example.com\n    handled_at: 2026-11-01T00:00:00Z\n    by: ops\n")
		}, acks + ": line 2: acknowledgement: address (a value with @, not shown) is not an email address", "alice.secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := f.exp.Reload(ctx)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("reload: %v, want an error naming %q", err, tc.want)
			}
			if tc.hidden != "" && (strings.Contains(err.Error(), tc.hidden) || strings.Contains(f.logs.String(), tc.hidden)) {
				t.Errorf("the error or the log shows %q: %v", tc.hidden, err)
			}
			samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
			if got := samples[testkit.Series("breach_exporter_config_last_reload_successful")]; got != 0 {
				t.Errorf("reload gauge = %v after a refused reload", got)
			}
			if got := samples[alice]; got != 1 {
				t.Errorf("%s = %v, want the config in force to stay", alice, got)
			}

			for _, p := range []string{cfg, acks, key} {
				os.Remove(p)
			}
			testkit.WriteFile(t, cfg, string(original))
			if err := f.exp.Reload(ctx); err != nil {
				t.Fatalf("the next good reload: %v", err)
			}
		})
	}
}
