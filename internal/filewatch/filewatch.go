// SPDX-License-Identifier: Apache-2.0

// Package filewatch triggers a reload when one of a set of files changes
// content, or a file starts or stops matching one of its globs. It
// watches each file's (or glob's) parent directory, not the file: a
// Kubernetes ConfigMap or Secret volume updates its files by swapping a
// `..data` symlink in that directory, which a watch on the file itself (the
// old target) never sees; editors that write a new file and rename it over
// the old one do the same. It watches that directory's parent too, for the
// directory itself: one removed and made again (a volume remounted, a tool
// that replaces the directory) loses its watch, and the parent's event for
// it is what puts the watch back at once. Every event in a watched directory, after a
// short debounce, and a timer (the backstop for filesystems without
// notifications, such as some network mounts) re-read the files; only a
// changed content triggers the reload.
//
// The exporter runs two: one reloads the config when the acknowledgements
// change, one re-reads the address files (addresses_files) when they do.
package filewatch

import (
	"context"
	"crypto/sha256"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

const (
	// Debounce is how long after the first event in a watched directory
	// the files are re-read: a ConfigMap update or an editor's save is
	// several events, read once.
	Debounce = time.Second
	// Interval is how often the files are re-read without any event, as
	// Prometheus' file_sd does by default, unless Options.Interval says
	// otherwise.
	Interval = 5 * time.Minute
)

// Options are what a Watcher needs besides its files.
type Options struct {
	// Reload puts the changed files in force; its error is logged by
	// whoever reloads, and what is in force stays.
	Reload func(context.Context) error
	// Interval is the timer's (0: Interval); SetInterval changes it.
	Interval time.Duration
	// MaxMatches bounds the files one glob brings, in name order (0: no
	// bound): the caller reads no more (addrfile.MaxFilesPerGlob), and
	// neither need the digests.
	MaxMatches int
	// Limit bounds what is read of each file to compare its content: the
	// largest limit (internal/fileread) of the kinds of file watched. A
	// file over it, or one that is no regular file, reads as absent, so
	// turning into one is a change, whose reload then fails naming it.
	Limit  int64
	Clock  clockwork.Clock // nil = real clock
	Logger log.Logger
	// Registerer takes breach_exporter_file_watch_reloads_total, the
	// reloads of the config; nil for a watch whose callback is no reload
	// (the address files have metrics of their own).
	Registerer prometheus.Registerer
}

// Watcher re-reads its files and calls Reload when any changed.
type Watcher struct {
	opts    Options
	reloads prometheus.Counter
	fsw     *fsnotify.Watcher // nil when notifications are unavailable
	close   sync.Once

	mu       sync.Mutex
	paths    []string          // the files and globs Watch set last
	dirs     map[string]bool   // their directories, whose events count
	seen     map[string]digest // their content then, by file
	interval time.Duration
	// update wakes Run after Watch (buffered: Watch never blocks, it is
	// called from inside Reload).
	update chan struct{}
}

// New returns a Watcher of no files; Watch sets them. Run closes it when
// it returns; Close it when Run is never called.
func New(o Options) (*Watcher, error) {
	if o.Clock == nil {
		o.Clock = clockwork.NewRealClock()
	}
	if o.Logger == nil {
		o.Logger = log.NewNopLogger()
	}
	if o.Interval <= 0 {
		o.Interval = Interval
	}
	w := &Watcher{
		opts:     o,
		interval: o.Interval,
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_file_watch_reloads_total",
			Help: "Reloads triggered because a watched file (the acknowledgements) changed content.",
		}),
		update: make(chan struct{}, 1),
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(w.reloads); err != nil {
			return nil, err
		}
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		// Out of inotify instances, say: the timer still re-reads.
		level.Warn(o.Logger).Log("msg", "Cannot watch files for changes; re-reading them on a timer only", "interval", o.Interval, "err", err)
	} else {
		w.fsw = fsw
	}
	return w, nil
}

