// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"runtime"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// One reply listing 300,000 database names is recorded,
// its news counted right, and the bounding and counting are done while
// another reader holds the watchlist's lock: only the swap needs it
// exclusively, so a scrape or an alert never waits for a large answer.
//
// The test holds the read lock, as a scrape's View does, and waits until
// Answered asks for the write lock (a reader's TryRLock then fails, as
// sync.RWMutex lets no new reader in ahead of a waiting writer). By then
// the answer must be bounded: its names past the cap are counted. A
// version that bounds or diffs under the exclusive lock asks for it before
// any of that, and fails here.
func TestLargeAnswerIsPreparedOutsideTheLock(t *testing.T) {
	n := 300_000 // the reply
	if testing.Short() {
		n = 10 * MaxDatabasesPerFeed // the same paths past the cap, in a thirtieth of the time
	}
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	first, second := bigAnswers(n)
	r.Answered("a@example.com", breach.Verified, first, at)
	pastCap := float64(n - MaxDatabasesPerFeed)
	if got := r.View().Dropped[LabelDatabase]; got != pastCap {
		t.Fatalf("dropped databases after the first answer = %v, want %v", got, pastCap)
	}

	r.mu.RLock()
	locked := true
	defer func() {
		if locked {
			r.mu.RUnlock()
		}
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Answered("a@example.com", breach.Verified, second, at.Add(time.Minute))
	}()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if !r.mu.TryRLock() {
			break // Answered waits for the write lock
		}
		r.mu.RUnlock()
		select {
		case <-done:
			t.Fatal("Answered finished while a reader held the lock")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("Answered never asked for the write lock")
		}
		runtime.Gosched()
	}
	if got := r.bounds.droppedCounts()[LabelDatabase]; got != 2*pastCap {
		t.Errorf("when Answered asked for the write lock, dropped databases = %v, want %v: the answer was not bounded before", got, 2*pastCap)
	}
	r.mu.RUnlock()
	locked = false
	<-done

	e, _ := entry(t, r, "a@example.com")
	if got := len(e.Sources[0].SourceDBs); got != n {
		t.Errorf("%d database names kept, want %d", got, n)
	}
	if want := (News{NewDatabases: float64(n / 2)}); e.News != want {
		t.Errorf("news %+v, want %+v: half the names are new", e.News, want)
	}
	if !e.LastRefresh.Equal(at.Add(time.Minute)) {
		t.Errorf("last refresh %v: the second answer was not swapped in", e.LastRefresh)
	}
}

// Answers recorded one after the other count their news against each
// other, whichever goroutine records them (run with -race).
func TestConcurrentAnswersCountNewsOnce(t *testing.T) {
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 0)
	base := []breach.SourceState{{Source: "index", SourceDBs: []string{"a"}}}
	more := []breach.SourceState{{Source: "index", SourceDBs: []string{"a", "b"}}}
	r.Answered("a@example.com", breach.Verified, base, at)
	// Every answer is "more": however the goroutines interleave, only the
	// first to be swapped in finds "b" new.
	const writers = 8
	done := make(chan struct{})
	for range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			r.Answered("a@example.com", breach.Verified, more, at)
		}()
	}
	for range writers {
		<-done
	}
	if e, _ := entry(t, r, "a@example.com"); e.News.NewDatabases != 1 {
		t.Errorf("new databases = %v, want 1: an answer was diffed against one it did not replace", e.News.NewDatabases)
	}
}
