// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Owner labels come from the config, from the labels of an addresses_files
// glob and from addresses_sd_files; the config wins over a file, an
// earlier file over a later one, which the
// log says without an address; a changed file moves the owner at its
// re-read, without a restart, and leaves the entry's data.
func TestOwnerLabelsFromTheFiles(t *testing.T) {
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken)
	owners := filepath.Join(dir, "owners", "a.json")
	if err := os.Mkdir(filepath.Dir(owners), 0o755); err != nil {
		t.Fatal(err)
	}
	testkit.WriteFile(t, owners, `[{"targets": ["alice@example.com", "bob@example.com"], "labels": {"team": "marketing"}},
{"targets": ["carol@example.com"], "labels": {"team": "payments", "owner": "jdoe"}}]`)
	testkit.WriteFile(t, filepath.Join(dir, "owners", "hr.txt"), "dave@example.com\nALICE@example.com\n")
	testkit.WriteFile(t, filepath.Join(dir, "owners", "b.json"), `[{"targets": ["carol@example.com"], "labels": {"team": "platform"}}]`)
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), `api: {base_url: http://127.0.0.1:9, token_file: token}
labels: {address: hash}
addresses:
  - {email: alice@example.com, labels: {team: security}}
addresses_files: [{glob: owners/*.txt, labels: {team: hr}}]
addresses_sd_files: [owners/*.json]
`)
	logs := &testkit.SyncBuffer{}
	exp, err := New(Options{ConfigFile: filepath.Join(dir, "config.yml"), UserAgent: "breach_exporter/test",
		Logger: log.NewLogfmtLogger(logs), Registerer: prometheus.NewRegistry(), Clock: clockwork.NewFakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()

	teams := func() map[string][]breach.Label {
		out := map[string][]breach.Label{}
		for _, e := range exp.watchlist.View().Entries {
			out[e.Address.Email] = e.Owner
		}
		return out
	}
	team := func(v string) []breach.Label { return []breach.Label{{Name: "team", Value: v}} }
	got := teams()
	for email, want := range map[string][]breach.Label{
		"alice@example.com": team("security"),
		"bob@example.com":   team("marketing"),
		"dave@example.com":  team("hr"),
		"carol@example.com": {{Name: "owner", Value: "jdoe"}, {Name: "team", Value: "payments"}},
	} {
		if !slices.Equal(got[email], want) {
			t.Errorf("%s: owner labels %v, want %v", email, got[email], want)
		}
	}
	var dups []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "earlier source") {
			dups = append(dups, l)
		}
	}
	if len(dups) != 3 || strings.Contains(strings.Join(dups, "\n"), "@") {
		t.Errorf("log lines about duplicates:\n%s\nwant one for each file (hr.txt and a.json: alice, b.json: carol), no address", strings.Join(dups, "\n"))
	}

	// The team of bob changes: his entry keeps its data, only its owner
	// labels (and so its version: breach_address_info) move.
	exp.watchlist.Answered(breach.Key("bob@example.com"), breach.Verified, nil, exp.clock.Now())
	testkit.WriteFile(t, owners, `[{"targets": ["alice@example.com", "bob@example.com"], "labels": {"team": "payments"}}]`)
	exp.syncAddresses()
	for _, e := range exp.watchlist.View().Entries {
		if e.Address.Email == "bob@example.com" && (!slices.Equal(e.Owner, team("payments")) || e.State != breach.Verified) {
			t.Errorf("bob after the change: owner %v, state %s; want team payments, still verified", e.Owner, e.State)
		}
	}
}
