// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
	"github.com/breach-exporter/breach_exporter/webhook"
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
	one, two, api := startTwoReplicas(t, oneListsNew(t))

	state := func(r *replica, address, state string) float64 {
		return r.scrape(t)[testkit.Series("breach_address_state", "account", "default", "address", address, "state", state)]
	}
	alerts := oneReadsNewAndItsAlert(t, one, api)
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
// as it would have at once, after refresh.files_interval and the skew of
// the files' updates from its acceptance, on the snapshot tick however
// quiet the stream is. The skew is an hour until the test has seen the
// alert held, and then none: the hold is over at once, whenever the
// alert reached the replica on a loaded machine.
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
	setSkew(two, time.Hour)
	for _, name := range []string{"breach_exporter_store_unwatched_answers_dropped_total", "breach_exporter_store_unwatched_alerts_overflow_total"} {
		if got, ok := two.scrape(t)[testkit.Series(name)]; !ok || got != 0 {
			t.Errorf("%s = %v (served %v), want 0 from the start", name, got, ok)
		}
	}
	verified := testkit.Series("breach_address_state", "account", "default", "address", "only@example.com", "state", "verified")
	testkit.Eventually(t, "one serves its address verified", func() bool { return one.scrape(t)[verified] == 1 })
	if c := one.post(t, alertFor("only@example.com")); c != 204 {
		t.Fatalf("alert answered %d, want 204", c)
	}
	// Held: two polls only a@.
	testkit.Eventually(t, "two holds the alert", func() bool { return heldAlerts(two) == 1 })
	untracked := testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")
	if got := two.scrape(t)[untracked]; got != 0 {
		t.Errorf("two counted the alert it holds: %s = %v", untracked, got)
	}
	setSkew(two, 0)
	testkit.Eventually(t, "two counts the alert without an address label once the hold is over", func() bool {
		return two.scrape(t)[untracked] == 1
	})
	if n := heldAlerts(two); n != 0 {
		t.Errorf("two still holds %d alerts", n)
	}
}

// With discovery off, alerts for an address that only one replica's files
// list yet, arriving before any answer for it exists (its reads fail
// here), whichever replica receives them, count under the address on
// every replica once the files reach them all, one after the other: the
// others hold them meanwhile, the receiver too. Before, the replicas
// whose files lagged counted them without an address label for good
// (untracked{reason="discovery_off"}): they held only the alerts for an
// address the stream had brought an answer for.
func TestReplicasAgreeOnAlertsForANewAddressBeforeItsFirstAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three exporters against a real redis-server for a few seconds")
	}
	rs := startUnanswered(t, "one", "two", "three")
	one, two, three := rs[0], rs[1], rs[2]
	alerts := alertsOf(unanswered)
	reach := func(r *replica) { reachUnanswered(t, r) }

	reach(one)
	for i, r := range rs {
		if c := r.post(t, alertNumbered(unanswered, i)); c != 204 {
			t.Fatalf("alert %d answered %d, want 204", i, c)
		}
	}
	testkit.Eventually(t, "one counts the three alerts", func() bool { return one.scrape(t)[alerts] == 3 })
	applied := lastApplied(one)
	for _, r := range rs[1:] {
		testkit.Eventually(t, "the others applied the stream as far as one", func() bool {
			last := lastApplied(r)
			return last == applied || sharedstore.After(last, applied)
		})
	}
	for i, r := range rs {
		if got := r.scrape(t)[untracked]; got != 0 {
			t.Fatalf("replica %d: %s = %v before its files have the address, want 0: the alerts are held", i, untracked, got)
		}
	}
	if n := heldAlerts(three); n != 3 {
		t.Errorf("three holds %d alerts, want 3", n)
	}

	reach(two)
	testkit.Eventually(t, "two counts the alerts under the address", func() bool { return two.scrape(t)[alerts] == 3 })
	if got := three.scrape(t)[alerts]; got != 0 || heldAlerts(three) != 3 {
		t.Errorf("three counts %v alerts and holds %d before its files have the address, want 0 and 3", got, heldAlerts(three))
	}
	reach(three)
	testkit.Eventually(t, "three counts the alerts under the address", func() bool { return three.scrape(t)[alerts] == 3 })

	want := alertSeries(t, one)
	for i, r := range rs {
		m := r.scrape(t)
		if m[alerts] != 3 || m[untracked] != 0 {
			t.Errorf("replica %d: %v alerts under the address and %v untracked, want 3 and 0", i, m[alerts], m[untracked])
		}
		if got := alertSeries(t, r); got != want {
			t.Errorf("replica %d counts\n%s\nwant, as one,\n%s", i, got, want)
		}
	}
}

