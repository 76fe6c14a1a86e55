// SPDX-License-Identifier: Apache-2.0

package dashboards

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// allSelected is Grafana's variables with "All" chosen and the built-in
// intervals of a one-hour range.
var allSelected = strings.NewReplacer(
	"$__rate_interval", "1m", "$__range_s", "3600", "$__range", "1h",
	"$job", ".+", "$instance", ".+", "$account", ".+", "$team", ".*", "$address", ".+", "$source", ".+",
)

// twoReplicas are two replicas' own series: a runs longest.
const twoReplicas = `
      - series: 'process_start_time_seconds{job="breach", instance="a"}'
        values: '100x5'
      - series: 'process_start_time_seconds{job="breach", instance="b"}'
        values: '200x5'
      - series: 'up{job="breach", instance="a"}'
        values: '1x5'
      - series: 'up{job="breach", instance="b"}'
        values: '1x5'
`

// twoReplicasDisagreeing are the series of two replicas of one job for a
// scrape interval in which b has not yet applied what a has: alice's
// state (a: verified, b: still pending), and so the fleet's counts; and
// the acknowledgement entry of her exposure (a reloaded the file first: a
// newer entry). a runs longest (the lower process_start_time_seconds).
const twoReplicasDisagreeing = twoReplicas + `
      - series: 'breach_address_state{job="breach", instance="a", address="alice", account="default", state="verified"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="b", address="alice", account="default", state="pending"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="a", address="bob", account="default", state="pending"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="b", address="bob", account="default", state="pending"}'
        values: '1x5'
      - series: 'breach_address_last_refresh_timestamp_seconds{job="breach", instance="a", address="alice"}'
        values: '50x5'
      - series: 'breach_address_last_refresh_timestamp_seconds{job="breach", instance="b", address="alice"}'
        values: '0x5'
      - series: 'breach_addresses{job="breach", instance="a", state="verified"}'
        values: '1x5'
      - series: 'breach_addresses{job="breach", instance="a", state="pending"}'
        values: '1x5'
      - series: 'breach_addresses{job="breach", instance="b", state="verified"}'
        values: '0x5'
      - series: 'breach_addresses{job="breach", instance="b", state="pending"}'
        values: '2x5'
      - series: 'breach_source_plaintext_password{job="breach", instance="a", address="alice", source="combolist"}'
        values: '1x5'
      - series: 'breach_source_plaintext_password{job="breach", instance="b", address="alice", source="combolist"}'
        values: '1x5'
      - series: 'breach_source_acknowledged_timestamp_seconds{job="breach", instance="a", address="alice", source="combolist", by="bob", comment="rotated"}'
        values: '2000x5'
      - series: 'breach_source_acknowledged_timestamp_seconds{job="breach", instance="b", address="alice", source="combolist", by="ann", comment="first look"}'
        values: '1000x5'
      - series: 'breach_addresses_plaintext_password_open{job="breach", instance="a", source="combolist"}'
        values: '0x5'
      - series: 'breach_addresses_plaintext_password_handled{job="breach", instance="a", source="combolist"}'
        values: '1x5'
      - series: 'breach_addresses_plaintext_password_open{job="breach", instance="b", source="combolist"}'
        values: '1x5'
      - series: 'breach_addresses_plaintext_password_handled{job="breach", instance="b", source="combolist"}'
        values: '0x5'
`

// While two replicas disagree for a scrape interval, no panel counts an
// address twice: each of the two addresses is one row in the state
// tables, the counts by state add up to two, the one exposure is open or
// handled (not both), and shows one acknowledgement, the newest. The
// panels' own expressions run in promtool against the series above; with
// the maximum of each part (what the panels read before) alice counts as
// verified and pending, and her exposure as open and handled.
func TestPanelsCountEachAddressOnceWhileReplicasDisagree(t *testing.T) {
	type sample = panelSample
	checkPanels(t, twoReplicasDisagreeing, append(statePanels(),
		panelCase{"exporter-health.json", "Last refresh per address", "B", []sample{{`{address="alice", state="verified"}`, "1"}, {`{address="bob", state="pending"}`, "1"}}},
		panelCase{"breach-overview.json", "Fleet: open and handled plaintext password exposures", "A", []sample{{`{}`, "0"}}},
		panelCase{"breach-overview.json", "Fleet: open and handled plaintext password exposures", "B", []sample{{`{}`, "1"}}},
		panelCase{"breach-overview.json", "Handled exposures: who, when, why", "A", []sample{{`{address="alice", source="combolist", by="bob", comment="rotated"}`, "2e+06"}}},
	))
}

// oneCopy are the series of two replicas scraped for their own health
// (scope=replica: a and b) and of the one scrape of the cluster's series
// through the Service (scope=cluster: svc), which has no process metrics.
const oneCopy = twoReplicas + `
      - series: 'up{job="breach", instance="svc"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="svc", address="alice", account="default", state="verified"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="svc", address="bob", account="default", state="pending"}'
        values: '1x5'
      - series: 'breach_addresses{job="breach", instance="svc", state="verified"}'
        values: '1x5'
      - series: 'breach_addresses{job="breach", instance="svc", state="pending"}'
        values: '1x5'
      - series: 'breach_addresses_plaintext_password_open{job="breach", instance="svc", source="combolist"}'
        values: '1x5'
      - series: 'breach_addresses_plaintext_password_handled{job="breach", instance="svc", source="combolist"}'
        values: '0x5'
`

