// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// Two replicas whose address files change at different moments (a
// ConfigMap reaches pods one after the other) agree once both have the
// change: the late one serves the answer the other read for a new address
// at once, not "pending" until the next round (15 minutes here), and
// counts the alert for it that the stream brought while it did not watch
// the address yet, with discovery off. Before, it served the address as
// pending for a whole round and counted the alert nowhere but
// untracked{reason="discovery_off"}. (With discovery on, the alert
// discovers the address on every replica, and the re-read that the
// accepting replica makes for it brings the answer.)
func TestReplicasAgreeWhileTheirAddressFilesDiffer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two exporters against a real redis-server for a few seconds")
	}
	one, two, api := startTwoReplicas(t, func(name, dir string) string {
		if err := os.MkdirAll(filepath.Join(dir, "lists"), 0o755); err != nil {
			t.Fatal(err)
		}
		list := "a@example.com\n"
		if name == "one" {
			list += "new@example.com\n"
		}
		testkit.WriteFile(t, filepath.Join(dir, "lists", "hr.txt"), list)
		return "addresses_files: [lists/*.txt]\n"
	})

	state := func(r *replica, address, state string) float64 {
		return r.scrape(t)[testkit.Series("breach_address_state", "account", "default", "address", address, "state", state)]
	}
	testkit.Eventually(t, "one serves the new address verified", func() bool { return state(one, "new@example.com", "verified") == 1 })
	if c := one.post(t, alertFor("new@example.com")); c != 204 {
		t.Fatalf("alert answered %d, want 204", c)
	}
	alerts := testkit.Series("breach_alerts_total", "address", "new@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "one counts the alert", func() bool { return one.scrape(t)[alerts] == 1 })
	// The alert has one read the address again.
	testkit.Eventually(t, "one's second read of the new address", func() bool { return api.Reads("new@example.com") == 2 })
	applied := lastApplied(one)
	testkit.Eventually(t, "two applied the stream as far as one", func() bool {
		last := lastApplied(two)
		return last == applied || sharedstore.After(last, applied)
	})

	// The ConfigMap reaches two.
	testkit.WriteFile(t, filepath.Join(two.dir, "lists", "hr.txt"), "a@example.com\nnew@example.com\n")
	testkit.Eventually(t, "two serves the new address verified and its alert, as one does", func() bool {
		return state(two, "new@example.com", "verified") == 1 && two.scrape(t)[alerts] == 1
	})
	untracked := testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")
	if got := two.scrape(t)[untracked]; got != 0 {
		t.Errorf("two: %s = %v, want 0: the alert is counted under its address", untracked, got)
	}
	if n := api.Reads("new@example.com"); n != 2 {
		t.Errorf("new@example.com read %d times, want twice (one's, the alert's): two takes one's answer", n)
	}
	testkit.Eventually(t, "the same state on both", func() bool { return shared(t, one) == shared(t, two) })
}

// An alert held for an address that does not come to this replica counts
// as it would have at once, after twice refresh.files_interval, on the
// snapshot tick however quiet the stream is.
func TestHeldAlertForAnAddressThatDoesNotComeCountsAfterTheHold(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two exporters against a real redis-server for a few seconds")
	}
	one, two, _ := startTwoReplicas(t, func(name, _ string) string {
		if name == "one" {
			return "refresh: {files_interval: 2s}\naddresses: [a@example.com, only@example.com]\n"
		}
		return "refresh: {files_interval: 2s}\naddresses: [a@example.com]\n"
	})
	dropped := testkit.Series("breach_exporter_store_unwatched_answers_dropped_total")
	if got, ok := two.scrape(t)[dropped]; !ok || got != 0 {
		t.Errorf("%s = %v (served %v), want 0 from the start", dropped, got, ok)
	}
	verified := testkit.Series("breach_address_state", "account", "default", "address", "only@example.com", "state", "verified")
	testkit.Eventually(t, "one serves its address verified", func() bool { return one.scrape(t)[verified] == 1 })
	if c := one.post(t, alertFor("only@example.com")); c != 204 {
		t.Fatalf("alert answered %d, want 204", c)
	}
	heldAlerts := func() int {
		two.exp.replicas.applying.Lock()
		defer two.exp.replicas.applying.Unlock()
		return len(two.exp.replicas.held.alerts)
	}
	// Held for 4 s: two polls only a@ and has one's answer for the
	// address, so another replica watches it.
	testkit.Eventually(t, "two holds the alert", func() bool { return heldAlerts() == 1 })
	untracked := testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")
	testkit.Eventually(t, "two counts the alert without an address label once the hold is over", func() bool {
		return two.scrape(t)[untracked] == 1
	})
	if n := heldAlerts(); n != 0 {
		t.Errorf("two still holds %d alerts", n)
	}
}

