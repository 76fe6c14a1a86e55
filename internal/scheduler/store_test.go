// SPDX-License-Identifier: Apache-2.0

package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/api"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// openStore opens a client of r as the replica name, joined to the test's
// deployment.
func openStore(t *testing.T, r *testkit.Redis, name string) *sharedstore.Client {
	t.Helper()
	c, err := sharedstore.Open(sharedstore.Options{URL: r.URL(), Replica: name, Deployment: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Join(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// The store's ready times hold the addresses watched and /me, no more: an
// address a reload removes, one the service does not monitor (404, dropped)
// and one removed while no replica ran all leave it. Against redis-server:
// the hash is the real one.
func TestRemovedAddressesLeaveTheStoresReadyTimes(t *testing.T) {
	r := testkit.StartRedis(t)
	store := openStore(t, r, "r0")
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), DB: r.DB(), Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	hash := "breach_exporter:ready:" + breach.DefaultAccount
	fields := func() []string {
		t.Helper()
		got, err := rdb.HKeys(ctx, hash).Result()
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	want := func(emails ...string) []string {
		w := []string{meItem}
		for _, e := range emails {
			w = append(w, itemFor(e))
		}
		slices.Sort(w)
		return w
	}
	// Left by an address removed while no replica ran.
	if err := rdb.HSet(ctx, hash, itemFor("gone@example.com"), "1").Err(); err != nil {
		t.Fatal(err)
	}

	st := Settings{Addresses: emails(3), RequestsPerMinute: 60, Interval: time.Hour, MeInterval: time.Hour}
	h := newHarness(t, st, func(o *Options) { o.SharedStore = store })
	h.api.script = func(c call, _ *breach.RateLimit) error {
		if c.email == "madeup@example.com" {
			return &api.Error{Kind: api.KindNotMonitored, StatusCode: 404}
		}
		return nil
	}
	h.start().advance(10 * time.Second)
	if got := fields(); !slices.Equal(got, want(emails(3)...)) {
		t.Fatalf("ready times after the first round: %v, want /me and the 3 addresses %v", got, want(emails(3)...))
	}

	if !h.add("madeup@example.com") {
		t.Fatal("the alert did not discover its address")
	}
	h.advance(10 * time.Second)
	if n := len(h.api.callsTo("madeup@example.com")); n != 1 {
		t.Fatalf("the discovered address was read %d times, want once", n)
	}
	st.Addresses = emails(2)
	h.update(st)
	h.advance(10 * time.Second)
	if got := fields(); !slices.Equal(got, want(emails(2)...)) {
		t.Fatalf("ready times after a 404 and a reload: %v, want /me and the 2 addresses left %v", got, want(emails(2)...))
	}
}

// storeUnderTest is one SharedStore seen by two replicas, and a way to
// empty it.
type storeUnderTest struct {
	a, b  SharedStore
	flush func()
}

// The fake store the fake-clock tests use answers as redis-server does:
// the same calls, in the same order, get the same answers (waits within
// the time the real calls take).
func TestFakeStoreAnswersAsTheRealOne(t *testing.T) {
	r := testkit.StartRedis(t)
	open := func(name string) *sharedstore.Client { return openStore(t, r, name) }
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr(), DB: r.DB(), Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	real := storeUnderTest{a: open("a"), b: open("b"), flush: func() { rdb.FlushDB(context.Background()) }}
	fake := newFakeStore(clockwork.NewFakeClockAt(t0))
	fakes := storeUnderTest{a: fake.as("a"), b: fake.as("b"), flush: fake.flush}

	got, want := storeContract(t, fakes), storeContract(t, real)
	if len(got) != len(want) {
		t.Fatalf("the fake answered %d times, the real store %d", len(got), len(want))
	}
	for i := range want {
		if got[i].what != want[i].what || got[i].ok != want[i].ok || got[i].wait < want[i].wait || got[i].wait > want[i].wait+time.Second {
			t.Errorf("%s: the fake answered %v %s, the real store %v %s", want[i].what, got[i].ok, got[i].wait, want[i].ok, want[i].wait)
		}
	}
}

type storeAnswer struct {
	what string
	ok   bool
	wait time.Duration
}

// storeContract makes the same calls on s and returns the answers.
func storeContract(t *testing.T, s storeUnderTest) []storeAnswer {
	t.Helper()
	ctx := context.Background()
	const spacing, horizon, scope = 10 * time.Second, time.Minute, "acct"
	var out []storeAnswer
	note := func(what string, wait time.Duration, ok bool, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		out = append(out, storeAnswer{what, ok, wait.Truncate(time.Second)})
	}
	reserve := func(what string, st SharedStore) {
		t.Helper()
		w, ok, err := st.Reserve(ctx, "k", spacing, horizon)
		note(what, w, ok, err)
	}
	claim := func(what string, st SharedStore, item string, urgent bool) {
		t.Helper()
		ok, err := st.Claim(ctx, scope, item, time.Minute, urgent)
		note(what, 0, ok, err)
	}
	reserve("a's first slot", s.a)
	reserve("b's slot", s.b)
	note("a's pause", 0, true, s.a.Pause(ctx, "k", 50*time.Second))
	reserve("a slot after the pause", s.b)
	reserve("a slot at the horizon", s.a)
	reserve("a slot past the horizon", s.a)
	s.flush()
	reserve("a's slot after the store lost the budget", s.a)
	reserve("b's slot after a found it lost", s.b)

	claim("a claims x", s.a, "x", false)
	claim("b claims x a holds", s.b, "x", true)
	note("a releases x", 0, true, s.a.Release(ctx, scope, "x", time.Hour))
	claim("b claims x before its ready time", s.b, "x", false)
	claim("b claims x urgently", s.b, "x", true)
	note("b releases x", 0, true, s.b.Release(ctx, scope, "x", time.Hour))
	note("a releases y", 0, true, s.a.Release(ctx, scope, "y", time.Hour))
	note("a releases z", 0, true, s.a.Release(ctx, scope, "z", time.Hour))
	note("a forgets x", 0, true, s.a.Forget(ctx, scope, []string{"x"}))
	claim("b claims x forgotten", s.b, "x", false)
	note("a prunes all but z", 0, true, s.a.Prune(ctx, scope, func(item string) bool { return item == "z" }))
	claim("a claims y pruned", s.a, "y", false)
	claim("a claims z kept", s.a, "z", false)
	return out
}