// With one copy of the cluster's series (the Service's target), the panels
// that read every part from one target read it from that one, not from
// the replica running longest, which serves none of it: before, they were
// empty.
func TestPanelsReadTheOneCopy(t *testing.T) {
	type sample = panelSample
	checkPanels(t, oneCopy, append(statePanels(),
		panelCase{"breach-overview.json", "Fleet: open and handled plaintext password exposures", "A", []sample{{`{}`, "1"}}},
		panelCase{"breach-overview.json", "Fleet: open and handled plaintext password exposures", "B", []sample{{`{}`, "0"}}},
	))
}

// ownedAddresses are one exporter's series where alice belongs to team
// payments and bob to no team; a second job's exporter serves no
// breach_address_info (metrics.address_info: false).
const ownedAddresses = `
      - series: 'process_start_time_seconds{job="breach", instance="a"}'
        values: '100x5'
      - series: 'breach_address_info{job="breach", instance="a", address="alice", account="default", team="payments"}'
        values: '1x5'
      - series: 'breach_address_info{job="breach", instance="a", address="bob", account="default"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="a", address="alice", account="default", state="verified"}'
        values: '1x5'
      - series: 'breach_address_state{job="breach", instance="a", address="bob", account="default", state="verified"}'
        values: '1x5'
      - series: 'process_start_time_seconds{job="noinfo", instance="c"}'
        values: '100x5'
      - series: 'breach_address_state{job="noinfo", instance="c", address="carol", account="default", state="verified"}'
        values: '1x5'
`

// The team variable keeps the addresses of the chosen teams; All keeps
// those without a team too; an exporter without breach_address_info is
// filtered by the account alone (every one of its addresses shows).
func TestPanelsFollowTheTeam(t *testing.T) {
	type sample = panelSample
	team := func(job, value string) *strings.Replacer {
		return strings.NewReplacer("$__rate_interval", "1m", "$__range_s", "3600", "$__range", "1h",
			"$job", job, "$instance", ".+", "$account", ".+", "$team", value, "$address", ".+", "$source", ".+")
	}
	const panel = "Address states"
	for _, c := range []struct {
		name string
		vars *strings.Replacer
		want []sample
	}{
		{"team payments", team("breach", "payments"), []sample{{`{address="alice", state="verified"}`, "1"}}},
		{"All", team("breach", ".*"), []sample{{`{address="alice", state="verified"}`, "1"}, {`{address="bob", state="verified"}`, "1"}}},
		{"no info series", team("noinfo", "payments"), []sample{{`{address="carol", state="verified"}`, "1"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkPanelsWith(t, c.vars, ownedAddresses, []panelCase{{"breach-overview.json", panel, "A", c.want}})
		})
	}
}

type panelSample struct{ labels, value string }

// statePanels are the panels of the states, which both sets of series
// give alike: alice verified, bob pending, each once.
func statePanels() []panelCase {
	type sample = panelSample
	return []panelCase{
		{"breach-overview.json", "Address states", "A", []sample{{`{address="alice", state="verified"}`, "1"}, {`{address="bob", state="pending"}`, "1"}}},
		{"exporter-health.json", "Addresses by state", "A", []sample{{`{state="verified"}`, "1"}, {`{state="pending"}`, "1"}}},
		{"breach-overview.json", "Fleet: addresses by state", "A", []sample{{`{state="verified"}`, "1"}, {`{state="pending"}`, "1"}}},
	}
}

// panelCase is a panel's target and the samples it must give.
type panelCase struct {
	dashboard, panel, refID string
	want                    []panelSample
}

// checkPanels runs the panels' expressions, every variable on All, in
// promtool against series.
func checkPanels(t *testing.T, series string, cases []panelCase) {
	t.Helper()
	checkPanelsWith(t, allSelected, series, cases)
}

// checkPanelsWith is checkPanels with the variables as vars sets them.
func checkPanelsWith(t *testing.T, vars *strings.Replacer, series string, cases []panelCase) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("BREACH_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is required (make test installs Debian's prometheus package)")
		}
		t.Skip("promtool not installed")
	}
	queries, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	expr := func(dashboard, panel, refID string) string {
		for _, q := range queries {
			if q.Dashboard == dashboard && q.Panel == panel && q.RefID == refID {
				return vars.Replace(q.Expr)
			}
		}
		t.Fatalf("no target %s of %q in %s", refID, panel, dashboard)
		return ""
	}
	var b strings.Builder
	b.WriteString("rule_files: []\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:" + series + "    promql_expr_test:\n")
	for _, c := range cases {
		fmt.Fprintf(&b, "      # %s %q %s\n      - expr: %q\n        eval_time: 2m\n        exp_samples:\n", c.dashboard, c.panel, c.refID, expr(c.dashboard, c.panel, c.refID))
		for _, s := range c.want {
			fmt.Fprintf(&b, "          - labels: '%s'\n            value: %s\n", s.labels, s.value)
		}
	}
	file := filepath.Join(t.TempDir(), "replicas.test.yml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
}
