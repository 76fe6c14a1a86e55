// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// These tests run replicas in this process against a real redis-server.
// docs/replicas.md's failure table names each.

const (
	eventsKey     = "breach_exporter:events"
	checkpointKey = "breach_exporter:checkpoint"
)

// storeSetup is one store, the stand-in API and a config of six
// addresses read once an hour, in dir.
type storeSetup struct {
	store     *testkit.Redis
	api       *testkit.StandIn
	dir       string
	redis     *redis.Client
	addresses []string
}

func newStoreSetup(t *testing.T) *storeSetup {
	t.Helper()
	return newStoreSetupOf(t, testkit.StartRedis)
}

// newOwnStoreSetup is newStoreSetup with a redis-server of t's own, which
// t may freeze, restart or have save.
func newOwnStoreSetup(t *testing.T) *storeSetup {
	t.Helper()
	return newStoreSetupOf(t, testkit.StartOwnRedis)
}

func newStoreSetupOf(t *testing.T, start func(testing.TB) *testkit.Redis) *storeSetup {
	t.Helper()
	if testing.Short() {
		t.Skip("runs exporters against a real redis-server")
	}
	s := &storeSetup{store: start(t), api: testkit.NewStandIn(t, clockwork.NewRealClock()), dir: t.TempDir(),
		addresses: []string{"a@example.com", "b@example.com", "c@example.com", "d@example.com", "e@example.com", "f@example.com"}}
	s.api.AnswerOthers(combolist(1))
	writeConfig(t, s.dir, s.api.BaseURL(), fmt.Sprintf("store:\n  url: %s\nrefresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [%s]\n",
		s.store.URL(), strings.Join(s.addresses, ", ")))
	s.redis = redis.NewClient(&redis.Options{Addr: s.store.Addr(), DB: s.store.DB(), Protocol: 2})
	t.Cleanup(func() { s.redis.Close() })
	return s
}

func (s *storeSetup) replica(t *testing.T, name string) *replica {
	t.Helper()
	return startReplica(t, s.dir, filepath.Join(s.dir, name))
}

// verified waits until r serves every address verified.
func (s *storeSetup) verified(t *testing.T, r *replica) {
	t.Helper()
	testkit.Eventually(t, "every address verified", func() bool {
		m := r.scrape(t)
		for _, a := range s.addresses {
			if m[testkit.Series("breach_address_state", "account", "default", "address", a, "state", "verified")] != 1 {
				return false
			}
		}
		return true
	})
}

// checkpointed waits until the store's checkpoint holds its whole stream.
func (s *storeSetup) checkpointed(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	testkit.Eventually(t, "a checkpoint of the whole stream", func() bool {
		id, err := s.redis.HGet(ctx, checkpointKey, "id").Result()
		last, lerr := s.redis.XRevRangeN(ctx, eventsKey, "+", "-", 1).Result()
		return err == nil && lerr == nil && len(last) == 1 && last[0].ID == id
	})
}

// checkpointState decodes the store's checkpoint, whole or in parts; ok is
// false when there is none.
func (s *storeSetup) checkpointState(t *testing.T) (persist.State, bool) {
	t.Helper()
	ctx := context.Background()
	// One transaction: the replicas write checkpoints meanwhile.
	var head *redis.SliceCmd
	var digestsCmd, partsCmd *redis.MapStringStringCmd
	if _, err := s.redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
		head = p.HMGet(ctx, checkpointKey, "id", "parts_id", "data")
		digestsCmd, partsCmd = p.HGetAll(ctx, checkpointKey+":digests"), p.HGetAll(ctx, checkpointKey+":parts")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h := head.Val()
	if h[0] == nil {
		return persist.State{}, false
	}
	if h[0] != h[1] {
		st, err := persist.DecodeShared([]byte(h[2].(string)))
		if err != nil {
			t.Fatalf("the store's checkpoint: %v", err)
		}
		return st, true
	}
	digests, parts := digestsCmd.Val(), partsCmd.Val()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var st persist.State
	for name, digest := range digests {
		raw, err := dec.DecodeAll([]byte(parts[name]), nil)
		var ps loadedParts
		if err == nil {
			ps, err = decodePart(sharedstore.Part{Name: name, Digest: digest}, raw)
		}
		if err != nil {
			t.Fatalf("the store's checkpoint, part %s: %v", name, err)
		}
		st.Watchlist.Entries = append(st.Watchlist.Entries, ps.state.Watchlist.Entries...)
	}
	return st, true
}

