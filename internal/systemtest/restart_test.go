// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// keptLines are the lines of an exposition that a restart must keep: the
// feed series and the address states.
func keptLines(metrics string) []string {
	var out []string
	for _, line := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(line, "breach_source_") || strings.HasPrefix(line, "breach_address_state{") {
			out = append(out, line)
		}
	}
	slices.Sort(out)
	return out
}

// The built binary is stopped (SIGTERM, or SIGKILL once a snapshot is
// written) and started again with the API unreachable: its first scrape
// shows the same feed series and address states as before.
func TestRestartOfTheBinary(t *testing.T) {
	bin := binary(t, "builds the binary and restarts it; runs without -short")
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			api := newStandIn(t)
			dir, storage := t.TempDir(), filepath.Join(t.TempDir(), "data")
			testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
			cfg := filepath.Join(dir, "breach_exporter.yml")
			writeConfig := func(baseURL string) {
				testkit.WriteFile(t, cfg, fmt.Sprintf("api:\n  base_url: %s\n  token_file: token\n  requests_per_minute: 60\n"+
					"addresses: [alice@example.com, bob@example.com]\n", baseURL))
			}
			writeConfig(api.BaseURL())
			addr := testkit.FreeAddress(t)
			args := []string{"--config.file", cfg, "--web.listen-address", addr, "--storage.path", storage, "--storage.snapshot-interval", "100ms"}

			first := startProcess(t, bin, args...)
			metricsURL := "http://" + addr + "/metrics"
			var before string
			testkit.Eventually(t, "both addresses answered", func() bool {
				_, before = testkit.Get(t, metricsURL)
				return strings.Contains(before, `breach_address_state{address="alice@example.com",account="default",state="verified"} 1`) &&
					strings.Contains(before, `breach_address_state{address="bob@example.com",account="default",state="unverified"} 1`)
			})
			if sig == syscall.SIGKILL {
				// Killed, the process writes nothing more: wait for a
				// snapshot that holds both answers.
				testkit.Eventually(t, "a snapshot after both answers", func() bool {
					return snapshotHolds(t, storage, "alice@example.com", "bob@example.com")
				})
			}
			err := first.stop(sig)
			if sig == syscall.SIGTERM && err != nil {
				t.Fatalf("exit after SIGTERM: %v", err)
			}

			api.Refuse() // the second run finds no API
			writeConfig(api.BaseURL())
			startProcess(t, bin, args...)
			var after string
			testkit.Eventually(t, "the restarted exporter to serve", func() bool {
				code, m := testkit.Get(t, metricsURL)
				after = m
				return code == http.StatusOK
			})
			if b, a := keptLines(before), keptLines(after); !slices.Equal(b, a) || len(b) == 0 {
				t.Fatalf("the first scrape after the restart differs:\nbefore:\n%s\nafter:\n%s", strings.Join(b, "\n"), strings.Join(a, "\n"))
			}
		})
	}
}

// snapshotHolds reports whether the snapshot file in dir names every email.
func snapshotHolds(t *testing.T, dir string, emails ...string) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, persist.FileName))
	if err != nil {
		return false
	}
	st, err := persist.Decode(data)
	if err != nil {
		return false
	}
	answered := map[string]bool{}
	for _, e := range st.Watchlist.Entries {
		answered[e.Address.Email] = !e.LastRefresh.IsZero()
	}
	for _, e := range emails {
		if !answered[e] {
			return false
		}
	}
	return true
}
