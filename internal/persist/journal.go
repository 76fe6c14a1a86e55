package persist

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The write-ahead journal makes an accepted webhook alert durable before
// the receiver answers 204: the snapshot is written at most every interval,
// and a SIGKILL in between must neither lose an alert's counts nor forget
// its body, or the sender's replay would be counted (and page) again.
//
// One writer goroutine appends records and fsyncs; requests that queue
// while an fsync runs share the next one (group commit). Each record is a
// line: the CRC-32C of its JSON, a space, the JSON. Records carry a
// sequence number; a snapshot records the last one it holds, so a replay
// skips what the snapshot already counts. Each snapshot starts a new
// segment file (journal-<n>) and, once written, removes the older ones.
// A torn tail (a crash in mid-write) ends the replay of its segment: the
// intact records before it are replayed, the rest counted as damaged.

// journalQueue is how many accepted alerts may wait for the journal's
// writer; past it a request is answered 503 at once, for the sender to
// retry, instead of holding a connection.
const journalQueue = 4096

const segmentPrefix = "journal-"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var (
	errQueueFull = errors.New("the journal's queue is full")
	// errSegmentGone: the folder was removed or replaced under the open
	// segment.
	errSegmentGone = errors.New("the journal's segment is no longer in the storage folder")
	errClosed      = errors.New("the journal is closed")
)

// Journal is the write-ahead journal of accepted alerts in a folder.
type Journal struct {
	dir    string
	logger log.Logger

	mu     sync.RWMutex // closed, and sends on queue
	closed bool
	queue  chan *pending
	cuts   chan *cut
	quit   chan struct{}
	done   chan struct{}

	// Owned by the writer goroutine.
	seq     uint64   // last record written
	segment uint64   // number of the newest segment
	file    *os.File // the open segment; nil until the next write
	size    int64    // of the open segment, what is intact
	buf     []byte

	records  prometheus.Counter
	syncs    prometheus.Counter
	failures prometheus.Counter
	lastOK   prometheus.Gauge
}

type pending struct {
	a     watchlist.AcceptedAlert
	apply func()
	done  chan error
}

type cut struct {
	take func()
	mark chan Mark
}

// Mark is the point of the journal a snapshot holds.
type Mark struct {
	// Position is the last record the snapshot holds.
	Position uint64
	segment  uint64 // the last segment it holds whole
}

// OpenJournal reads the journal in dir: it returns the intact records
// after position (the snapshot's), in order, and starts the writer. A
// damaged record ends its segment's replay; it and the rest of the segment
// are counted in breach_exporter_state_journal_damaged_records_total.
func OpenJournal(dir string, position uint64, reg prometheus.Registerer, logger log.Logger) (*Journal, []watchlist.AcceptedAlert, error) {
	j := &Journal{
		dir:    dir,
		logger: logger,
		queue:  make(chan *pending, journalQueue),
		cuts:   make(chan *cut),
		quit:   make(chan struct{}),
		done:   make(chan struct{}),
		seq:    position,
		records: counter("breach_exporter_state_journal_records_total",
			"Accepted webhook alerts written to the journal and synced to disk before their 204."),
		syncs: counter("breach_exporter_state_journal_syncs_total",
			"Journal writes synced to disk; alerts that arrive during a sync share the next one."),
		failures: counter("breach_exporter_state_journal_failures_total",
			"Accepted webhook alerts answered 503 (for the sender to retry) because the journal could not make them durable: a failed write or sync, or a full queue."),
		lastOK: gauge("breach_exporter_state_journal_last_write_successful",
			"1 when the journal's last write and sync succeeded, else 0: accepted alerts are answered 503 until it works again."),
	}
	damaged := counter("breach_exporter_state_journal_damaged_records_total",
		"Journal records found damaged at start (a write torn by a crash, or a changed file): not replayed.")
	j.lastOK.Set(1)
	for _, c := range []prometheus.Collector{j.records, j.syncs, j.failures, j.lastOK, damaged} {
		if err := reg.Register(c); err != nil {
			return nil, nil, err
		}
	}
	segments, err := listSegments(dir)
	if err != nil {
		return nil, nil, err
	}
	var replay []watchlist.AcceptedAlert
	for _, n := range segments {
		data, err := os.ReadFile(segmentPath(dir, n))
		if err != nil {
			return nil, nil, err
		}
		as, last, bad := readSegment(data, j.seq)
		replay = append(replay, as...)
		j.seq = max(j.seq, last)
		if bad > 0 {
			damaged.Add(float64(bad))
			level.Warn(logger).Log("msg", "Damaged journal records were not replayed: the write of alerts answered before them was intact, these were torn by a crash or changed since",
				"file", segmentPath(dir, n), "damaged", bad)
		}
		j.segment = n
	}
	go j.run()
	return j, replay, nil
}