// wholeCheckpoint fails t when the store's checkpoint holds fewer than
// every address verified: a partial state.
func (s *storeSetup) wholeCheckpoint(t *testing.T) {
	t.Helper()
	st, ok := s.checkpointState(t)
	if !ok {
		return
	}
	verified := 0
	for _, e := range st.Watchlist.Entries {
		if e.State == breach.Verified {
			verified++
		}
	}
	if verified != len(s.addresses) {
		t.Fatalf("the store's checkpoint holds %d addresses verified of %d: a partial state was checkpointed", verified, len(s.addresses))
	}
}

// alert posts an alert for address to r, which must answer 204.
func alert(t *testing.T, r *replica, address string) {
	t.Helper()
	if c := r.post(t, alertFor(address)); c != 204 {
		t.Fatalf("alert answered %d", c)
	}
}

// servesAlike fails t unless r serves the shared series as want does.
func servesAlike(t *testing.T, r, want *replica, what string) {
	t.Helper()
	if got, want := shared(t, r), shared(t, want); got != want {
		t.Errorf("%s serves:\n%s\nwant what the other serves:\n%s", what, got, want)
	}
}

func (r *replica) synced(t *testing.T) bool {
	return r.scrape(t)[testkit.Series("breach_exporter_store_synced")] == 1
}