// Close stops the notifications; later calls do nothing.
func (w *Watcher) Close() {
	w.close.Do(func() {
		if w.fsw != nil {
			w.fsw.Close()
		}
	})
}

// Watch replaces the set of files (absolute paths; empty ones are
// skipped). A path may be a glob whose wildcards are in its last element:
// the files it matches then (directories aside) are watched, and one that
// starts or stops matching is a change. The content they have when it
// returns is what a later change is measured against, so call it right
// after the files were loaded, or before a load that a repeated callback
// does no harm to; the events that follow it are seen.
func (w *Watcher) Watch(paths ...string) {
	var set []string
	for _, p := range paths {
		if p != "" && !slices.Contains(set, p) {
			set = append(set, p)
		}
	}
	// Read before the lock: a read that hangs (a dead network mount) must
	// not hold the lock Run takes.
	seen := w.digests(set)
	w.mu.Lock()
	w.paths = set
	w.rewatch()
	w.seen = seen
	w.mu.Unlock()
	w.wake()
}

// SetInterval changes the timer's interval from its next tick on.
func (w *Watcher) SetInterval(d time.Duration) {
	if d <= 0 {
		d = Interval
	}
	w.mu.Lock()
	w.interval = d
	w.mu.Unlock()
	w.wake()
}

func (w *Watcher) wake() {
	select {
	case w.update <- struct{}{}:
	default: // Run has a wake-up pending already.
	}
}

// Run re-reads the files after events and on the timer until ctx ends,
// then closes the Watcher.
func (w *Watcher) Run(ctx context.Context) {
	defer w.Close()
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if w.fsw != nil {
		events, errs = w.fsw.Events, w.fsw.Errors
	}
	interval := w.opts.Interval
	ticker := w.opts.Clock.NewTicker(interval)
	defer ticker.Stop()

	var (
		paths    []string
		seen     map[string]digest
		debounce <-chan time.Time // armed by the first event, nil when idle
	)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.update:
			paths, seen, interval = w.current(ticker, interval)
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if debounce == nil && w.noticed(ev) {
				debounce = w.opts.Clock.After(Debounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			level.Warn(w.opts.Logger).Log("msg", "File watch error; the timer still re-reads the files", "err", err)
		case <-debounce:
			debounce = nil
			var done bool
			if seen, done = w.checkApart(ctx, paths, seen); done {
				return
			}
		case <-ticker.Chan():
			w.mu.Lock()
			w.rewatch()
			w.mu.Unlock()
			var done bool
			if seen, done = w.checkApart(ctx, paths, seen); done {
				return
			}
		}
	}
}

// current is what Watch and SetInterval set last: the files, their
// content then, and the interval, to which it resets ticker (at interval
// now) when it differs.
func (w *Watcher) current(ticker clockwork.Ticker, interval time.Duration) ([]string, map[string]digest, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.interval != interval {
		interval = w.interval
		ticker.Reset(interval)
	}
	return w.paths, w.seen, interval
}

// checkApart is check in a goroutine of its own, waited for until ctx
// ends: a read that hangs (a dead network mount) then holds back only the
// next check, never the end of Run. done tells that ctx ended first.
func (w *Watcher) checkApart(ctx context.Context, paths []string, seen map[string]digest) (_ map[string]digest, done bool) {
	result := make(chan map[string]digest, 1)
	go func() { result <- w.check(ctx, paths, seen) }()
	select {
	case now := <-result:
		return now, false
	case <-ctx.Done():
		return seen, true
	}
}

// check re-reads paths and reloads when any changed since seen; it returns
// what it read, so a reload that fails is not retried until the next
// change.
func (w *Watcher) check(ctx context.Context, paths []string, seen map[string]digest) map[string]digest {
	now := w.digests(paths)
	changed := !maps.Equal(now, seen)
	for p, d := range now {
		if old, ok := seen[p]; !ok || old != d {
			level.Info(w.opts.Logger).Log("msg", "Watched file changed; reloading", "file", p)
		}
	}
	for p := range seen {
		if _, ok := now[p]; !ok {
			level.Info(w.opts.Logger).Log("msg", "Watched file no longer matched; reloading", "file", p)
		}
	}
	if changed {
		w.reloads.Inc()
		// The reload path logs its own outcome and keeps what is in force
		// when it fails.
		_ = w.opts.Reload(ctx)
	}
	return now
}

