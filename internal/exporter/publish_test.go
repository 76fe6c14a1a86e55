// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// startCrashable is startReplica with a snapshot interval and a crash: a
// stop that writes nothing more (no last snapshot), as a SIGKILL.
func startCrashable(t *testing.T, dir, storage string, interval time.Duration) (r *replica, crash func()) {
	t.Helper()
	r = &replica{running: startExporter(t, Options{
		ConfigFile:       filepath.Join(dir, "config.yml"),
		Webhook:          true,
		StoragePath:      storage,
		SnapshotInterval: interval,
	})}
	return r, r.crash
}

// withStore gives t a store (testkit.StartRedis) and an API stand-in, and
// writes a config with a store section and tail.
func withStore(t *testing.T, tail string) (store *testkit.Redis, dir string) {
	t.Helper()
	return withStoreOf(t, testkit.StartRedis, tail)
}

// withOwnStore is withStore with a redis-server of t's own, which t may
// freeze or restart.
func withOwnStore(t *testing.T, tail string) (store *testkit.Redis, dir string) {
	t.Helper()
	return withStoreOf(t, testkit.StartOwnRedis, tail)
}

func withStoreOf(t *testing.T, start func(testing.TB) *testkit.Redis, tail string) (store *testkit.Redis, dir string) {
	t.Helper()
	store, _, dir = withStoreAndAPI(t, start, tail)
	return store, dir
}

// withStoreAndAPI is withStoreOf with the API stand-in, for a test that
// makes it misbehave.
func withStoreAndAPI(t *testing.T, start func(testing.TB) *testkit.Redis, tail string) (store *testkit.Redis, api *testkit.StandIn, dir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("runs exporters against a real redis-server")
	}
	store = start(t)
	api = testkit.NewStandIn(t, clockwork.NewRealClock())
	api.AnswerOthers(combolist(1))
	dir = t.TempDir()
	writeConfig(t, dir, api.BaseURL(), fmt.Sprintf("store:\n  url: %s\n", store.URL())+tail)
	return store, api, dir
}

// alertsOf is the series that counts the alerts for address.
func alertsOf(address string) string {
	return testkit.Series("breach_alerts_total", "address", address, "severity", "critical", "source", "combolist")
}

// alertNumbered is the n-th of several different bodies for one address.
func alertNumbered(address string, n int) string {
	return strings.Replace(alertFor(address), `"summary":"s"`, fmt.Sprintf(`"summary":"s%d"`, n), 1)
}

