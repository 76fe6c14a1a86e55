// SPDX-License-Identifier: Apache-2.0

// Package filewatch triggers a reload when one of a set of files changes
// content. It watches each file's parent directory, not the file: a
// Kubernetes ConfigMap or Secret volume updates its files by swapping a
// `..data` symlink in that directory, which a watch on the file itself (the
// old target) never sees; editors that write a new file and rename it over
// the old one do the same. Every event in a watched directory, after a
// short debounce, and a timer (the backstop for filesystems without
// notifications, such as some network mounts) re-read the files; only a
// changed content triggers the reload.
package filewatch

import (
	"context"
	"crypto/sha256"

	"path/filepath"
	"slices"
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
	// Prometheus' file_sd does by default.
	Interval = 5 * time.Minute
)

// Options are what a Watcher needs besides its files.
type Options struct {
	// Reload puts the changed files in force; its error is logged by
	// whoever reloads, and what is in force stays.
	Reload func(context.Context) error
	// Limit bounds what is read of each file to compare its content: the
	// largest limit (internal/fileread) of the kinds of file watched. A
	// file over it, or one that is no regular file, reads as absent, so
	// turning into one is a change, whose reload then fails naming it.
	Limit      int64
	Clock      clockwork.Clock // nil = real clock
	Logger     log.Logger
	Registerer prometheus.Registerer
}

// Watcher re-reads its files and calls Reload when any changed.
type Watcher struct {
	opts    Options
	reloads prometheus.Counter
	fsw     *fsnotify.Watcher // nil when notifications are unavailable
	close   sync.Once

	mu    sync.Mutex
	paths []string          // the files Watch set last
	seen  map[string]digest // their content then
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
	w := &Watcher{
		opts: o,
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_file_watch_reloads_total",
			Help: "Reloads triggered because a watched file (the acknowledgements) changed content.",
		}),
		update: make(chan struct{}, 1),
	}
	if err := o.Registerer.Register(w.reloads); err != nil {
		return nil, err
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		// Out of inotify instances, say: the timer still re-reads.
		level.Warn(o.Logger).Log("msg", "Cannot watch files for changes; re-reading them on a timer only", "interval", Interval, "err", err)
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
// skipped). The content they have when it returns is what a later change
// is measured against, so call it right after the files were loaded; the
// events that follow it are seen.
func (w *Watcher) Watch(paths ...string) {
	var set []string
	for _, p := range paths {
		if p != "" && !slices.Contains(set, p) {
			set = append(set, p)
		}
	}
	w.mu.Lock()
	w.paths = set
	w.rewatch()
	w.seen = digests(set, w.opts.Limit)
	w.mu.Unlock()
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
	ticker := w.opts.Clock.NewTicker(Interval)
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
			w.mu.Lock()
			paths, seen = w.paths, w.seen
			w.mu.Unlock()
		case _, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if debounce == nil {
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
			seen = w.check(ctx, paths, seen)
		case <-ticker.Chan():
			w.mu.Lock()
			w.rewatch()
			w.mu.Unlock()
			seen = w.check(ctx, paths, seen)
		}
	}
}

// check re-reads paths and reloads when any changed since seen; it returns
// what it read, so a reload that fails is not retried until the next
// change.
func (w *Watcher) check(ctx context.Context, paths []string, seen map[string]digest) map[string]digest {
	now := digests(paths, w.opts.Limit)
	changed := false
	for _, p := range paths {
		if now[p] != seen[p] {
			changed = true
			level.Info(w.opts.Logger).Log("msg", "Watched file changed; reloading", "file", p)
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

// rewatch makes fsw watch the parent directories of w.paths, and no
// others. A directory that cannot be watched (it does not exist yet) is
// tried again at the next tick; the timer re-reads its files meanwhile.
// Called with mu held.
func (w *Watcher) rewatch() {
	if w.fsw == nil {
		return
	}
	var dirs []string
	for _, p := range w.paths {
		if d := filepath.Dir(p); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	// A removed directory has left this list already.
	watched := w.fsw.WatchList()
	for _, d := range watched {
		if !slices.Contains(dirs, d) {
			_ = w.fsw.Remove(d)
		}
	}
	for _, d := range dirs {
		if slices.Contains(watched, d) {
			continue
		}
		if err := w.fsw.Add(d); err != nil {
			level.Warn(w.opts.Logger).Log("msg", "Cannot watch a directory; re-reading its files on a timer", "dir", d, "interval", Interval, "err", err)
		}
	}
}

// digest is a file's content hash, or its absence: a file that goes and
// comes back is a change too.
type digest struct {
	sum    [sha256.Size]byte
	absent bool
}

// digests reads each file through its symlinks as the loader does, with
// fileread: a named pipe or a device swapped in must not block the watch.
func digests(paths []string, limit int64) map[string]digest {
	m := make(map[string]digest, len(paths))
	for _, p := range paths {
		m[p] = read(p, limit)
	}
	return m
}

func read(path string, limit int64) digest {
	data, err := fileread.Read(path, limit)
	if err != nil {
		return digest{absent: true}
	}
	return digest{sum: sha256.Sum256(data)}
}
