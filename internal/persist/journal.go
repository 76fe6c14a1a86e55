// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
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
// A replay reads one record at a time and applies it: its memory does not
// depend on the journal's length.
//
// A record counts as written only once it is synced in the folder
// --storage.path names at that moment: after each sync the writer
// compares the path (one stat a batch) with the folder it opened and
// locked at start, and refuses the batch (503) when they differ. All the
// journal's files are opened through that open folder, so a folder made
// anew at the path is never written to.

// journalQueue is how many accepted alerts may wait for the journal's
// writer; past it a request is answered 503 at once, for the sender to
// retry, instead of holding a connection.
const journalQueue = 4096

// failureLogInterval is the most often a failure of one reason is logged:
// while the disk is full every alert fails, and one line each would bury
// the log. The failures counter counts each one.
const failureLogInterval = time.Minute

// replayBuffer is the reader's buffer in a replay: records are read one at
// a time, a longer one grows a line buffer up to the record cap.
const replayBuffer = 64 << 10

const segmentPrefix = "journal-"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var (
	errQueueFull = errors.New("the journal's queue is full")
	// errSegmentGone: the open segment was deleted from the folder.
	errSegmentGone = errors.New("the journal's segment was removed from the state folder")
	errClosed      = errors.New("the journal is closed")
	// errRecordTooLarge: a replay would refuse the record, so it is not
	// written.
	errRecordTooLarge = errors.New("the alert's journal record is over the cap on one record")
)

