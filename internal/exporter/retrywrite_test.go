// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"testing"
	"time"
)

// While the store refuses the checkpoint, writeNow tries again after a
// wait that doubles up to maxRetryWait, not every round: each try
// encodes the whole state.
func TestRetryWriteBacksOffToItsBound(t *testing.T) {
	var w retryWrite
	now := time.Unix(1_800_000_000, 0)
	if !w.due(now) {
		t.Fatal("a first write waits")
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, maxRetryWait, maxRetryWait}
	for i, wait := range want {
		w.failed(now)
		if w.wait != wait {
			t.Fatalf("wait after refusal %d: %v, want %v", i+1, w.wait, wait)
		}
		if w.due(now.Add(wait - time.Millisecond)) {
			t.Fatalf("after refusal %d a try is due before the wait of %v", i+1, wait)
		}
		if !w.due(now.Add(wait)) {
			t.Fatalf("after refusal %d no try is due at the end of the wait of %v", i+1, wait)
		}
		now = now.Add(wait)
	}
}
