// SPDX-License-Identifier: Apache-2.0

package ratelog

import (
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// One line per reason per interval, each carrying how many it stands for.
func TestOneLinePerReasonPerInterval(t *testing.T) {
	clock := clockwork.NewFakeClock()
	l := New(time.Minute, clock)
	allowed := 0
	for range 1000 {
		if _, ok := l.Allow("ENOSPC"); ok {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("%d lines of one reason in the first minute, want 1", allowed)
	}
	if n, ok := l.Allow("EIO"); !ok || n != 0 {
		t.Fatalf("another reason: %v, %d", ok, n)
	}
	clock.Advance(59 * time.Second)
	if _, ok := l.Allow("ENOSPC"); ok {
		t.Fatal("a line within the interval")
	}
	clock.Advance(time.Second)
	if n, ok := l.Allow("ENOSPC"); !ok || n != 1000 {
		t.Fatalf("after the interval: %v, suppressed %d; want 1000", ok, n)
	}
	if _, ok := l.Allow("ENOSPC"); ok {
		t.Fatal("a second line right after")
	}
}