// A replica that restarts while it holds alerts (its files lack their
// address yet) counts each once when its files bring the address, whether
// the checkpoint it starts from was written by a replica that held them
// too (its extra names them) or by one whose files had the address (its
// state counts them under it, and the restarted replica's files drop it):
// it reads them back from the stream. Before, what it held was lost.
func TestHeldAlertsSurviveARestart(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two exporters against a real redis-server for a few seconds")
	}
	for _, c := range []struct {
		name       string
		oneWatches bool
	}{
		{"the checkpoint's writer held them", false},
		{"the checkpoint's writer counted them", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			rs := startUnanswered(t, "one", "two")
			if c.oneWatches {
				reachUnanswered(t, rs[0])
			}
			for i, r := range rs {
				if c := r.post(t, alertNumbered(unanswered, i)); c != 204 {
					t.Fatalf("alert %d answered %d, want 204", i, c)
				}
			}
			testkit.Eventually(t, "two holds both alerts", func() bool { return heldAlerts(rs[1]) == 2 })
			applied := lastApplied(rs[1])
			testkit.Eventually(t, "the store's checkpoint holds them, from the writer wanted", func() bool {
				cp, ok, err := rs[0].exp.replicas.shared.LoadCheckpoint(t.Context(), maxCheckpointBytes)
				x, _ := decodeExtra(cp.Extra, cp.ID)
				return err == nil && ok && !sharedstore.Before(cp.ID, applied) && (len(x.Held) == 0) == c.oneWatches
			})
			dir := rs[1].dir
			rs[1].crash()
			rs[1] = startReplica(t, dir, filepath.Join(dir, "storage"))
			rs[1].dir = dir
			testkit.Eventually(t, "two holds both alerts again", func() bool { return heldAlerts(rs[1]) == 2 })
			for _, r := range rs {
				reachUnanswered(t, r)
			}
			alerts := alertsOf(unanswered)
			for i, r := range rs {
				testkit.Eventually(t, "the replica counts both alerts under the address", func() bool { return r.scrape(t)[alerts] == 2 })
				if got := r.scrape(t)[untracked]; got != 0 {
					t.Errorf("replica %d: %s = %v, want 0", i, untracked, got)
				}
			}
		})
	}
}

// unanswered is an address whose reads fail (startUnanswered), and
// untracked the series of the alerts counted without an address label
// with discovery off.
const unanswered = "new@example.com"

var untracked = testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")

// startUnanswered starts the named replicas (startReplicas), each with an
// address file of a@example.com alone (reachUnanswered adds unanswered),
// whose reads of unanswered fail.
func startUnanswered(t *testing.T, names ...string) []*replica {
	t.Helper()
	rs, api := startReplicas(t, names, func(_, dir string) string {
		if err := os.MkdirAll(filepath.Join(dir, "lists"), 0o755); err != nil {
			t.Fatal(err)
		}
		testkit.WriteFile(t, filepath.Join(dir, "lists", "hr.txt"), "a@example.com\n")
		return "addresses_files: [lists/*.txt]\n"
	})
	if err := api.SetFault(sim.FaultServerError, unanswered); err != nil {
		t.Fatal(err)
	}
	return rs
}

// reachUnanswered adds unanswered to r's address file, as a ConfigMap's
// update reaching its pod, and waits until r watches it.
func reachUnanswered(t *testing.T, r *replica) {
	t.Helper()
	testkit.WriteFile(t, filepath.Join(r.dir, "lists", "hr.txt"), "a@example.com\n"+unanswered+"\n")
	testkit.Eventually(t, "the replica watches the new address", func() bool {
		_, ok := r.exp.watchlist.ScheduleOf(breach.Key(unanswered))
		return ok
	})
}

