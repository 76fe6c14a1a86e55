// SPDX-License-Identifier: Apache-2.0

package testkit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// ticker waits on clock for period at a time until the test ends and
// counts the wake-ups, as a scheduler would.
func ticker(t *testing.T, clock *clockwork.FakeClock, period time.Duration) *atomic.Int64 {
	var n atomic.Int64
	testkit.Go(t, func(ctx context.Context) {
		for {
			select {
			case <-clock.After(period):
				n.Add(1)
			case <-ctx.Done():
				return
			}
		}
	})
	return &n
}

func TestAdvanceUntil(t *testing.T) {
	clock := clockwork.NewFakeClock()
	n := ticker(t, clock, time.Second)
	took := testkit.AdvanceUntil(t, clock, "three wake-ups", 500*time.Millisecond, func() bool { return n.Load() >= 3 })
	if took < 3*time.Second || took > 4*time.Second {
		t.Errorf("three one-second wake-ups took %v of fake time", took)
	}
}

func TestAdvanceParked(t *testing.T) {
	clock := clockwork.NewFakeClock()
	n := ticker(t, clock, time.Second)
	// Checked only while the ticker waits: the count is exact.
	took := testkit.AdvanceParked(t, clock, "five wake-ups", time.Second, time.Minute, func() bool { return n.Load() == 5 })
	if took != 5*time.Second {
		t.Errorf("five one-second wake-ups took %v of fake time, want 5s", took)
	}
	testkit.BlockUntilWaiting(t, clock)
	if got := n.Load(); got != 5 {
		t.Errorf("%d wake-ups after AdvanceParked returned, want 5", got)
	}
}