// waitConverged waits until r serves what want serves, and says it is
// synced, checking meanwhile that no partial checkpoint is written.
func (s *storeSetup) waitConverged(t *testing.T, r, want *replica) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !(r.synced(t) && shared(t, r) == shared(t, want)) {
		s.wholeCheckpoint(t)
		if time.Now().After(deadline) {
			t.Fatalf("the replica did not converge: synced %v, serves:\n%s\nwant:\n%s", r.synced(t), shared(t, r), shared(t, want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.wholeCheckpoint(t)
}

// A replica started on an empty folder while the store is paused, the
// stream trimmed past its beginning (a long-running deployment), says it
// is not synced, catches up fully once the store resumes (the checkpoint
// and the events after it), and writes no checkpoint of its partial
// state; a replica that replaces it right after (maxSurge: 1) starts from
// the whole state. Without the lineage the replica read the trimmed stream
// from its start and served (and checkpointed) three of six addresses
// verified.
func TestReplicaStartedWhileTheStoreIsPausedCatchesUp(t *testing.T) {
	s := newOwnStoreSetup(t)
	one := s.replica(t, "one")
	s.verified(t, one)
	for _, a := range s.addresses[:3] {
		alert(t, one, a)
	}
	s.checkpointed(t)
	// What a long-running stream looks like: its start trimmed away.
	if err := s.redis.XTrimMaxLen(context.Background(), eventsKey, 0).Err(); err != nil {
		t.Fatal(err)
	}

	s.store.Pause()
	two := s.replica(t, "two") // its start waits for the store, then gives up
	if two.synced(t) {
		t.Error("a replica that could not reach the store says it is synced")
	}
	if err := two.exp.Ready(); err != nil {
		t.Errorf("a replica that cannot reach the store is not ready (%v): a rollout during a store outage would leave no listener", err)
	}
	// It has no /me to tell (empty folder, no checkpoint, no budget to ask):
	// unknown is not down, or a rollout during an outage pages
	// BreachAPIUnreachable while the API answers.
	up := testkit.Series("breach_api_up", "account", "default")
	if v, ok := two.scrape(t)[up]; ok {
		t.Errorf("a replica that knows nothing of /me serves %s %v, want it absent until it knows", up, v)
	}
	s.store.Resume()
	alert(t, one, "d@example.com")
	d := testkit.Series("breach_alerts_total", "address", "d@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "the alert counted", func() bool { return one.scrape(t)[d] == 1 })
	s.waitConverged(t, two, one)
	if v, ok := two.scrape(t)[up]; !ok || v != 1 {
		t.Errorf("caught up, it serves %s %v (served %v), want the checkpoint's 1", up, v, ok)
	}

	two.stop()
	servesAlike(t, s.replica(t, "three"), one, "a replica started after it")
}

// The same with the store restarted empty just before the replica starts:
// it waits for the replica that holds the history to checkpoint it again,
// then loads it, instead of starting empty and staying so.
func TestReplicaStartedAfterTheStoreRestartedEmptyCatchesUp(t *testing.T) {
	s := newOwnStoreSetup(t)
	one := s.replica(t, "one")
	s.verified(t, one)
	alert(t, one, "a@example.com")
	s.checkpointed(t)
	s.store.Stop()
	s.store.Start()
	two := s.replica(t, "two")
	s.waitConverged(t, two, one)
	if !one.synced(t) {
		t.Error("the replica that held the history is no longer synced")
	}
}

// Forged events are skipped and counted, the
// state stays, and an answer from a clock ahead is clamped. Unchecked, a
// breach_count of -7, a scan in 2100 and a zero refresh time were served,
// the answer 10 minutes ahead too, and nothing was counted.
func TestForgedEventsAreSkippedAndCounted(t *testing.T) {
	s := newStoreSetup(t)
	one := s.replica(t, "one")
	s.verified(t, one)
	now := time.Now().UTC()
	answer := func(count, scanned, at string) string {
		return fmt.Sprintf(`{"account":"default","key":"a@example.com","sent":"%s","at":"%s","state":"verified","sources":[`+
			`{"Source":"combolist","BreachCount":%s,"LastScannedAt":"%s","LastChangedAt":"2026-11-22T05:00:00Z"}]}`,
			now.Format(time.RFC3339), at, count, scanned)
	}
	ahead := now.Add(10 * time.Minute).Format(time.RFC3339)
	scanned := "2026-11-22T06:00:00Z"
	forged := []string{
		answer("1", scanned, ahead), // valid, its time clamped
		answer("-7", scanned, now.Format(time.RFC3339)),
		answer("1", "2100-01-01T00:00:00Z", now.Format(time.RFC3339)),
		answer("1", scanned, "0001-01-01T00:00:00Z"),
		answer("1", scanned, now.Format(time.RFC3339)) + strings.Repeat(" ", 2<<20),
	}
	for _, data := range forged {
		if err := s.redis.XAdd(context.Background(), &redis.XAddArgs{Stream: eventsKey,
			Values: []any{"kind", "answered", "origin", "forger", "data", data}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	invalid := testkit.Series("breach_exporter_store_events_invalid_total")
	testkit.Eventually(t, "the forged events read", func() bool { return one.scrape(t)[invalid] >= 4 })
	m := one.scrape(t)
	if m[invalid] != 4 {
		t.Errorf("%v events skipped, want the four invalid ones", m[invalid])
	}
	if v := m[testkit.Series("breach_source_breaches", "address", "a@example.com", "source", "combolist")]; v != 1 {
		t.Errorf("breach_source_breaches %v, want 1: the last valid answer's", v)
	}
	refresh := m[testkit.Series("breach_address_last_refresh_timestamp_seconds", "address", "a@example.com")]
	if limit := float64(time.Now().Add(time.Minute).Unix()); refresh <= 0 || refresh > limit {
		t.Errorf("last refresh %v, want at most now (%v): the answer ahead clamped", refresh, limit)
	}
}

// A forged checkpoint with the largest ID does not hold back later
// checkpoints: a replica writes over it, and one that starts then serves
// the state. Unchecked, the forged one stayed, and a start ignored every
// later state.
func TestForgedCheckpointIDDoesNotBlockCheckpoints(t *testing.T) {
	s := newStoreSetup(t)
	one := s.replica(t, "one")
	s.verified(t, one)
	ctx := context.Background()
	if err := s.redis.HSet(ctx, checkpointKey, "id", "18446744073709551615-18446744073709551615", "data", "forged").Err(); err != nil {
		t.Fatal(err)
	}
	alert(t, one, "a@example.com")
	testkit.Eventually(t, "a checkpoint written over the forged one", func() bool {
		id, err := s.redis.HGet(ctx, checkpointKey, "id").Result()
		return err == nil && !strings.HasPrefix(id, "18446744073709551615")
	})
	s.checkpointed(t)
	if n := one.scrape(t)[testkit.Series("breach_exporter_store_events_invalid_total")]; n != 1 {
		t.Errorf("the forged checkpoint counted %v times, want once; logs:\n%s", n, one.logs.String())
	}
	servesAlike(t, s.replica(t, "two"), one, "a replica started after the forged checkpoint")
}

// A restarted replica serves what the last /me said and each address's
// news from the store's checkpoint, as the others do: a rollout changes
// no value a rule reads.
// Without it breach_api_up read 0 until the next /me, and the news
// counters started again from 0.
func TestRestartedReplicaContinuesAPIUpAndNews(t *testing.T) {
	s := newStoreSetup(t)
	one := s.replica(t, "one")
	s.verified(t, one)
	// A second database for a: its re-read (the alert asks for it) is news.
	at := time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC)
	s.api.Answer("a@example.com", sim.Verified(breach.SourceState{Source: "combolist", BreachCount: 2, SourceDBs: []string{"x", "y"},
		FieldsExposed: []string{"password", "dob"}, HasPlaintextPassword: true, LastScannedAt: at, LastChangedAt: at}))
	alert(t, one, "a@example.com")
	news := testkit.Series("breach_address_new_databases_total", "address", "a@example.com")
	up := testkit.Series("breach_api_up", "account", "default")
	testkit.Eventually(t, "the news counted and /me answered", func() bool {
		m := one.scrape(t)
		return m[news] == 1 && m[up] == 1
	})
	s.checkpointed(t)
	two := s.replica(t, "two")
	m, want := two.scrape(t), one.scrape(t)
	for _, series := range []string{up, news, testkit.Series("breach_address_newly_exposed_sensitive_fields_total", "address", "a@example.com")} {
		if m[series] != want[series] {
			t.Errorf("%s: %v on the replica that started, %v on the other", series, m[series], want[series])
		}
	}
}

// A replica killed before its next snapshot replays its journal at start;
// the store finds those alerts duplicates. It counts accepted again only
// those its folder's earlier process added, not those another replica
// added, so that accepted summed over the replicas counts each body once
// as docs/replicas.md says. Counting by the store's answer alone counted
// every replayed alert accepted again: 3 for the 2 bodies here.
func TestCrashedReplicaCountsEachBodyAcceptedOnce(t *testing.T) {
	s := newStoreSetup(t)
	// one reaches the store through a link the test cuts.
	link := newLink(t, s.store.Addr())
	oneDir := t.TempDir()
	writeConfig(t, oneDir, s.api.BaseURL(), fmt.Sprintf("store:\n  url: redis://%s\nrefresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [%s]\n",
		link.addr(), strings.Join(s.addresses, ", ")))
	storage := filepath.Join(s.dir, "one")
	one := startReplicaEvery(t, oneDir, storage, time.Hour) // no snapshot before the crash
	two := s.replica(t, "two")
	s.verified(t, one)
	s.verified(t, two)
	accepted := testkit.Series("breach_webhook_requests_total", "outcome", "accepted")
	duplicate := testkit.Series("breach_webhook_requests_total", "outcome", "duplicate")
	alert(t, one, "b@example.com") // added by one
	testkit.Eventually(t, "b added by one", func() bool { return one.scrape(t)[accepted] == 1 })
	// a reaches one, which cannot pass it on and is killed; then two.
	link.cut(true)
	alert(t, one, "a@example.com")
	one.crash()
	link.cut(false)
	alert(t, two, "a@example.com")
	testkit.Eventually(t, "a added by two", func() bool { return two.scrape(t)[accepted] == 1 })
	one = startReplica(t, oneDir, storage)
	testkit.Eventually(t, "the replayed alerts passed to the store", func() bool {
		m := one.scrape(t)
		return m[accepted]+m[duplicate] == 2
	})
	if m1, m2 := one.scrape(t), two.scrape(t); m1[accepted]+m2[accepted] != 2 || m1[duplicate] != 1 {
		t.Errorf("accepted %v + %v, duplicate on the replayed replica %v; want 2 accepted (one per body) and a's duplicate", m1[accepted], m2[accepted], m1[duplicate])
	}
}

// link is a loopback TCP relay to the store that the test can cut: while
// cut, connections are refused at once (closed as accepted) and those
// open are closed, so that nothing is left in flight.
type link struct {
	ln    net.Listener
	to    string
	mu    sync.Mutex
	down  bool
	conns []net.Conn
	// sending, when set, is called with each chunk a replica sends before
	// it is passed on, and may hold it; sent once it was passed on, and
	// before any other chunk of any connection is: the test acts on the
	// store in between.
	sending func([]byte)
	sent    func([]byte)
	passing sync.Mutex
}

func newLink(t *testing.T, to string) *link {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{ln: ln, to: to}
	t.Cleanup(func() { ln.Close(); l.cut(true) })
	go l.serve()
	return l
}

func (l *link) addr() string { return l.ln.Addr().String() }

func (l *link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		down := l.down
		l.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", l.to)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, up)
		l.mu.Unlock()
		go func() { l.relay(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

// relay passes what the replica sends on c to up, one chunk at a time
// across the connections when sent is set.
func (l *link) relay(up, c net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			l.passing.Lock()
			hold := l.sending
			l.passing.Unlock()
			if hold != nil {
				hold(buf[:n])
			}
			l.passing.Lock()
			_, werr := up.Write(buf[:n])
			if l.sent != nil && werr == nil {
				l.sent(buf[:n])
			}
			l.passing.Unlock()
			if werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// onSend sets sending and sent.
func (l *link) onSend(sending, sent func([]byte)) {
	l.passing.Lock()
	defer l.passing.Unlock()
	l.sending, l.sent = sending, sent
}

// cut closes the link (down) or opens it again.
func (l *link) cut(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	if down {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}

// A single exporter without a store (0.2.0's mode) that becomes the first
// replica of a store carries its state over: its snapshot starts the
// store's lineage, and a replica that starts on an empty folder then
// serves the same: the upgrade from one exporter to replicas loses nothing.
func TestSingleExporterBecomesTheFirstReplica(t *testing.T) {
	s := newStoreSetup(t)
	alone := t.TempDir()
	writeConfig(t, alone, s.api.BaseURL(), fmt.Sprintf("refresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [%s]\n", strings.Join(s.addresses, ", ")))
	storage := filepath.Join(s.dir, "one")
	single := startReplica(t, alone, storage)
	s.verified(t, single)
	alert(t, single, "a@example.com")
	a := testkit.Series("breach_alerts_total", "address", "a@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "the alert counted", func() bool { return single.scrape(t)[a] == 1 })
	want := shared(t, single)
	single.stop()

	one := s.replica(t, "one") // the same folder, now with the store
	testkit.Eventually(t, "the first replica synced", func() bool { return one.synced(t) })
	if got := shared(t, one); got != want {
		t.Errorf("the first replica serves:\n%s\nwant what the single exporter served:\n%s", got, want)
	}
	s.checkpointed(t)
	servesAlike(t, s.replica(t, "two"), one, "a replica started on an empty folder")
}

// A replica cut off while the stream is trimmed past its position is no
// longer synced once it reaches the store again, and loads the checkpoint
// past the gap: a resync, not just a counter. Counting alone, it counted the
// gap (breach_exporter_store_events_missed_total) and served the alerts it
// missed as never sent.
func TestReplicaResyncsAfterAGap(t *testing.T) {
	s := newStoreSetup(t)
	link := newLink(t, s.store.Addr())
	twoDir := t.TempDir()
	writeConfig(t, twoDir, s.api.BaseURL(), fmt.Sprintf("store:\n  url: redis://%s\nrefresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [%s]\n",
		link.addr(), strings.Join(s.addresses, ", ")))
	one := s.replica(t, "one")
	two := startReplica(t, twoDir, filepath.Join(s.dir, "two"))
	s.verified(t, one)
	s.verified(t, two)
	link.cut(true)
	for _, a := range s.addresses[:3] {
		alert(t, one, a)
	}
	c := testkit.Series("breach_alerts_total", "address", "c@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "the alerts counted", func() bool { return one.scrape(t)[c] == 1 })
	s.checkpointed(t)
	if err := s.redis.XTrimMaxLen(context.Background(), eventsKey, 0).Err(); err != nil {
		t.Fatal(err)
	}
	link.cut(false)
	s.waitConverged(t, two, one)
}

// Ready: a replica that reaches the store but is not synced is not ready;
// synced, or with the store down, it is.
func TestReadyWaitsForSyncWhileTheStoreAnswers(t *testing.T) {
	r := testkit.StartRedis(t)
	c, err := sharedstore.Open(sharedstore.Options{URL: r.URL(), Replica: "r", Deployment: "test", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e := &Exporter{replicas: &replicas{shared: c}}
	if err := e.Ready(); err != nil {
		t.Errorf("before the store answered: %v, want ready", err)
	}
	if err := c.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Ready(); !errors.Is(err, errNotSynced) {
		t.Errorf("store up, not synced: %v, want %v", err, errNotSynced)
	}
	e.replicas.sync.synced.Store(true)
	if err := e.Ready(); err != nil {
		t.Errorf("synced: %v, want ready", err)
	}
	if err := (&Exporter{}).Ready(); err != nil {
		t.Errorf("without a store: %v, want ready", err)
	}
}

// linked starts a replica that reaches the store through a link the test
// can cut, and writes its snapshot (and checkpoint) every interval.
func (s *storeSetup) linked(t *testing.T, name string, interval time.Duration) (*replica, *link) {
	t.Helper()
	l := newLink(t, s.store.Addr())
	dir := t.TempDir()
	writeConfig(t, dir, s.api.BaseURL(), fmt.Sprintf("store:\n  url: redis://%s/%d\nrefresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [%s]\n",
		l.addr(), s.store.DB(), strings.Join(s.addresses, ", ")))
	return startReplicaEvery(t, dir, filepath.Join(s.dir, name), interval), l
}

// alertsCounted posts alerts from..to-1 for address to r (postAlerts)
// and waits until r counts to of them.
func alertsCounted(t *testing.T, r *replica, address string, from, to int) {
	t.Helper()
	postAlerts(t, address, from, to-from, r)
	series := alertsOf(address)
	testkit.Eventually(t, fmt.Sprintf("%d alerts for %s counted", to, address), func() bool { return r.scrape(t)[series] == float64(to) })
}

// The store restarts from an older save, and new entries follow before
// the replica that holds every event looks at the store's head (here: it
// is cut off meanwhile; in production its round is a second away while
// alerts arrive): it sees the loss in the entries themselves (each names
// the ID before it), starts a new lineage, and a replica that restarted
// from the older checkpoint loads it and ends with every alert. Before,
// the first replica's position lay before the store's newest again, so it
// saw nothing; the restarted one declared itself synced holding 3 alerts
// for a of 6, and stayed so.
func TestReplicaSeesARewindThatNewEntriesFollow(t *testing.T) {
	s := newOwnStoreSetup(t)
	one, link := s.linked(t, "one", time.Second)
	s.verified(t, one)
	alertsCounted(t, one, "a@example.com", 0, 3)
	s.checkpointed(t)
	ctx := context.Background()
	if err := s.redis.Save(ctx).Err(); err != nil { // the older save
		t.Fatal(err)
	}
	alertsCounted(t, one, "a@example.com", 3, 6)

	link.cut(true)
	s.store.Stop() // without saving: it starts again from the older save
	s.store.Start()
	two := s.replica(t, "two") // from the older checkpoint
	alertsCounted(t, two, "b@example.com", 0, 2)
	link.cut(false)

	a := alertsOf("a@example.com")
	testkit.Eventually(t, "the restarted replica holds every alert", func() bool { return two.scrape(t)[a] == 6 })
	s.waitConverged(t, two, one)
	m := one.scrape(t)
	if v := m[testkit.Series("breach_exporter_store_lineages_started_total", "reason", "rewound")]; v != 1 {
		t.Errorf("the replica that holds every event started %v lineages for the rewind, want 1", v)
	}
	if m[a] != 6 || m[alertsOf("b@example.com")] != 2 {
		t.Errorf("the replica that held every event counts %v and %v, want 6 and 2", m[a], m[alertsOf("b@example.com")])
	}
}

// The stream deleted while one replica holds less than another (cut off
// from the store meanwhile): both start new lineages, the one holding
// less first, and yet they settle on the one holding the most: its first
// checkpoint replaces the other's, which loads it. Before, the first
// written stayed, and the replica holding every alert loaded the one
// holding fewer (4 of 6).
func TestNewLineagesSettleOnTheReplicaHoldingTheMost(t *testing.T) {
	s := newStoreSetup(t)
	// Checkpoints only when a lineage starts: the store's stays older than
	// what both hold.
	one, linkOne := s.linked(t, "one", time.Hour)
	ctx := context.Background()
	testkit.Eventually(t, "the first lineage's checkpoint", func() bool {
		n, err := s.redis.Exists(ctx, checkpointKey).Result()
		return err == nil && n == 1
	})
	two, linkTwo := s.linked(t, "two", time.Hour)
	s.verified(t, one)
	s.verified(t, two)
	alertsCounted(t, one, "a@example.com", 0, 4)
	a := alertsOf("a@example.com")
	testkit.Eventually(t, "the alerts counted on both", func() bool { return two.scrape(t)[a] == 4 })
	linkTwo.cut(true)
	alertsCounted(t, one, "a@example.com", 4, 6)
	linkOne.cut(true)
	if err := s.redis.Del(ctx, eventsKey).Err(); err != nil {
		t.Fatal(err)
	}
	first, err := s.redis.HGet(ctx, checkpointKey, "lineage").Result()
	if err != nil {
		t.Fatal(err)
	}
	linkTwo.cut(false)
	testkit.Eventually(t, "the replica holding less started a lineage", func() bool {
		l, err := s.redis.HGet(ctx, checkpointKey, "lineage").Result()
		return err == nil && l != first
	})
	linkOne.cut(false)
	testkit.Eventually(t, "the replica that held less holds every alert", func() bool { return two.scrape(t)[a] == 6 })
	s.waitConverged(t, two, one)
	if v := one.scrape(t)[a]; v != 6 {
		t.Errorf("the replica that held every alert counts %v, want 6", v)
	}
}
