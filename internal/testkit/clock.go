// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// realDeadline turns a condition that never holds, or code that never
// waits on the clock, into a failure rather than a hung test.
const realDeadline = 30 * time.Second

// AdvanceUntil moves clock forward step at a time until cond holds, and
// returns how much fake time that took. Before each step it gives the code
// under test up to 50 ms of real time to wait on the clock, so that a step
// is seldom taken while it is busy (on the network, say) and its timers are
// not overshot; the step is taken either way. It fails the test when cond
// has not held after 30 s of real time.
func AdvanceUntil(t testing.TB, clock *clockwork.FakeClock, what string, step time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := clock.Now()
	deadline := time.Now().Add(realDeadline)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (after %v of fake time)", what, clock.Since(start))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_ = clock.BlockUntilContext(ctx, 1) // the code under test waits on the clock, or is busy
		cancel()
		clock.Advance(step)
	}
	return clock.Since(start)
}

// AdvanceParked is AdvanceUntil for code that always comes back to wait on
// the clock: each step is taken, and cond checked, only once a goroutine
// waits on it, so cond never sees a unit of work half done. It fails the
// test when nothing waits within 30 s of real time, and when cond has not
// held after limit of fake time.
func AdvanceParked(t testing.TB, clock *clockwork.FakeClock, what string, step, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), realDeadline)
	defer cancel()
	begin := clock.Now()
	for {
		if err := clock.BlockUntilContext(ctx, 1); err != nil {
			t.Fatalf("waiting for %s: nothing waited on the clock within %s of real time", what, realDeadline)
		}
		took := clock.Since(begin)
		if cond() {
			return took
		}
		if took >= limit {
			t.Fatalf("%s did not happen within %s of fake time", what, limit)
		}
		clock.Advance(step)
	}
}

// BlockUntilWaiting waits until a goroutine waits on clock, failing the
// test after 30 s of real time.
func BlockUntilWaiting(t testing.TB, clock *clockwork.FakeClock) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), realDeadline)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, 1); err != nil {
		t.Fatal("nothing waited on the clock")
	}
}

// Go runs f in a goroutine until the test ends, or until the function it
// returns is called: either cancels f's context and waits for f to return.
func Go(t testing.TB, f func(ctx context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(ctx)
	}()
	stop = func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}