func segmentPath(dir string, n uint64) string {
	return filepath.Join(dir, fmt.Sprintf("%s%016x", segmentPrefix, n))
}

// listSegments returns the segment numbers in dir, oldest first.
func listSegments(dir string) ([]uint64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range entries {
		hexNum, ok := strings.CutPrefix(e.Name(), segmentPrefix)
		if !ok || len(hexNum) != 16 {
			continue
		}
		if n, err := strconv.ParseUint(hexNum, 16, 64); err == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// readSegment returns the intact records after position, the last intact
// sequence number, and how many lines from the first damaged one on were
// not read.
func readSegment(data []byte, position uint64) (out []watchlist.AcceptedAlert, last uint64, damaged int) {
	last = position
	for len(data) > 0 {
		line, rest, complete := bytes.Cut(data, []byte("\n"))
		rec, seq, err := decodeRecord(line)
		if !complete || err != nil || seq <= last && seq > position {
			return out, last, 1 + bytes.Count(rest, []byte("\n"))
		}
		data = rest
		if seq <= position {
			continue // in the snapshot already
		}
		out, last = append(out, rec), seq
	}
	return out, last, 0
}

// recordV1 is a journal record's JSON. The values are the accepted
// alert's as the receiver had them; the watchlist bounds them again when
// they are replayed.
type recordV1 struct {
	Seq           uint64    `json:"seq"`
	Digest        string    `json:"digest"`
	At            time.Time `json:"at"`
	Address       string    `json:"address"`
	Source        string    `json:"source"`
	Severity      string    `json:"severity"`
	NewDatabases  int       `json:"new_databases,omitempty"`
	ExposedFields []string  `json:"exposed_fields,omitempty"`
	NewPlaintext  bool      `json:"new_plaintext,omitempty"`
	ObservedAt    time.Time `json:"observed_at"`
}

func appendRecord(buf []byte, seq uint64, a watchlist.AcceptedAlert) []byte {
	body, _ := json.Marshal(recordV1{ // the types cannot fail to encode
		Seq: seq, Digest: hex.EncodeToString(a.Digest[:]), At: a.At.UTC(), Address: a.Address,
		Source: a.Delta.Source, Severity: a.Delta.Severity, NewDatabases: a.Delta.NewDatabases,
		ExposedFields: a.Delta.ExposedFields, NewPlaintext: a.Delta.NewPlaintext, ObservedAt: a.Delta.ObservedAt,
	})
	buf = fmt.Appendf(buf, "%08x ", crc32.Checksum(body, crcTable))
	buf = append(buf, body...)
	return append(buf, '\n')
}

func decodeRecord(line []byte) (watchlist.AcceptedAlert, uint64, error) {
	sum, body, ok := bytes.Cut(line, []byte(" "))
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if !ok || len(sum) != 8 || err != nil || crc32.Checksum(body, crcTable) != uint32(want) {
		return watchlist.AcceptedAlert{}, 0, errors.New("checksum")
	}
	var r recordV1
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return watchlist.AcceptedAlert{}, 0, err
	}
	a := watchlist.AcceptedAlert{At: r.At, Address: r.Address, Delta: watchlist.AlertDelta{
		Source: r.Source, Severity: r.Severity, NewDatabases: r.NewDatabases,
		ExposedFields: r.ExposedFields, NewPlaintext: r.NewPlaintext, ObservedAt: r.ObservedAt,
	}}
	if n, err := hex.Decode(a.Digest[:], []byte(r.Digest)); err != nil || n != len(a.Digest) || len(r.Digest) != 2*len(a.Digest) {
		return watchlist.AcceptedAlert{}, 0, errors.New("digest")
	}
	// The live path takes only valid addresses, sources and severities,
	// and no negative count.
	if r.Seq == 0 || !breach.ValidEmail(r.Address) || r.Source == "" || r.Severity == "" || r.NewDatabases < 0 {
		return watchlist.AcceptedAlert{}, 0, errors.New("not a record the receiver writes")
	}
	return a, r.Seq, nil
}

// Commit writes a to the journal, syncs it, and calls apply: in the
// writer goroutine, in the journal's order, so that Cut sees every record
// it counts applied. It returns once all of that happened, or with the
// reason it did not (then apply was not called).
func (j *Journal) Commit(a watchlist.AcceptedAlert, apply func()) error {
	p := &pending{a: a, apply: apply, done: make(chan error, 1)}
	j.mu.RLock()
	if j.closed {
		j.mu.RUnlock()
		return errClosed
	}
	select {
	case j.queue <- p:
	default:
		j.mu.RUnlock()
		j.failures.Inc()
		return errQueueFull
	}
	j.mu.RUnlock()
	return <-p.done
}

// Cut calls take between two writes, when every record written is
// applied, and returns the mark of the state take saw. The next write
// starts a new segment, so that the older ones can go once a snapshot of
// that state is written (Drop).
func (j *Journal) Cut(take func()) Mark {
	c := &cut{take: take, mark: make(chan Mark, 1)}
	j.cuts <- c
	return <-c.mark
}

// Drop removes the segments a snapshot at m holds whole.
func (j *Journal) Drop(m Mark) error {
	segments, err := listSegments(j.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range segments {
		if n <= m.segment {
			if err := os.Remove(segmentPath(j.dir, n)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Close writes what is queued, stops the writer and closes the segment.
// Commit fails from now on.
func (j *Journal) Close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.quit)
	<-j.done
	if j.file != nil {
		return j.file.Close()
	}
	return nil
}

func (j *Journal) run() {
	defer close(j.done)
	batch := make([]*pending, 0, journalQueue)
	for {
		select {
		case p := <-j.queue:
			j.commit(j.drain(append(batch[:0], p)))
		case c := <-j.cuts:
			c.take()
			if j.file != nil {
				j.file.Close()
				j.file = nil
			}
			c.mark <- Mark{Position: j.seq, segment: j.segment}
		case <-j.quit:
			// Commit enqueues under the read lock Close took before quit:
			// what is queued now is all there will be.
			for batch = j.drain(batch[:0]); len(batch) > 0; batch = j.drain(batch[:0]) {
				j.commit(batch)
			}
			return
		}
	}
}

// drain adds what is queued to batch without waiting: the alerts that
// arrived during the last sync share the next one.
func (j *Journal) drain(batch []*pending) []*pending {
	for len(batch) < cap(batch) {
		select {
		case p := <-j.queue:
			batch = append(batch, p)
		default:
			return batch
		}
	}
	return batch
}

// commit writes and syncs batch, then applies it; on failure it cuts the
// segment back to what was intact, so no garbage precedes the next write,
// and answers every request with the error.
func (j *Journal) commit(batch []*pending) {
	j.buf = j.buf[:0]
	for i, p := range batch {
		j.buf = appendRecord(j.buf, j.seq+uint64(i)+1, p.a)
	}
	err := j.write(j.buf)
	if err != nil {
		j.failures.Add(float64(len(batch)))
		j.lastOK.Set(0)
		level.Error(j.logger).Log("msg", "Journal write failed; accepted alerts are answered 503 until it works", "dir", j.dir, "alerts", len(batch), "err", err)
		for _, p := range batch {
			p.done <- fmt.Errorf("journal: %w", err)
		}
		return
	}
	j.seq += uint64(len(batch))
	j.records.Add(float64(len(batch)))
	j.syncs.Inc()
	j.lastOK.Set(1)
	for _, p := range batch {
		p.apply()
		p.done <- nil
	}
}

func (j *Journal) write(data []byte) error {
	if j.file == nil {
		if err := j.openSegment(); err != nil {
			return err
		}
	}
	_, err := j.file.Write(data)
	if err == nil {
		err = j.file.Sync()
	}
	if err == nil && unlinked(j.file) {
		// The folder was removed or replaced, or the segment deleted: the
		// write and the sync succeeded on a file no start will read. The
		// batch is refused; the next write opens a segment in the folder,
		// once there is one again.
		j.file.Close()
		j.file = nil
		return errSegmentGone
	}
	if err == nil {
		j.size += int64(len(data))
		return nil
	}
	if j.file.Truncate(j.size) != nil {
		// What is on disk is unknown: the next write starts a new segment.
		j.file.Close()
		j.file = nil
	} else if _, serr := j.file.Seek(j.size, 0); serr != nil {
		j.file.Close()
		j.file = nil
	}
	return err
}

// unlinked reports whether f's file is no longer in any folder.
func unlinked(f *os.File) bool {
	var st unix.Stat_t
	return unix.Fstat(int(f.Fd()), &st) == nil && st.Nlink == 0
}

// openSegment creates the next segment and syncs the folder, so that the
// file itself survives a power loss, not only its content.
func (j *Journal) openSegment() error {
	f, err := os.OpenFile(segmentPath(j.dir, j.segment+1), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := syncDir(j.dir); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	j.segment++
	j.file, j.size = f, 0
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
