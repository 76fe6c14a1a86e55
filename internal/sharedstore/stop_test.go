// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// After Interrupt, the commands a stop sends one after another while the
// store hangs (an API outcome's publish, a claim's release, a 429's pause,
// the last checkpoint's look at the replicas' formats and its write, the
// serving lease's release), each with the timeout its caller gives it,
// end together by one deadline StopBound after the interrupt, not one
// full timeout after the other. The check is on the wall clock, with a
// margin that still tells the two apart: the commands are over within
// StopBound plus 2 s, while one timeout after the other takes at least
// 11 s (a timer never fires early).
func TestCommandsAfterInterruptShareOneDeadline(t *testing.T) {
	store := testkit.StartOwnRedis(t)
	a := open(t, store, "a", "stop")
	store.Pause()
	defer store.Resume()
	start := time.Now()
	a.Interrupt()
	steps := []struct {
		what    string
		timeout time.Duration
		run     func(context.Context) error
	}{
		{"publish", 2 * time.Second, func(ctx context.Context) error {
			_, err := a.Publish(ctx, "answered", []byte("{}"))
			return err
		}},
		{"release", 2 * time.Second, func(ctx context.Context) error { return a.Release(ctx, "acct", "item", 0) }},
		{"pause", 2 * time.Second, func(ctx context.Context) error { return a.Pause(ctx, "key", time.Second) }},
		{"formats", 2 * time.Second, func(ctx context.Context) error {
			_, _, err := a.Formats(ctx)
			return err
		}},
		{"checkpoint", 2 * time.Second, func(ctx context.Context) error {
			_, err := a.WriteCheckpoint(ctx, Checkpoint{ID: "1-0", Lineage: "L", Data: []byte("x")}, "")
			return err
		}},
		{"serving", time.Second, func(ctx context.Context) error { return a.ReleaseServing(ctx, "http://127.0.0.1:1") }},
	}
	for _, s := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
		err := s.run(ctx)
		cancel()
		if err == nil {
			t.Errorf("%s: the frozen store took it", s.what)
		}
		t.Logf("%s ended %v after the interrupt: %v", s.what, time.Since(start).Round(time.Millisecond), err)
	}
	if took, bound := time.Since(start), StopBound+2*time.Second; took > bound {
		t.Errorf("the commands after the interrupt took %v, more than %v: each waited on its own", took.Round(time.Millisecond), bound)
	}
}
