// SPDX-License-Identifier: Apache-2.0

// Package ratelog bounds how often a failure that repeats is logged. A
// full disk refuses every alert that arrives: one error line each would
// bury the log (and fill it, on the same disk). The first failure of a
// reason is logged at once; later ones of that reason at most once per
// interval, the line saying how many were left out since the last one.
// The counts of what failed are the metrics' job; the log says why.
package ratelog

import (
	"sync"
	"time"

	"github.com/jonboulle/clockwork"
)

// SuppressedKey is the key of the count of lines of the same reason left
// out since the last one logged.
const SuppressedKey = "suppressed"

// Limiter paces the lines of each reason. Safe for concurrent use.
type Limiter struct {
	interval time.Duration
	clock    clockwork.Clock

	mu      sync.Mutex
	reasons map[string]*pace
}

type pace struct {
	next       time.Time // before it, lines of the reason are only counted
	suppressed int
}

// New returns a Limiter that logs a reason at most once per interval.
// clock nil is the real clock.
func New(interval time.Duration, clock clockwork.Clock) *Limiter {
	if clock == nil {
		clock = clockwork.NewRealClock()
	}
	return &Limiter{interval: interval, clock: clock, reasons: map[string]*pace{}}
}

// Allow reports whether a line of reason may be written now and, if so,
// how many lines of reason were left out since the last one written (the
// caller logs it under SuppressedKey); if not, it counts the line as left
// out. The caller writes the line itself, so that the log's caller is
// the code that failed. reason is one of the caller's constants (or an
// errno's name), never a value from outside: the Limiter keeps an entry
// per reason for its life.
func (l *Limiter) Allow(reason string) (suppressed int, ok bool) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.reasons[reason]
	if p == nil {
		p = &pace{}
		l.reasons[reason] = p
	}
	if now.Before(p.next) {
		p.suppressed++
		return 0, false
	}
	suppressed = p.suppressed
	p.next, p.suppressed = now.Add(l.interval), 0
	return suppressed, true
}