// An emptied store (FLUSHALL, or a restart from an older RDB) and then a
// crash of the replica that accepted the alerts: its journal replays them,
// the store has lost every trace of them, and yet none is added again, so
// the others count each once: whether an alert was added never rests on
// a key the store can lose.
func TestAlertsCountOnceAfterTheStoreLostThemAndACrash(t *testing.T) {
	store, dir := withStore(t, "refresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [a@example.com, b@example.com]\n")
	// No snapshot of its own before the crash: the journal holds every alert.
	one, crash := startCrashable(t, dir, filepath.Join(dir, "one"), time.Hour)
	two := startReplica(t, dir, filepath.Join(dir, "two"))
	const n = 5
	for i := range n {
		if c := one.post(t, alertNumbered("a@example.com", i)); c != 204 {
			t.Fatalf("alert %d answered %d", i, c)
		}
	}
	alerts := alertsOf("a@example.com")
	testkit.Eventually(t, "the alerts counted on both", func() bool { return one.scrape(t)[alerts] == n && two.scrape(t)[alerts] == n })

	c := redis.NewClient(&redis.Options{Addr: store.Addr(), DB: store.DB(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.FlushDB(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	crash()
	testkit.Eventually(t, "the other replica's checkpoint in the emptied store", func() bool {
		n, err := c.Exists(ctx, "breach_exporter:checkpoint").Result()
		return err == nil && n == 1
	})
	again, _ := startCrashable(t, dir, filepath.Join(dir, "one"), time.Hour)
	backlog := testkit.Series("breach_exporter_store_forward_backlog")
	testkit.Eventually(t, "the replayed alerts handled", func() bool { return again.scrape(t)[backlog] == 0 })
	// A later alert: once the other counts it, it has applied everything
	// the restarted replica published before it.
	if c := again.post(t, alertFor("b@example.com")); c != 204 {
		t.Fatalf("the later alert answered %d", c)
	}
	later := alertsOf("b@example.com")
	testkit.Eventually(t, "the later alert counted on the other", func() bool { return two.scrape(t)[later] == 1 })
	if got := two.scrape(t)[alerts]; got != n {
		t.Errorf("the replica that kept running counts %v alerts, want %d: the replayed ones were added again", got, n)
	}
	testkit.Eventually(t, "the later alert counted on the restarted one", func() bool { return again.scrape(t)[later] == 1 })
	if got := again.scrape(t)[alerts]; got != n {
		t.Errorf("the restarted replica counts %v alerts, want %d", got, n)
	}
}

// Two deployments configured apart (their own API, key and secret) with
// the default key_prefix on one store: the second refuses to join, with an
// error that names the prefix, instead of merging with the first (the
// account names alone default alike). A store without a password is worth a warning.
func TestDeploymentsOnOneStoreDoNotMerge(t *testing.T) {
	if testing.Short() {
		t.Skip("runs exporters against a real redis-server")
	}
	store := testkit.StartRedis(t)
	apiA := testkit.NewStandIn(t, clockwork.NewRealClock())
	apiB := testkit.NewStandIn(t, clockwork.NewRealClock())
	dirA, dirB := t.TempDir(), t.TempDir()
	tail := fmt.Sprintf("store:\n  url: %s\naddresses: [a@example.com]\n", store.URL())
	writeConfig(t, dirA, apiA.BaseURL(), tail)
	writeConfig(t, dirB, apiB.BaseURL(), tail)
	a := startReplica(t, dirA, filepath.Join(dirA, "data"))
	if !strings.Contains(a.logs.String(), "authentication") {
		t.Errorf("no warning of a store without authentication:\n%s", a.logs)
	}
	_, err := New(Options{
		ConfigFile:  filepath.Join(dirB, "config.yml"),
		Logger:      log.NewNopLogger(),
		Registerer:  prometheus.NewRegistry(),
		Webhook:     true,
		StoragePath: filepath.Join(dirB, "data"),
	})
	if err == nil {
		t.Fatal("a second deployment joined the first's store under the same key_prefix")
	}
	if !strings.Contains(err.Error(), `"breach_exporter"`) {
		t.Errorf("the error does not name the prefix: %v", err)
	}
	// The same deployment (its config) joins.
	startReplica(t, dirA, filepath.Join(dirA, "data2"))
	// A key rotated after the identity was pinned: store.deployment set
	// to the identity in use, which the start logs.
	_, after, _ := strings.Cut(a.logs.String(), "deployment=")
	identity, _, _ := strings.Cut(after, "\n")
	if !strings.HasPrefix(identity, "derived-") {
		t.Fatalf("the start did not log the identity in use:\n%s", a.logs)
	}
	testkit.WriteFile(t, filepath.Join(dirA, "token"), "svc_ak_rotated")
	testkit.WriteFile(t, filepath.Join(dirA, "config.yml"), strings.Replace(readFile(t, filepath.Join(dirA, "config.yml")), "store:\n", "store:\n  deployment: "+identity+"\n", 1))
	startReplica(t, dirA, filepath.Join(dirA, "data3"))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// Stopping with a store that hangs (frozen: connections open, no answer)
// ends while it still hangs: the commands in flight end at once, the last
// checkpoint is given up, and the alert the store did not take stays in
// the journal, counted once the replica starts again with the store back.
// How long the stop takes is logged, not asserted: each command's bound is
// a deadline on the wall clock, and a loaded machine stretches the stop.
func TestStopWithAHungStoreIsBounded(t *testing.T) {
	store, dir := withOwnStore(t, "addresses: [a@example.com]\n")
	storage := filepath.Join(dir, "one")
	one := startReplica(t, dir, storage)
	if c := one.post(t, alertFor("a@example.com")); c != 204 {
		t.Fatalf("alert answered %d", c)
	}
	alerts := alertsOf("a@example.com")
	testkit.Eventually(t, "the alert counted", func() bool { return one.scrape(t)[alerts] == 1 })
	store.Pause()
	// The state changes while the store hangs: the last snapshot has a
	// checkpoint to write.
	if c := one.post(t, alertNumbered("a@example.com", 2)); c != 204 {
		t.Fatalf("alert answered %d", c)
	}
	start := time.Now()
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		one.stop()
	}()
	// Far beyond every bound of the stop: only a stop that waits for the
	// store to answer again reaches it.
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		store.Resume()
		<-stopped
		t.Fatalf("the stop waited for the hung store:\n%s", one.logs)
	}
	t.Logf("stopped in %v:\n%s", time.Since(start), one.logs)
	for _, want := range []string{"Could not write the checkpoint to the store", "Stopping with alerts accepted here that the store does not hold yet"} {
		if !strings.Contains(one.logs.String(), want) {
			t.Errorf("the stop with a hung store logged no %q", want)
		}
	}
	store.Resume()
	again := startReplica(t, dir, storage)
	testkit.Eventually(t, "both alerts counted after the restart", func() bool { return again.scrape(t)[alerts] == 2 })
}

// A stop while the store hangs, with an API answer just in (its outcome's
// publish under way, the claim's release after it), an alert the store
// does not hold (the last checkpoint has a state to write) and the serving
// lease held, ends within sharedstore.StopBound of its start: every store
// command it sends shares one deadline. Each with its own timeout, one
// after another, it took at least 5 s (the release 2 s, the checkpoint
// 2 s, the lease's release 1 s: a timer never fires early). The check is
// on the wall clock with a 2 s margin for what the stop does besides.
func TestStopWithAnOutcomeInFlightAndAHungStoreIsBounded(t *testing.T) {
	store, api, dir := withStoreAndAPI(t, testkit.StartOwnRedis, "refresh:\n  interval: 1s\n  me_interval: 1h\naddresses: [a@example.com]\n")
	// The lease names where the others pass scrapes; none comes here.
	one := &replica{running: startExporter(t, Options{
		ConfigFile:       filepath.Join(dir, "config.yml"),
		Webhook:          true,
		StoragePath:      filepath.Join(dir, "one"),
		SnapshotInterval: time.Second,
		AdvertiseURL:     "http://" + testkit.FreeAddress(t) + "/metrics",
	})}
	testkit.Eventually(t, "synced, serving", func() bool { return one.synced(t) && one.exp.replicas.serving.holds() })
	arrived, answer := make(chan struct{}, 1), make(chan struct{})
	defer close(answer)
	api.Misbehave(func(w http.ResponseWriter, _ *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		<-answer
		w.WriteHeader(http.StatusInternalServerError)
	})
	<-arrived
	store.Pause()
	defer store.Resume()
	if c := one.post(t, alertFor("a@example.com")); c != 204 {
		t.Fatalf("alert answered %d", c)
	}
	answer <- struct{}{}
	answered := testkit.Series("breach_api_requests_total", "account", "default", "code", "500", "endpoint", "breaches")
	testkit.Eventually(t, "the API's answer recorded", func() bool { return one.scrape(t)[answered] == 1 })
	start := time.Now()
	one.stop()
	took := time.Since(start)
	t.Logf("stopped in %v:\n%s", took.Round(time.Millisecond), one.logs)
	if bound := sharedstore.StopBound + 2*time.Second; took > bound {
		t.Errorf("the stop took %v with the store hung, more than %v: its store commands waited one after another", took.Round(time.Millisecond), bound)
	}
}

// An entry at the largest stream ID, forged into the store, stalls
// nothing: alerts after it are counted, also once the stream is deleted
// (without the repair, later alerts were counted nowhere).
func TestAlertsAfterAStallingStreamIDAreCounted(t *testing.T) {
	store, dir := withStore(t, "refresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [a@example.com, b@example.com, c@example.com]\n")
	one := startReplica(t, dir, filepath.Join(dir, "one"))
	two := startReplica(t, dir, filepath.Join(dir, "two"))
	c := redis.NewClient(&redis.Options{Addr: store.Addr(), DB: store.DB(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: "breach_exporter:events", ID: "18446744073709551615-18446744073709551615",
		Values: []any{"kind", "alert", "origin", "x", "data", "{}"}}).Err(); err != nil {
		t.Fatal(err)
	}
	if code := one.post(t, alertFor("b@example.com")); code != 204 {
		t.Fatalf("alert answered %d", code)
	}
	testkit.Eventually(t, "the alert after the largest ID counted on both", func() bool {
		return one.scrape(t)[alertsOf("b@example.com")] == 1 && two.scrape(t)[alertsOf("b@example.com")] == 1
	})
	// The repair moved the stream's last ID back over an entry no replica
	// applied: the entries after it (their prev before it) are no loss.
	rewound := testkit.Series("breach_exporter_store_lineages_started_total", "reason", "rewound")
	for name, r := range map[string]*replica{"one": one, "two": two} {
		if v := r.scrape(t)[rewound]; v != 0 {
			t.Errorf("%s started %v lineages for a rewind after the repair, want none", name, v)
		}
	}
	if err := c.Del(ctx, "breach_exporter:events").Err(); err != nil {
		t.Fatal(err)
	}
	if code := two.post(t, alertFor("c@example.com")); code != 204 {
		t.Fatalf("alert answered %d", code)
	}
	testkit.Eventually(t, "the alert after the stream was deleted counted on both", func() bool {
		return one.scrape(t)[alertsOf("c@example.com")] == 1 && two.scrape(t)[alertsOf("c@example.com")] == 1
	})
}

// The alerts the store confirmed survive a restart until a snapshot holds
// them; those confirmed after the snapshot's cut stay.
func TestConfirmedAlertsAreKeptUntilASnapshotHoldsThem(t *testing.T) {
	dir := t.TempDir()
	open := func() (*replicas, *persist.Folder) {
		folder, err := persist.Open(dir, prometheus.NewRegistry(), log.NewNopLogger())
		if err != nil {
			t.Fatal(err)
		}
		r := &replicas{logger: log.NewNopLogger(), confirmed: newConfirmed()}
		if err := r.openConfirmed(folder); err != nil {
			t.Fatal(err)
		}
		return r, folder
	}
	alert := func(n byte) forwarded { return forwarded{alert: watchlist.AcceptedAlert{Digest: [32]byte{n}}} }
	r, folder := open()
	if err := r.confirmed.add([]forwarded{alert(1), alert(2)}); err != nil {
		t.Fatal(err)
	}
	mark := r.confirmedMark()
	if err := r.confirmed.add([]forwarded{alert(3)}); err != nil {
		t.Fatal(err)
	}
	r.confirmed.close()
	folder.Close()

	r, folder = open()
	for n := byte(1); n <= 3; n++ {
		if !r.replayed(alert(n).alert) {
			t.Errorf("alert %d confirmed before the restart is not known after it", n)
		}
	}
	r.compactConfirmed(mark)
	r.confirmed.close()
	folder.Close()

	r, folder = open()
	defer folder.Close()
	defer r.confirmed.close()
	if r.replayed(alert(1).alert) || r.replayed(alert(2).alert) || !r.replayed(alert(3).alert) {
		t.Errorf("after the snapshot: %v %v %v, want only the alert confirmed after its cut", r.replayed(alert(1).alert), r.replayed(alert(2).alert), r.replayed(alert(3).alert))
	}
}
