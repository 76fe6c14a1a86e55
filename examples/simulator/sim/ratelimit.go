package sim

import (
	"sync"
	"time"
)

// fixedWindow is the spec's per-key limit: a budget per Unix minute
// (aligned to :00), reset at the start of the next minute. A simulator
// accepts a single key, so one window is the whole per-key table.
type fixedWindow struct {
	limit int

	mu     sync.Mutex
	minute int64 // Unix minute of the current window
	used   int
}

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
	if minute != w.minute {
		w.minute, w.used = minute, 0
	}
	if w.used >= w.limit {
		return verdict{limit: w.limit, remaining: 0, reset: reset}
	}
	w.used++
	return verdict{allowed: true, limit: w.limit, remaining: w.limit - w.used, reset: reset}
}

// unattributed is the verdict for a request without a recognised key: it
// spends nothing and sees a fresh window, since it cannot be charged to any
// key and must not drain the real key's budget.
func (w *fixedWindow) unattributed(now time.Time) verdict {
	_, reset := windowOf(now)
	return verdict{limit: w.limit, remaining: w.limit, reset: reset}
}