// Journal is the write-ahead journal of accepted alerts in a Folder's
// folder.
type Journal struct {
	folder    *lockedDir
	logger    log.Logger
	failLog   *ratelog.Limiter
	maxRecord int

	mu      sync.RWMutex // started, closed, and sends on queue
	started bool
	closed  bool
	queue   chan *pending
	cuts    chan *cut
	quit    chan struct{}
	done    chan struct{}

	// Owned by Replay, then by the writer goroutine.
	seq     uint64   // last record written
	segment uint64   // number of the newest segment
	file    *os.File // the open segment; nil until the next write
	size    int64    // of the open segment, what is intact
	buf     []byte

	records  prometheus.Counter
	syncs    prometheus.Counter
	failures prometheus.Counter
	lastOK   prometheus.Gauge
	damaged  prometheus.Counter
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

// JournalOptions are what a journal needs besides its folder.
type JournalOptions struct {
	Registerer prometheus.Registerer
	Logger     log.Logger
	// Clock paces the log lines of repeated failures; nil is the real
	// clock.
	Clock clockwork.Clock
	// MaxRecordBytes caps one record (its line without the newline), in
	// writing and in replay: a longer line is damaged, so a replay never
	// holds more than this of one line. The exporter passes the largest
	// body the receiver may be configured to take: a record holds a few
	// fields of one body, and only a body built to grow when re-encoded
	// comes near it; such an alert is refused (503) rather than written
	// where no replay would read it.
	MaxRecordBytes int
}

// OpenJournal prepares the write-ahead journal in the store's folder and
// registers its metrics. Call Replay once, before the first Commit: it
// starts the writer.
func (s *Folder) OpenJournal(o JournalOptions) (*Journal, error) {
	if o.MaxRecordBytes < 1 {
		return nil, errors.New("journal: no cap on a record")
	}
	j := &Journal{
		folder:    s.folder,
		logger:    o.Logger,
		failLog:   ratelog.New(failureLogInterval, o.Clock),
		maxRecord: o.MaxRecordBytes,
		queue:     make(chan *pending, journalQueue),
		cuts:      make(chan *cut),
		quit:      make(chan struct{}),
		done:      make(chan struct{}),
		records: counter("breach_exporter_state_journal_records_total",
			"Accepted webhook alerts written to the journal and synced to disk before their 204."),
		syncs: counter("breach_exporter_state_journal_syncs_total",
			"Journal writes synced to disk; alerts that arrive during a sync share the next one."),
		failures: counter("breach_exporter_state_journal_failures_total",
			"Accepted webhook alerts answered 503 (for the sender to retry) because the journal could not make them durable: a failed write or sync, or a full queue."),
		lastOK: gauge("breach_exporter_state_journal_last_write_successful",
			"1 when the journal's last write and sync succeeded, else 0: accepted alerts are answered 503 until it works again."),
		damaged: counter("breach_exporter_state_journal_damaged_records_total",
			"Journal records found damaged at start (a write torn by a crash, or a changed file): not replayed."),
	}
	j.lastOK.Set(1)
	for _, c := range []prometheus.Collector{j.records, j.syncs, j.failures, j.lastOK, j.damaged} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	return j, nil
}

// Replay reads the journal and calls apply with each intact record after
// position (the snapshot's), in order, as it reads it: memory does not
// grow with the journal's length. A damaged record (torn, changed, out of
// order or over the cap) ends its segment's replay; it and the rest of the
// segment are counted in
// breach_exporter_state_journal_damaged_records_total. An empty segment
// (a crash between its creation and its first write) is removed. Replay
// then starts the writer and returns how many records it applied.
func (j *Journal) Replay(position uint64, apply func(watchlist.AcceptedAlert)) (int, error) {
	segments, err := listSegments(j.folder.root)
	if err != nil {
		return 0, err
	}
	j.seq = position
	r := bufio.NewReaderSize(nil, replayBuffer)
	var line []byte // reused: it grows only for a record longer than r's buffer
	applied := 0
	for _, n := range segments {
		name := segmentName(n)
		j.segment = n
		f, err := j.openSegmentToRead(name)
		if err != nil {
			return applied, err
		}
		if f == nil {
			continue
		}
		r.Reset(f)
		var count, bad int
		count, bad, line, err = j.replaySegment(r, line, j.seq, apply)
		f.Close()
		applied += count
		if err != nil {
			return applied, fmt.Errorf("reading %s: %w", filepath.Join(j.folder.path, name), err)
		}
		if bad > 0 {
			j.damaged.Add(float64(bad))
			level.Warn(j.logger).Log("msg", "Damaged journal records were not replayed: the write of alerts answered before them was intact, these were torn by a crash or changed since",
				"file", filepath.Join(j.folder.path, name), "damaged", bad)
		}
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		j.started = true
		go j.run()
	}
	return applied, nil
}

// openSegmentToRead opens a segment for its replay; nil when there is
// nothing to read: an empty segment (removed) or something else than a
// regular file (left alone, and said).
func (j *Journal) openSegmentToRead(name string) (*os.File, error) {
	// O_NONBLOCK: a FIFO in a segment's place cannot block the start.
	f, err := j.folder.root.OpenFile(name, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, err
	case !fi.Mode().IsRegular():
		f.Close()
		level.Warn(j.logger).Log("msg", "Not a journal segment: not a regular file; not replayed", "file", filepath.Join(j.folder.path, name))
		return nil, nil
	case fi.Size() == 0:
		f.Close()
		return nil, j.folder.root.Remove(name)
	}
	return f, nil
}

// replaySegment applies the intact records after position (the snapshot's
// or the previous segment's last) that r holds and returns how many it
// applied, and how many lines from the first damaged one on it did not
// read. line is a buffer to reuse, returned.
func (j *Journal) replaySegment(r *bufio.Reader, line []byte, position uint64, apply func(watchlist.AcceptedAlert)) (applied, damaged int, _ []byte, _ error) {
	for {
		var complete bool
		var err error
		line, complete, err = readLine(r, line, j.maxRecord)
		if err == io.EOF && len(line) == 0 && complete {
			return applied, 0, line, nil
		}
		if err != nil && err != io.EOF {
			return applied, 0, line, err
		}
		var rec watchlist.AcceptedAlert
		var seq uint64
		if complete {
			rec, seq, err = decodeRecord(line, true)
		}
		if !complete || err != nil || seq <= j.seq && seq > position {
			rest, err := countLines(r)
			return applied, 1 + rest, line, err
		}
		if seq <= position {
			continue // in the snapshot already
		}
		apply(rec)
		applied++
		j.seq = seq
	}
}

// readLine reads the next line of r into buf, without its newline.
// complete is false for a last line with no newline (a torn write) and for
// a line longer than max, which is read to its end and not kept. At the
// end of r it returns io.EOF with an empty, complete line.
func readLine(r *bufio.Reader, buf []byte, max int) (line []byte, complete bool, err error) {
	buf = buf[:0]
	over := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !over && len(buf)+len(chunk) > max+1 { // +1: the newline
			over, buf = true, buf[:0]
		}
		if !over {
			buf = append(buf, chunk...)
		}
		switch err {
		case nil:
			if over {
				return buf, false, nil
			}
			return buf[:len(buf)-1], true, nil
		case bufio.ErrBufferFull:
			continue
		case io.EOF:
			if len(buf) == 0 && !over {
				return buf, true, io.EOF
			}
			return buf, false, nil
		default:
			return buf, false, err
		}
	}
}