// alertSeries are r's breach_alerts_total series, one a line, sorted.
func alertSeries(t *testing.T, r *replica) string {
	var out []string
	for series, v := range r.scrape(t) {
		if strings.HasPrefix(series, "breach_alerts_total") {
			out = append(out, fmt.Sprintf("%s %v", series, v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// heldAlerts is how many alerts r holds.
func heldAlerts(r *replica) int {
	r.exp.replicas.applying.Lock()
	defer r.exp.replicas.applying.Unlock()
	return len(r.exp.replicas.held.alerts)
}

// setSkew sets how much later than refresh.files_interval r expects its
// address files to change after another replica's.
func setSkew(r *replica, skew time.Duration) {
	h := &r.exp.replicas.held
	r.exp.replicas.applying.Lock()
	defer r.exp.replicas.applying.Unlock()
	h.hold += skew - h.skew
	h.skew = skew
}

// lastApplied is the ID of the last event of the stream r applied.
func lastApplied(r *replica) string {
	r.exp.replicas.applying.Lock()
	defer r.exp.replicas.applying.Unlock()
	return r.exp.replicas.last
}

// oneListsNew is startReplicas's tail for address files of a@example.com,
// and new@example.com too for the replica named "one".
func oneListsNew(t *testing.T) func(name, dir string) string {
	return func(name, dir string) string {
		if err := os.MkdirAll(filepath.Join(dir, "lists"), 0o755); err != nil {
			t.Fatal(err)
		}
		list := "a@example.com\n"
		if name == "one" {
			list += "new@example.com\n"
		}
		testkit.WriteFile(t, filepath.Join(dir, "lists", "hr.txt"), list)
		return "addresses_files: [lists/*.txt]\n"
	}
}

// oneReadsNewAndItsAlert waits until one serves new@example.com verified,
// posts an alert for it, and waits until one counts it and has read the
// address again for it. It returns the alert's series.
func oneReadsNewAndItsAlert(t *testing.T, one *replica, api *testkit.StandIn) string {
	t.Helper()
	verified := testkit.Series("breach_address_state", "account", "default", "address", "new@example.com", "state", "verified")
	testkit.Eventually(t, "one serves the new address verified", func() bool { return one.scrape(t)[verified] == 1 })
	if c := one.post(t, alertFor("new@example.com")); c != 204 {
		t.Fatalf("alert answered %d, want 204", c)
	}
	alerts := testkit.Series("breach_alerts_total", "address", "new@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "one counts the alert", func() bool { return one.scrape(t)[alerts] == 1 })
	// The alert has one read the address again.
	testkit.Eventually(t, "one's second read of the new address", func() bool { return api.Reads("new@example.com") == 2 })
	return alerts
}

// startTwoReplicas is startReplicas of "one" and "two".
func startTwoReplicas(t *testing.T, tail func(name, dir string) string) (one, two *replica, api *testkit.StandIn) {
	t.Helper()
	rs, api := startReplicas(t, []string{"one", "two"}, tail)
	return rs[0], rs[1], api
}

// startReplicas starts the named replicas of one store and one API
// stand-in, each in a folder of its own (replica.dir) with writeConfig's
// config, discovery off, and then what tail returns for it.
func startReplicas(t *testing.T, names []string, tail func(name, dir string) string) ([]*replica, *testkit.StandIn) {
	t.Helper()
	store := testkit.StartRedis(t)
	api := testkit.NewStandIn(t, clockwork.NewRealClock())
	api.AnswerOthers(combolist(1))
	base := t.TempDir()
	var replicas []*replica
	for _, name := range names {
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		writeConfig(t, dir, api.BaseURL(), "  discover_addresses: false\nstore:\n  url: "+store.URL()+"\n"+tail(name, dir))
		r := startReplica(t, dir, filepath.Join(dir, "storage"))
		r.dir = dir
		replicas = append(replicas, r)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s's log:\n%s", name, r.logs.String())
			}
		})
	}
	return replicas, api
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

// The alerts held are bounded in number and in bytes: past them the
// oldest counts at once, without an address label, and is counted.
func TestHeldAlertsAreBounded(t *testing.T) {
	w := watchlist.New()
	w.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	reg := prometheus.NewRegistry()
	hook, err := webhook.NewHandler(reg, webhook.Options{Config: config.NewCurrent(&config.Bundle{Config: &config.Config{}}),
		Watchlist: w, Clock: clockwork.NewRealClock(), Logger: log.NewNopLogger()})
	if err != nil {
		t.Fatal(err)
	}
	r := &replicas{watchlist: w, hook: hook, held: newHeld()}
	r.applying.Lock()
	defer r.applying.Unlock()
	now := time.Now()
	r.held.now = func() time.Time { return now }
	hold := func(i, size int) bool {
		a := watchlist.AcceptedAlert{Digest: sha256.Sum256(fmt.Append(nil, i)), At: now, Address: unanswered,
			Delta: watchlist.AlertDelta{Source: "combolist", Severity: "critical"}}
		return r.holdAlert(a, false, fmt.Sprintf("1-%d", i+1), fmt.Sprintf("1-%d", i), size)
	}
	for i := range maxHeldAlerts + 1 {
		if !hold(i, 100) {
			t.Fatal("an alert for an address not watched was not held")
		}
	}
	counted := func() float64 { return testkit.Samples(t, reg)[untracked] }
	if n, got := len(r.held.alerts), testutil.ToFloat64(r.held.overflow); n != maxHeldAlerts || got != 1 || counted() != 1 {
		t.Errorf("%d held, overflow = %v, %v untracked; want %d, 1 and 1", n, got, counted(), maxHeldAlerts)
	}
	if after, ids := r.heldExtra(); after != "1-1" || len(ids) != maxHeldAlerts || ids[0] != "1-2" {
		t.Errorf("the checkpoint's list starts after %s with %v (of %d); want after 1-1 with 1-2", after, ids[:1], len(ids))
	}
	hold(maxHeldAlerts+1, maxHeldAlertBytes-50)
	if r.held.alertBytes > maxHeldAlertBytes || counted() != testutil.ToFloat64(r.held.overflow) || len(r.held.alerts) != 1 {
		t.Errorf("%d bytes held (bound %d); %v untracked, overflow %v", r.held.alertBytes, maxHeldAlertBytes, counted(), testutil.ToFloat64(r.held.overflow))
	}
	// Past its hold, an alert counts.
	before := counted()
	now = now.Add(r.held.hold)
	r.expireHeld()
	if len(r.held.alerts) != 0 || counted() != before+1 {
		t.Errorf("%d still held past the hold, %v untracked; want none, %v", len(r.held.alerts), counted(), before+1)
	}
}

// A checkpoint's list of held alerts comes from the store: one that is not
// of its stream is not read.
func TestHeldListOfACheckpointIsChecked(t *testing.T) {
	for _, c := range []struct {
		x    checkpointExtra
		want bool
	}{
		{checkpointExtra{ID: "5-0", HeldAfter: "1-0", Held: []string{"2-0", "5-0"}}, true},
		{checkpointExtra{ID: "5-0", Held: []string{"2-0"}}, true},
		{checkpointExtra{ID: "5-0", HeldAfter: "2-0", Held: []string{"2-0"}}, false},
		{checkpointExtra{ID: "5-0", HeldAfter: "1-0", Held: []string{"3-0", "2-0"}}, false},
		{checkpointExtra{ID: "5-0", HeldAfter: "1-0", Held: []string{"6-0"}}, false},
		{checkpointExtra{ID: "5-0", Held: []string{"x"}}, false},
		{checkpointExtra{ID: "5-0", Held: make([]string, maxHeldAlerts+1)}, false},
	} {
		if got := validHeld(&c.x); got != c.want {
			t.Errorf("validHeld(%+v) = %v, want %v", c.x, got, c.want)
		}
	}
}

// A replica that starts from a checkpoint holding an address its own files
// lack yet keeps what the checkpoint says of it, as a held answer, and
// applies it when its files bring the address: it serves the answer at
// once and counts the alert under the address, without reading the
// address again. The order is forced: one reads the address, counts its
// alert and writes a checkpoint past them before two starts from it.
// Before, the start dropped the checkpoint's entry with the watchlist's
// sync, and two served the address pending until its next round.
func TestStartFromACheckpointKeepsItsUnwatchedAddresses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two exporters against a real redis-server for a few seconds")
	}
	one, two, api := startTwoReplicas(t, oneListsNew(t))
	verified := testkit.Series("breach_address_state", "account", "default", "address", "new@example.com", "state", "verified")
	alerts := oneReadsNewAndItsAlert(t, one, api)
	applied := lastApplied(one)
	testkit.Eventually(t, "the store's checkpoint is past one's second read", func() bool {
		cp, ok, err := one.exp.replicas.shared.LoadCheckpoint(t.Context(), maxCheckpointBytes)
		return err == nil && ok && !sharedstore.Before(cp.ID, applied)
	})

	// Two starts afresh from that checkpoint, its files lacking the address.
	dir := two.dir
	two.crash()
	if err := os.RemoveAll(filepath.Join(dir, "storage")); err != nil {
		t.Fatal(err)
	}
	two = startReplica(t, dir, filepath.Join(dir, "storage"))
	two.dir = dir
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("two's log after its restart:\n%s", two.logs.String())
		}
	})
	testkit.Eventually(t, "two applied the stream as far as one", func() bool {
		last := lastApplied(two)
		return last == applied || sharedstore.After(last, applied)
	})
	if _, ok := two.exp.watchlist.ScheduleOf(breach.Key("new@example.com")); ok {
		t.Fatal("two watches the new address before its files list it")
	}

	// The ConfigMap reaches two.
	testkit.WriteFile(t, filepath.Join(dir, "lists", "hr.txt"), "a@example.com\nnew@example.com\n")
	testkit.Eventually(t, "two serves the new address verified and its alert, as one does", func() bool {
		m := two.scrape(t)
		return m[verified] == 1 && m[alerts] == 1
	})
	if got := two.scrape(t)[untracked]; got != 0 {
		t.Errorf("two: %s = %v, want 0: the alert is counted under its address", untracked, got)
	}
	if n := api.Reads("new@example.com"); n != 2 {
		t.Errorf("new@example.com read %d times, want twice (one's, the alert's): two takes the checkpoint's answer", n)
	}
}
