// SPDX-License-Identifier: Apache-2.0

package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// harness runs a Watcher on a fake clock; its Reload counts into reloaded.
type harness struct {
	w        *Watcher
	clock    *clockwork.FakeClock
	reloaded chan struct{}
}

func start(t *testing.T) *harness {
	t.Helper()
	h := &harness{clock: clockwork.NewFakeClock(), reloaded: make(chan struct{}, 16)}
	var err error
	h.w, err = New(Options{
		Reload: func(context.Context) error {
			h.reloaded <- struct{}{}
			return nil
		},
		Limit:      1 << 10,
		Clock:      h.clock,
		Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		h.w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		h.w.Close()
	})
	// Run's ticker exists: advancing the clock from here reaches it.
	block(t, h.clock, 1)
	return h
}

func block(t *testing.T, clock *clockwork.FakeClock, waiters int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := clock.BlockUntilContext(ctx, waiters); err != nil {
		t.Fatalf("waiting for %d timers on the fake clock: %v", waiters, err)
	}
}

// untilReload lets the debounce run out whenever an event armed it, and
// returns at the first reload. Only the debounce moves the clock: the
// timer's backstop (5m) is not reached, so a reload here comes from a
// file event.
func (h *harness) untilReload(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-h.reloaded:
			return
		case <-time.After(5 * time.Millisecond):
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
		if h.clock.BlockUntilContext(ctx, 2) == nil { // the ticker and an armed debounce
			h.clock.Advance(Debounce)
		}
		cancel()
	}
	t.Fatal("no reload within 10s")
}

// reloads is the metric, and checks that no reload is pending beyond it.
func (h *harness) reloads(t *testing.T, want int) {
	t.Helper()
	if got := testutil.ToFloat64(h.w.reloads); got != float64(want) {
		t.Errorf("breach_exporter_file_watch_reloads_total = %v, want %d", got, want)
	}
	if n := len(h.reloaded); n != 0 {
		t.Errorf("%d more reloads than awaited", n)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestChangedContentReloads(t *testing.T) {
	h := start(t)
	dir := t.TempDir()
	ack := filepath.Join(dir, "acknowledgements.yml")
	write(t, ack, "acknowledgements: []\n")
	h.w.Watch(ack)

	// The same bytes again and another file of the directory: events, no
	// change.
	write(t, ack, "acknowledgements: []\n")
	write(t, filepath.Join(dir, "other.yml"), "x")
	block(t, h.clock, 2)
	h.clock.Advance(Debounce)

	write(t, ack, "acknowledgements: [{}]\n")
	h.untilReload(t)
	h.reloads(t, 1)
}

// A ConfigMap volume: the file is a symlink through ..data, and an update
// writes a new timestamped directory and swaps the ..data symlink; the file
// itself is never written.
func TestConfigMapSymlinkSwapReloads(t *testing.T) {
	h := start(t)
	dir := t.TempDir()
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "acknowledgements.yml"), content)
	}
	version("..2026_01_01_00_00_00.1", "acknowledgements: []\n")
	if err := os.Symlink("..2026_01_01_00_00_00.1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	ack := filepath.Join(dir, "acknowledgements.yml")
	if err := os.Symlink("..data/acknowledgements.yml", ack); err != nil {
		t.Fatal(err)
	}
	h.w.Watch(ack)

	version("..2026_01_01_00_05_00.2", "acknowledgements: [{}]\n")
	if err := os.Symlink("..2026_01_01_00_05_00.2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 1)
}

// Several files; Watch replaces the set: a file no longer in it reloads
// nothing.
func TestSeveralFilesAndReplacedSet(t *testing.T) {
	h := start(t)
	a := filepath.Join(t.TempDir(), "a.txt")
	b := filepath.Join(t.TempDir(), "b.txt")
	write(t, a, "a1")
	write(t, b, "b1")
	h.w.Watch(a, b, "", a)

	write(t, b, "b2")
	h.untilReload(t)
	h.reloads(t, 1)

	h.w.Watch(b)
	write(t, a, "a2")
	write(t, b, "b3")
	h.untilReload(t)
	h.reloads(t, 2)
}

// Without an event (the directory did not exist, so nothing watched it),
// the timer finds the change, and from then on the directory is watched.
func TestTimerBackstop(t *testing.T) {
	h := start(t)
	dir := filepath.Join(t.TempDir(), "later")
	ack := filepath.Join(dir, "acknowledgements.yml")
	h.w.Watch(ack)

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, ack, "acknowledgements: []\n")
	h.clock.Advance(Interval)
	select {
	case <-h.reloaded:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not reload")
	}

	write(t, ack, "acknowledgements: [{}]\n")
	h.untilReload(t)
	h.reloads(t, 2)
}