// countLines reads r to its end and returns how many lines it holds.
func countLines(r *bufio.Reader) (int, error) {
	n := 0
	for {
		chunk, err := r.ReadSlice('\n')
		switch err {
		case nil:
			n++
		case bufio.ErrBufferFull:
		case io.EOF:
			if len(chunk) > 0 {
				n++
			}
			return n, nil
		default:
			return n, err
		}
	}
}

func segmentName(n uint64) string { return fmt.Sprintf("%s%016x", segmentPrefix, n) }

// listSegments returns the segment numbers in the folder, oldest first.
func listSegments(root *os.Root) ([]uint64, error) {
	entries, err := fs.ReadDir(root.FS(), ".")
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

// recordV1 is a journal record's JSON. The values are the accepted
// alert's as the receiver had them; the watchlist bounds them again when
// they are replayed.
type recordV1 struct {
	Seq           uint64    `json:"seq"`
	Digest        string    `json:"digest"`
	At            time.Time `json:"at"`
	Account       string    `json:"account,omitempty"` // whose secret verified it; absent: breach.DefaultAccount
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
		Seq: seq, Digest: hex.EncodeToString(a.Digest[:]), At: a.At.UTC(), Account: a.Account, Address: a.Address,
		Source: a.Delta.Source, Severity: a.Delta.Severity, NewDatabases: a.Delta.NewDatabases,
		ExposedFields: a.Delta.ExposedFields, NewPlaintext: a.Delta.NewPlaintext, ObservedAt: a.Delta.ObservedAt,
	})
	buf = fmt.Appendf(buf, "%08x ", crc32.Checksum(body, crcTable))
	buf = append(buf, body...)
	return append(buf, '\n')
}

