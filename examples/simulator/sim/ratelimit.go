// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"sync"
	"time"
)

// fixedWindow is the spec's per-key limit: a budget per Unix minute
// (aligned to :00), reset at the start of the next minute. Each key has
// one, and it keeps the record of its recent windows.
type fixedWindow struct {
	limit int

	mu      sync.Mutex
	history []Window // oldest first; the last is the current window
	dropped int      // windows dropped from the front of history
}

// Window is what one key's fixed window saw: the requests charged to it
// (429s included) and how many of them got 429.
type Window struct {
	Start       time.Time // the window's first second (UTC, on :00)
	Requests    int
	RateLimited int
}

// maxWindows bounds each key's history: a day of busy minutes. Older
// windows go, counted in Stats.WindowsDropped.
const maxWindows = 24 * 60

// verdict is what one request learns from the limiter; every response,
// allowed or not, reports it in the X-RateLimit-* headers.
type verdict struct {
	allowed   bool
	limit     int
	remaining int
	reset     int64 // Unix seconds at which the window ends
}

func windowOf(now time.Time) (minute, reset int64) {
	minute = now.Unix() / 60
	return minute, (minute + 1) * 60
}

// take spends one request of the window now falls in.
func (w *fixedWindow) take(now time.Time) verdict {
	minute, reset := windowOf(now)
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := len(w.history); n == 0 || w.history[n-1].Start.Unix()/60 != minute {
		if n == maxWindows {
			// Halving keeps the drop amortised O(1) per window.
			w.history = append(w.history[:0], w.history[n/2:]...)
			w.dropped += n / 2
		}
		w.history = append(w.history, Window{Start: time.Unix(minute*60, 0).UTC()})
	}
	cur := &w.history[len(w.history)-1]
	cur.Requests++
	if cur.Requests > w.limit {
		cur.RateLimited++
		return verdict{limit: w.limit, remaining: 0, reset: reset}
	}
	return verdict{allowed: true, limit: w.limit, remaining: w.limit - cur.Requests, reset: reset}
}

// windows copies the history and the count of windows dropped from it.
func (w *fixedWindow) windows() ([]Window, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Window(nil), w.history...), w.dropped
}

// unattributed is the verdict for a request without a recognised key: it
// spends nothing and sees a fresh window, since it cannot be charged to any
// key and must not drain a real key's budget.
func unattributed(limit int, now time.Time) verdict {
	_, reset := windowOf(now)
	return verdict{limit: limit, remaining: limit, reset: reset}
}
