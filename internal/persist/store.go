package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// LockName is the lock file inside --storage.path: one process owns the
// folder at a time, as Prometheus locks its data directory.
const LockName = "lock"

// Store is the snapshot file in one folder, with its metrics. It holds
// the folder's lock until Close.
type Store struct {
	dir    string
	logger log.Logger
	lock   *os.File

	lastOK       prometheus.Gauge
	lastOKTime   prometheus.Gauge
	duration     prometheus.Gauge
	size         prometheus.Gauge
	writeErrors  prometheus.Counter
	loadFailures prometheus.Counter
	restored     prometheus.Gauge
}

// Open makes dir (and its parents) if needed, locks it and checks that a
// file can be created in it, so that a path that cannot hold a snapshot,
// or that another process uses, refuses the start instead of failing every
// interval or writing over the other's state.
func Open(dir string, reg prometheus.Registerer, logger log.Logger) (s *Store, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	probe, err := os.CreateTemp(dir, ".write-check-*")
	if err != nil {
		return nil, err
	}
	probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return nil, err
	}
	s = &Store{
		dir:    dir,
		logger: logger,
		lock:   lock,
		lastOK: gauge("breach_exporter_state_snapshot_last_successful",
			"1 when the last write of the state snapshot succeeded, else 0."),
		lastOKTime: gauge("breach_exporter_state_snapshot_last_success_timestamp_seconds",
			"When the state snapshot was last written (Unix seconds); 0 before the first write."),
		duration: gauge("breach_exporter_state_snapshot_duration_seconds",
			"How long the last write of the state snapshot took."),
		size: gauge("breach_exporter_state_snapshot_size_bytes",
			"Size of the last state snapshot written."),
		writeErrors: counter("breach_exporter_state_snapshot_failures_total",
			"Writes of the state snapshot that failed."),
		loadFailures: counter("breach_exporter_state_load_failures_total",
			"State snapshots found at start that could not be read (unreadable, truncated, damaged or of an unknown version); each was moved aside and the exporter started empty."),
		restored: gauge("breach_exporter_state_restored_addresses",
			"Addresses restored from the state snapshot at start."),
	}
	// Until the first write, the last one did not fail.
	s.lastOK.Set(1)
	for _, c := range []prometheus.Collector{s.lastOK, s.lastOKTime, s.duration, s.size, s.writeErrors, s.loadFailures, s.restored} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// lockDir takes an exclusive flock on dir's lock file and writes the
// process's id into it, for whoever finds the folder taken. The kernel
// releases the lock when the process ends, however it ends: a killed
// exporter's folder is free at once.
func lockDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder, _ := os.ReadFile(path)
			return nil, fmt.Errorf("the folder is in use by another process (pid %s, in %s): one exporter per --storage.path",
				strings.TrimSpace(string(holder)), path)
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	// The id is for people; the lock works without it.
	if f.Truncate(0) == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Close releases the folder's lock.
func (s *Store) Close() error { return s.lock.Close() }

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

func (s *Store) path() string { return filepath.Join(s.dir, FileName) }

// Load reads the snapshot. No file is a first start. A file that cannot be
// used is logged with the reason, counted, and moved aside (to *.corrupt,
// for a human to look at) so the next start does not trip on it again; the
// exporter then starts empty.
func (s *Store) Load() (State, bool) {
	data, err := os.ReadFile(s.path())
	if errors.Is(err, fs.ErrNotExist) {
		return State{}, false
	}
	if err == nil {
		var st State
		if st, err = Decode(data); err == nil {
			return st, true
		}
	}
	s.loadFailures.Inc()
	aside := s.path() + ".corrupt"
	if mvErr := os.Rename(s.path(), aside); mvErr != nil {
		level.Error(s.logger).Log("msg", "The state snapshot cannot be read nor moved aside; starting empty", "file", s.path(), "err", err, "move_err", mvErr)
		return State{}, false
	}
	level.Error(s.logger).Log("msg", "The state snapshot cannot be read; moved it aside and starting empty", "file", s.path(), "moved_to", aside, "err", err)
	return State{}, false
}

// Restored records how many addresses the start took from the snapshot.
func (s *Store) Restored(n int) { s.restored.Set(float64(n)) }

// Save writes st atomically and records the outcome.
func (s *Store) Save(st State, now time.Time) error {
	start := time.Now()
	data, err := Encode(st, now)
	if err == nil {
		err = Write(s.dir, data)
	}
	if err != nil {
		s.lastOK.Set(0)
		s.writeErrors.Inc()
		return fmt.Errorf("writing the state snapshot to %s: %w", s.dir, err)
	}
	s.lastOK.Set(1)
	s.lastOKTime.Set(float64(now.UnixMilli()) / 1000)
	s.duration.Set(time.Since(start).Seconds())
	s.size.Set(float64(len(data)))
	return nil
}
