// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// Folder is the state folder (--storage.path): the state snapshot and,
// through OpenJournal, the journal, with their metrics. It holds the
// folder, locked, until Close.
type Folder struct {
	folder *lockedDir
	logger log.Logger

	lastOK       prometheus.Gauge
	lastOKTime   prometheus.Gauge
	duration     prometheus.Gauge
	size         prometheus.Gauge
	writeErrors  prometheus.Counter
	loadFailures prometheus.Counter
	restored     prometheus.Gauge
}

// writeCheck is the file Open creates and removes to see that the folder
// takes files.
const writeCheck = ".write-check"

// Open makes dir (and its parents) if needed, locks it and checks that a
// file can be created in it, so that a path that cannot hold a snapshot,
// or that another process uses, refuses the start instead of failing every
// interval or writing over the other's state.
func Open(dir string, reg prometheus.Registerer, logger log.Logger) (s *Folder, err error) {
	f, err := openFolder(dir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	probe, err := f.root.OpenFile(writeCheck, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, err
	}
	probe.Close()
	if err := f.root.Remove(writeCheck); err != nil {
		return nil, err
	}
	s = &Folder{
		folder: f,
		logger: logger,
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

// Root is the folder opened at start, for the small files other parts of
// the exporter keep in it (the alerts the shared store confirmed):
// reached through it, never through the path again.
func (s *Folder) Root() *os.Root { return s.folder.root }

// Close releases the folder and its lock. Close the journal first.
func (s *Folder) Close() error { return s.folder.close() }

func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

func counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
}

// Load reads the snapshot. No file is a first start. A file that cannot be
// used is logged with the reason, counted, and moved aside (to *.corrupt,
// for a human to look at) so the next start does not trip on it again; the
// exporter then starts empty.
func (s *Folder) Load() (State, bool) {
	// A named pipe or a device in its place would block or never end the
	// read, and a huge file would cost the process: both are damaged
	// snapshots.
	data, err := fileread.ReadIn(s.folder.root, FileName, fileread.MaxSnapshotBytes)
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
	path, aside := filepath.Join(s.folder.path, FileName), filepath.Join(s.folder.path, FileName+".corrupt")
	if mvErr := s.folder.root.Rename(FileName, FileName+".corrupt"); mvErr != nil {
		level.Error(s.logger).Log("msg", "The state snapshot cannot be read nor moved aside; starting empty", "file", path, "err", err, "move_err", mvErr)
		return State{}, false
	}
	level.Error(s.logger).Log("msg", "The state snapshot cannot be read; moved it aside and starting empty", "file", path, "moved_to", aside, "err", err)
	return State{}, false
}

// Restored records how many addresses the start took from the snapshot.
func (s *Folder) Restored(n int) { s.restored.Set(float64(n)) }

// Save writes st atomically and records the outcome. The snapshot is
// written into the folder opened at start; it counts as written only if
// the path still names that folder once it is there.
func (s *Folder) Save(st State, now time.Time) error {
	start := time.Now()
	data, err := Encode(st, now)
	return s.save(data, err, start, now)
}

// SaveEncoded is Save of the bytes Encode rendered at start (with
// replicas, the same bytes are the store's checkpoint: encoded once).
func (s *Folder) SaveEncoded(data []byte, start, now time.Time) error {
	return s.save(data, nil, start, now)
}

func (s *Folder) save(data []byte, err error, start, now time.Time) error {
	if err == nil && len(data) > fileread.MaxSnapshotBytes {
		// Written, it would be refused at the next start.
		err = &fileread.TooLargeError{Limit: fileread.MaxSnapshotBytes}
	}
	if err == nil {
		err = write(s.folder.root, FileName, data)
	}
	if err == nil {
		err = s.folder.check()
	}
	if err != nil {
		s.lastOK.Set(0)
		s.writeErrors.Inc()
		return fmt.Errorf("writing the state snapshot to %s: %w", s.folder.path, err)
	}
	s.lastOK.Set(1)
	s.lastOKTime.Set(float64(now.UnixMilli()) / 1000)
	s.duration.Set(time.Since(start).Seconds())
	s.size.Set(float64(len(data)))
	return nil
}