// lastApplied is the ID of the last event of the stream r applied.
func lastApplied(r *replica) string {
	r.exp.replicas.applying.Lock()
	defer r.exp.replicas.applying.Unlock()
	return r.exp.replicas.last
}

// startTwoReplicas starts the replicas "one" and "two" of one store and
// one API stand-in, each in a folder of its own (replica.dir) with
// writeConfig's config, discovery off, and then what tail returns for it.
func startTwoReplicas(t *testing.T, tail func(name, dir string) string) (one, two *replica, api *testkit.StandIn) {
	t.Helper()
	store := testkit.StartRedis(t)
	api = testkit.NewStandIn(t, clockwork.NewRealClock())
	api.AnswerOthers(combolist(1))
	base := t.TempDir()
	var replicas []*replica
	for _, name := range []string{"one", "two"} {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeConfig(t, dir, api.BaseURL(), "  discover_addresses: false\nstore:\n  url: "+store.URL()+"\n"+tail(name, dir))
		r := startReplica(t, dir, filepath.Join(dir, "storage"))
		r.dir = dir
		replicas = append(replicas, r)
	}
	return replicas[0], replicas[1], api
}

// The answers held are bounded in number and in bytes, the oldest going
// first, each counted; a newer answer for an address replaces its older
// one in place.
func TestHeldAnswersAreBounded(t *testing.T) {
	r := &replicas{watchlist: watchlist.New(), held: newHeld()}
	r.applying.Lock()
	defer r.applying.Unlock()
	for i := range maxHeldAnswers + 1 {
		if !r.holdAnswer(eventAnswered, outcomeEvent{Key: fmt.Sprintf("a%d@example.com", i)}, 100) {
			t.Fatal("an answer for an address not watched was not held")
		}
	}
	r.holdAnswer(eventAnswered, outcomeEvent{Key: "a1@example.com"}, 100)
	if _, ok := r.held.answers["a0@example.com"]; ok || len(r.held.answers) != maxHeldAnswers {
		t.Errorf("%d answers held, a0 among them: %v; want %d, the oldest gone", len(r.held.answers), ok, maxHeldAnswers)
	}
	if got := testutil.ToFloat64(r.held.dropped); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
	r.holdAnswer(eventAnswered, outcomeEvent{Key: "big@example.com"}, maxHeldAnswerBytes-maxHeldAnswers*100+200)
	if r.held.answerBytes > maxHeldAnswerBytes {
		t.Errorf("%d bytes held, over %d", r.held.answerBytes, maxHeldAnswerBytes)
	}
	// Two more go: a1 (replaced in place, so still the oldest) for the
	// number, a2 for the bytes.
	_, a1 := r.held.answers["a1@example.com"]
	_, a3 := r.held.answers["a3@example.com"]
	if got := testutil.ToFloat64(r.held.dropped); got != 3 || a1 || !a3 {
		t.Errorf("dropped = %v, a1 held %v, a3 held %v; want 3, a1 gone, a3 held", got, a1, a3)
	}
	if r.holdAnswer(eventFailed, outcomeEvent{Key: "x@example.com"}, 10) {
		t.Error("a failed read was held")
	}
}