func decodeRecord(line []byte, strict bool) (watchlist.AcceptedAlert, uint64, error) {
	sum, body, ok := bytes.Cut(line, []byte(" "))
	want, err := strconv.ParseUint(string(sum), 16, 32)
	if !ok || len(sum) != 8 || err != nil || crc32.Checksum(body, crcTable) != uint32(want) {
		return watchlist.AcceptedAlert{}, 0, errors.New("checksum")
	}
	var r recordV1
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(&r); err != nil {
		return watchlist.AcceptedAlert{}, 0, err
	}
	a := watchlist.AcceptedAlert{At: r.At, Account: r.Account, Address: r.Address, Delta: watchlist.AlertDelta{
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

// EncodeAlert and DecodeAlert are a journal record's form of one accepted
// alert, which replicas also pass to each other through the store: one
// form, checked the same way wherever it is read.
func EncodeAlert(a watchlist.AcceptedAlert) []byte {
	return appendRecord(nil, 1, a)
}

// DecodeAlert reads what EncodeAlert wrote, in this release or the next:
// from the store, members this version does not know are ignored.
func DecodeAlert(data []byte) (watchlist.AcceptedAlert, error) {
	a, _, err := decodeRecord(bytes.TrimSuffix(data, []byte("\n")), false)
	return a, err
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

// Drop removes the segments a snapshot at m holds whole: the journal
// holds what arrived since the last snapshot, no more.
func (j *Journal) Drop(m Mark) error {
	segments, err := listSegments(j.folder.root)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range segments {
		if n <= m.segment {
			if err := j.folder.root.Remove(segmentName(n)); err != nil {
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
	started := j.started
	j.mu.Unlock()
	if !started {
		return nil
	}
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
	kept := batch[:0]
	for _, p := range batch {
		start := len(j.buf)
		j.buf = appendRecord(j.buf, j.seq+uint64(len(kept))+1, p.a)
		if len(j.buf)-start-1 > j.maxRecord {
			j.buf = j.buf[:start]
			j.refuse([]*pending{p}, errRecordTooLarge)
			continue
		}
		kept = append(kept, p)
	}
	if len(kept) == 0 {
		return
	}
	if err := j.write(j.buf); err != nil {
		// A write that fails in a folder moved away (creating a segment in
		// a removed folder fails) failed for the move: say that.
		if cerr := j.folder.check(); cerr != nil {
			err = cerr
		}
		j.refuse(kept, err)
		return
	}
	j.seq += uint64(len(kept))
	j.records.Add(float64(len(kept)))
	j.syncs.Inc()
	j.lastOK.Set(1)
	for _, p := range kept {
		p.apply()
		p.done <- nil
	}
}

// refuse answers batch with err: counted, and logged at a bounded rate.
func (j *Journal) refuse(batch []*pending, err error) {
	j.failures.Add(float64(len(batch)))
	j.lastOK.Set(0)
	msg := "Journal write failed; accepted alerts are answered 503 until it works"
	switch {
	case errors.Is(err, errFolderMoved):
		msg = "The state folder is not the one the exporter locked at start; accepted alerts are answered 503 until --storage.path names it again or the exporter restarts"
	case errors.Is(err, errRecordTooLarge):
		msg = "An accepted alert's journal record is over the cap on one record; answered 503"
	}
	if suppressed, ok := j.failLog.Allow(failureReason(err)); ok {
		level.Error(j.logger).Log("msg", msg, "dir", j.folder.path, "alerts", len(batch), "err", err, ratelog.SuppressedKey, suppressed)
	}
	for _, p := range batch {
		p.done <- fmt.Errorf("journal: %w", err)
	}
}

// failureReason is what a failure's log lines are paced by: the errno
// (ENOSPC, EIO...) when the system gave one, else the journal's own
// reason.
func failureReason(err error) string {
	var errno unix.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	for _, e := range []error{errFolderMoved, errSegmentGone, errRecordTooLarge} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	return "other"
}

// write appends data to the open segment (a new one if none is open) and
// syncs it. It succeeds only if the segment is then in the folder the path
// names: a record in a folder moved away, or in a segment removed, would
// be lost to the next start. On failure the segment is cut back to what
// was intact; a segment left empty is removed.
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
	if err == nil {
		err = j.folder.check()
	}
	if err == nil && unlinked(j.file) {
		j.file.Close()
		j.file = nil
		return errSegmentGone
	}
	if err == nil {
		j.size += int64(len(data))
		return nil
	}
	switch {
	case j.size == 0:
		// Nothing of it was ever answered: no empty file stays behind.
		j.file.Close()
		_ = j.folder.root.Remove(segmentName(j.segment)) // best effort: Replay removes an empty segment left behind
		j.file = nil
	case j.file.Truncate(j.size) != nil:
		// What is on disk is unknown: the next write starts a new segment.
		j.file.Close()
		j.file = nil
	default:
		if _, serr := j.file.Seek(j.size, io.SeekStart); serr != nil {
			j.file.Close()
			j.file = nil
		}
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
	name := segmentName(j.segment + 1)
	f, err := j.folder.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := j.folder.syncDir(); err != nil {
		f.Close()
		_ = j.folder.root.Remove(name) // best effort: the error returned is the sync's
		return err
	}
	j.segment++
	j.file, j.size = f, 0
	return nil
}