// noticed reports whether ev calls for a re-read: an event in one of the
// directories of the files, or one of those directories coming, going or
// moving, which also watches it again (a directory made again has no
// watch yet). Other events of the parents are not the files'.
func (w *Watcher) noticed(ev fsnotify.Event) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dirs[ev.Name] {
		w.rewatch()
		return true
	}
	return w.dirs[filepath.Dir(ev.Name)]
}

// rewatch makes fsw watch the directories of w.paths and their parents,
// and no others. A directory that cannot be watched (it does not exist
// yet) is tried again when its parent sees it come, or at the next tick;
// the timer re-reads its files meanwhile. Called with mu held.
func (w *Watcher) rewatch() {
	w.dirs = map[string]bool{}
	var dirs, parents []string
	for _, p := range w.paths {
		if d := filepath.Dir(p); !w.dirs[d] {
			w.dirs[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		if p := filepath.Dir(d); !w.dirs[p] && !slices.Contains(parents, p) {
			parents = append(parents, p)
		}
	}
	if w.fsw == nil {
		return
	}
	// A removed directory has left this list already.
	watched := w.fsw.WatchList()
	for _, d := range watched {
		if !w.dirs[d] && !slices.Contains(parents, d) {
			_ = w.fsw.Remove(d)
		}
	}
	for _, d := range append(dirs, parents...) {
		if slices.Contains(watched, d) {
			continue
		}
		err := w.fsw.Add(d)
		switch {
		case err == nil:
		case w.dirs[d]:
			level.Warn(w.opts.Logger).Log("msg", "Cannot watch a directory; re-reading its files on a timer", "dir", d, "interval", w.interval, "err", err)
		default: // a parent: only its directory's coming back is missed
			level.Debug(w.opts.Logger).Log("msg", "Cannot watch the parent of a watched directory", "dir", d, "err", err)
		}
	}
}

// digest is a file's content hash, or its absence and why: a file that
// goes and comes back is a change too.
type digest struct {
	sum    [sha256.Size]byte
	absent bool
}

// digests reads each file (and each file a glob matches) through its
// symlinks as the loader does, with fileread: a named pipe or a device
// swapped in must not block the watch.
func (w *Watcher) digests(paths []string) map[string]digest {
	m := make(map[string]digest, len(paths))
	for _, p := range paths {
		if !hasMeta(p) {
			m[p] = read(p, w.opts.Limit)
			continue
		}
		matches, _ := filepath.Glob(p) // sorted; the config refuses a bad pattern
		n := 0
		for _, f := range matches {
			if _, dup := m[f]; dup {
				continue
			}
			if info, err := os.Stat(f); err == nil && info.IsDir() {
				continue // a ConfigMap's ..data and its versions
			}
			if w.opts.MaxMatches > 0 && n == w.opts.MaxMatches {
				break
			}
			n++
			m[f] = read(f, w.opts.Limit)
		}
	}
	return m
}

// hasMeta reports whether path is a glob (filepath.Match's syntax).
func hasMeta(path string) bool {
	return strings.ContainsAny(path, `*?[\`)
}

// read is path's digest. A file that fails to read has the digest of its
// error, so that failing in another way (a named pipe, then a device) is a
// change too: whoever reads the files then reads, and counts, each
// failure.
func read(path string, limit int64) digest {
	data, err := fileread.Read(path, limit)
	if err != nil {
		return digest{sum: sha256.Sum256([]byte(err.Error())), absent: true}
	}
	return digest{sum: sha256.Sum256(data)}
}