// A named pipe swapped in for the file neither blocks the watch nor goes
// unnoticed: it reads as absent, a change, whose reload then fails naming
// it; so does a file over the limit.
func TestPipeOrOversizedFileIsAChangeThatDoesNotBlock(t *testing.T) {
	h := start(t)
	dir := t.TempDir()
	ack := filepath.Join(dir, "acknowledgements.yml")
	write(t, ack, "acknowledgements: []\n")
	h.w.Watch(ack)

	if err := os.Remove(ack); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(ack, 0o600); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 1)

	if err := os.Remove(ack); err != nil {
		t.Fatal(err)
	}
	write(t, ack, "acknowledgements: []\n")
	h.untilReload(t)
	h.reloads(t, 2)

	write(t, ack, strings.Repeat("#", 2<<10))
	h.untilReload(t)
	h.reloads(t, 3)
}

// A glob: a file that starts or stops matching is a change, as is a
// matched file's content, a ConfigMap's ..data swap included; the
// directories the swap makes are not files. MaxMatches bounds what a glob
// brings.
func TestGlob(t *testing.T) {
	h := start(t)
	dir := t.TempDir()
	write(t, filepath.Join(dir, "hr.txt"), "a@example.com\n")
	h.w.Watch(filepath.Join(dir, "*.txt"))

	write(t, filepath.Join(dir, "it.txt"), "b@example.com\n")
	h.untilReload(t)
	h.reloads(t, 1)

	if err := os.Remove(filepath.Join(dir, "it.txt")); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 2)

	// A ConfigMap volume under the same glob.
	version := func(name, content string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "sales.txt"), content)
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..1", "c@example.com\n")
	if err := os.Symlink("..data/sales.txt", filepath.Join(dir, "sales.txt")); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 3)
	version("..2", "d@example.com\n")
	h.untilReload(t)
	h.reloads(t, 4)

	// Past MaxMatches, a glob's later files are not read: no change.
	if got := len(h.w.digests([]string{filepath.Join(dir, "*")})); got != 2 {
		t.Errorf("%d files under *, want 2 (hr.txt, sales.txt; no directories)", got)
	}
	bounded := &Watcher{opts: Options{MaxMatches: 1, Limit: 1 << 10}}
	if got := bounded.digests([]string{filepath.Join(dir, "*.txt")}); len(got) != 1 {
		t.Errorf("MaxMatches 1: %d files", len(got))
	}
}

// SetInterval moves the timer: a change with no event is found at the new
// interval, not the default's.
func TestSetInterval(t *testing.T) {
	h := start(t)
	dir := filepath.Join(t.TempDir(), "later")
	h.w.Watch(filepath.Join(dir, "*.txt"))
	h.w.SetInterval(time.Minute)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "a.txt"), "x")
	// The ticker is reset when Run takes the update: advance until the
	// reload, a minute at a time, well short of the default's 5 minutes.
	deadline := time.Now().Add(10 * time.Second)
	for advanced := time.Duration(0); ; advanced += time.Minute {
		if advanced >= Interval {
			t.Fatal("no reload before the default interval")
		}
		block(t, h.clock, 1)
		h.clock.Advance(time.Minute)
		select {
		case <-h.reloaded:
			h.reloads(t, 1)
			return
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no reload within 10s")
		}
	}
}

// A watched directory removed and made again (a volume remounted, a
// deployment tool that replaces the directory) is seen at once, not at the
// timer's backstop: its parent is watched too. Before, the watch went with
// the directory and came back only at the next tick (5 minutes).
func TestRecreatedDirectoryIsSeenAtOnce(t *testing.T) {
	h := start(t)
	dir := filepath.Join(t.TempDir(), "addresses")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "hr.txt"), "a@example.com\n")
	h.w.Watch(filepath.Join(dir, "*.txt"))

	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 1)

	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "hr.txt"), "b@example.com\n")
	h.untilReload(t)
	h.reloads(t, 2)

	// And the directory made again is watched itself: a later change
	// inside it is seen too.
	write(t, filepath.Join(dir, "hr.txt"), "c@example.com\n")
	h.untilReload(t)
	h.reloads(t, 3)
}

// A file that fails to read in one way and then in another (a named pipe,
// then a device) is a change each time, so that each failed read is
// re-read and counted by whoever reads it (the address files' read
// errors). Before, every failure read as the same "absent": the swap from
// the pipe to the device was no change, and its read error never counted.
func TestEachFailureIsAChange(t *testing.T) {
	h := start(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "hr.txt")
	write(t, file, "a@example.com\n")
	h.w.Watch(filepath.Join(dir, "*.txt"))

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(file, 0o600); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 1)

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", file); err != nil {
		t.Fatal(err)
	}
	h.untilReload(t)
	h.reloads(t, 2)
}
