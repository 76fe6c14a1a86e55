package addrfile

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
)

// Watcher says when to read the address files again: on any change in
// the directories of the globs, and every interval besides, as Prometheus
// does for its target files. It watches the directories, not the files: a
// Kubernetes ConfigMap update swaps the directory's ..data symlink and
// never writes the file a watch on it would follow.
type Watcher struct {
	fs     *fsnotify.Watcher // nil when the system gave none: the timer alone
	dirs   map[string]bool   // watched now
	logger log.Logger
	clock  clockwork.Clock
}

// NewWatcher returns a Watcher watching nothing yet; Close releases it.
// When the system refuses a watch (inotify's limit on instances), the
// error says so and the Watcher still reads on its timer.
func NewWatcher(logger log.Logger, clock clockwork.Clock) (*Watcher, error) {
	w := &Watcher{dirs: map[string]bool{}, logger: logger, clock: clock}
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return w, err
	}
	w.fs = fs
	return w, nil
}

// Close stops watching.
func (w *Watcher) Close() error {
	if w.fs == nil {
		return nil
	}
	return w.fs.Close()
}

// Run calls read after every change in the directories of the globs and
// every interval without one, until ctx ends. current returns the globs and
// the interval in force; Run asks before each wait, and again after a
// value on kick, which is not a read (a reload reads the files itself).
// Events that come together are one read.
func (w *Watcher) Run(ctx context.Context, kick <-chan struct{}, current func() ([]string, time.Duration), read func()) {
	var (
		events <-chan fsnotify.Event
		errs   <-chan error
	)
	if w.fs != nil {
		events, errs = w.fs.Events, w.fs.Errors
	}
	for {
		globs, interval := current()
		w.watch(globs)
		timer := w.clock.NewTimer(interval)
		doRead := true
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case ev, ok := <-events:
			if !ok {
				timer.Stop()
				return
			}
			// A chmod changes no content (Prometheus ignores it too).
			doRead = ev.Op != fsnotify.Chmod
			if w.dirs[ev.Name] && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
				// The directory itself went, and its watch with it: the
				// next watch adds it again once it is back.
				delete(w.dirs, ev.Name)
			}
			w.drain()
		case err, ok := <-errs:
			if !ok {
				timer.Stop()
				return
			}
			// An overflow lost events: reading again covers them.
			level.Warn(w.logger).Log("msg", "Watching the address files' directories failed; reading them again", "err", err)
		case <-timer.Chan():
		case <-kick:
			doRead = false
		}
		timer.Stop()
		if doRead {
			read()
		}
	}
}

// drain takes the events already queued: one read covers them.
func (w *Watcher) drain() {
	for {
		select {
		case _, ok := <-w.fs.Events:
			if !ok {
				return
			}
		default:
			return
		}
	}
}

// watch makes the watched directories those of globs. A directory that
// cannot be watched (it does not exist yet) is tried again before the next
// wait; the timer reads its files meanwhile.
func (w *Watcher) watch(globs []string) {
	if w.fs == nil {
		return
	}
	want := map[string]bool{}
	for _, g := range globs {
		want[filepath.Dir(g)] = true
	}
	for dir := range w.dirs {
		if !want[dir] {
			if err := w.fs.Remove(dir); err != nil && !errors.Is(err, fsnotify.ErrNonExistentWatch) {
				level.Debug(w.logger).Log("msg", "Could not stop watching a directory", "dir", dir, "err", err)
			}
			delete(w.dirs, dir)
		}
	}
	for dir := range want {
		if w.dirs[dir] {
			continue
		}
		if err := w.fs.Add(dir); err != nil {
			level.Warn(w.logger).Log("msg", "Cannot watch an address files' directory; reading it every refresh.files_interval only", "dir", dir, "err", err)
			continue
		}
		w.dirs[dir] = true
	}
}
