// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"golang.org/x/sys/unix"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

func acceptedAlert(i int) watchlist.AcceptedAlert {
	return watchlist.AcceptedAlert{
		Digest:  sha256.Sum256(fmt.Appendf(nil, "body %d", i)),
		At:      at,
		Address: fmt.Sprintf("user%d@example.com", i),
		Delta: watchlist.AlertDelta{Source: "combolist", Severity: "critical", NewDatabases: 1,
			ExposedFields: []string{"password"}, NewPlaintext: i%2 == 0, ObservedAt: at.Add(-time.Minute)},
	}
}

// testJournal is a journal in a locked folder, with what it replayed.
type testJournal struct {
	*Journal
	store  *Folder
	replay []watchlist.AcceptedAlert
	reg    *prometheus.Registry
}

// close closes the journal, then releases the folder; twice is fine.
func (j *testJournal) close() {
	j.Journal.Close()
	j.store.Close()
}

func openJournal(t *testing.T, dir string, position uint64) *testJournal {
	t.Helper()
	return openJournalWith(t, dir, position, JournalOptions{Logger: log.NewNopLogger(), MaxRecordBytes: testMaxRecord})
}

// testMaxRecord is the cap on one record in these tests: room for a
// record, not for much more.
const testMaxRecord = 4 << 10

func openJournalWith(t *testing.T, dir string, position uint64, o JournalOptions) *testJournal {
	t.Helper()
	tj := &testJournal{reg: prometheus.NewRegistry()}
	var err error
	if tj.store, err = Open(dir, tj.reg, log.NewNopLogger()); err != nil {
		t.Fatal(err)
	}
	o.Registerer = tj.reg
	if tj.Journal, err = tj.store.OpenJournal(o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tj.close)
	if _, err := tj.Replay(position, func(a watchlist.AcceptedAlert) { tj.replay = append(tj.replay, a) }); err != nil {
		t.Fatal(err)
	}
	return tj
}

// commitAll commits alerts first..last-1 concurrently and returns the
// order the journal applied them in.
func commitAll(t *testing.T, j *testJournal, first, last int) []int {
	t.Helper()
	var mu sync.Mutex
	var applied []int
	var wg sync.WaitGroup
	for i := first; i < last; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.Commit(acceptedAlert(i), func() { mu.Lock(); applied = append(applied, i); mu.Unlock() }); err != nil {
				t.Errorf("commit %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	return applied
}

// What was committed is replayed after a restart, in the order applied,
// equal to what went in; concurrent commits share syncs.
func TestJournalReplaysWhatWasCommitted(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir, 0)
	if len(j.replay) != 0 {
		t.Fatalf("an empty folder replayed %d", len(j.replay))
	}
	order := commitAll(t, j, 0, 200)
	if testutil.ToFloat64(j.records) != 200 || testutil.ToFloat64(j.syncs) > 200 || testutil.ToFloat64(j.lastOK) != 1 {
		t.Errorf("records %v, syncs %v, last ok %v", testutil.ToFloat64(j.records), testutil.ToFloat64(j.syncs), testutil.ToFloat64(j.lastOK))
	}
	t.Logf("200 concurrent commits took %v syncs", testutil.ToFloat64(j.syncs))
	j.close()
	if err := j.Commit(acceptedAlert(0), func() { t.Error("applied after Close") }); err == nil {
		t.Error("a commit after Close succeeded")
	}

	replay := openJournal(t, dir, 0).replay
	if len(replay) != len(order) {
		t.Fatalf("replayed %d of %d", len(replay), len(order))
	}
	for i, n := range order {
		if want := acceptedAlert(n); !reflect.DeepEqual(replay[i], want) {
			t.Fatalf("record %d:\n got %+v\nwant %+v", i, replay[i], want)
		}
	}
}

// A snapshot holds the journal up to its mark: a replay after it skips
// those records, and Drop removes the segments it holds whole.
func TestJournalCutAndDrop(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir, 0)
	commitAll(t, j, 0, 10)
	tookState := false
	mark := j.Cut(func() { tookState = true })
	if !tookState || mark.Position != 10 {
		t.Fatalf("cut: took state %v, position %d", tookState, mark.Position)
	}
	commitAll(t, j, 10, 15)
	if err := j.Drop(mark); err != nil {
		t.Fatal(err)
	}
	if segments := segmentsIn(t, dir); len(segments) != 1 {
		t.Errorf("after Drop: segments %v, want the one written since the cut", segments)
	}
	j.close()
	// A crash between the snapshot and Drop: the replay skips what the
	// snapshot holds, in any segment.
	j2 := openJournal(t, dir, 12)
	if len(j2.replay) != 3 || j2.replay[0].Address == acceptedAlert(0).Address {
		t.Fatalf("replay after position 12: %d records", len(j2.replay))
	}
	// The next record follows the last one.
	commitAll(t, j2, 15, 16)
	if m := j2.Cut(func() {}); m.Position != 16 {
		t.Errorf("position after one more commit: %d, want 16", m.Position)
	}
}

// segmentsIn lists the journal's segments in dir.
func segmentsIn(t *testing.T, dir string) []uint64 {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	segments, err := listSegments(root)
	if err != nil {
		t.Fatal(err)
	}
	return segments
}

// A crash in mid-write leaves a torn record: the replay takes the intact
// records before it and counts the rest as damaged, whatever byte the
// write stopped at; new records go to a new segment.
func TestJournalTornTail(t *testing.T) {
	dir := t.TempDir()
	j := openJournal(t, dir, 0)
	commitAll(t, j, 0, 1)
	commitAll(t, j, 1, 2)
	commitAll(t, j, 2, 3)
	j.close()
	path := filepath.Join(dir, segmentName(segmentsIn(t, dir)[0]))
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	firstLen := len(appendRecord(nil, 1, acceptedAlert(0)))
	for n := firstLen; n < len(whole); n++ {
		if testing.Short() && n%16 != 0 && whole[n-1] != '\n' && whole[n] != '\n' {
			continue // the edit loop cuts at each record's end and every 16th byte; the full run at every byte
		}
		if err := os.WriteFile(path, whole[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		jn := openJournal(t, dir, 0)
		got := gatherValue(t, jn.reg, "breach_exporter_state_journal_damaged_records_total")
		intact := bytes.Count(whole[:n], []byte("\n"))
		if want := float64(min(1, n-bytes.LastIndexByte(whole[:n], '\n')-1)); len(jn.replay) != intact || got != want {
			t.Fatalf("cut at %d of %d bytes: %d replayed, %v damaged", n, len(whole), intact, got)
		}
		jn.close()
	}
	// A changed byte is caught by the checksum.
	damaged := append([]byte(nil), whole...)
	damaged[firstLen+20] ^= 1
	os.WriteFile(path, damaged, 0o600)
	j = openJournal(t, dir, 0)
	if len(j.replay) != 1 || gatherValue(t, j.reg, "breach_exporter_state_journal_damaged_records_total") != 2 {
		t.Fatalf("a changed byte in the second record: %d replayed", len(j.replay))
	}
	commitAll(t, j, 3, 4)
	if segs := segmentsIn(t, dir); len(segs) != 2 {
		t.Errorf("segments after a damaged one: %v, want a new one", segs)
	}
}

// A line over the cap on one record is damaged: the replay never holds
// more than the cap of one line, stops its segment there and counts it
// with the lines after it; the writer refuses a record it would not read.
func TestJournalRecordCap(t *testing.T) {
	dir := t.TempDir()
	var seg []byte
	seg = appendRecord(seg, 1, acceptedAlert(1))
	seg = append(seg, bytes.Repeat([]byte("x"), 3*testMaxRecord)...)
	seg = append(seg, '\n')
	seg = appendRecord(seg, 2, acceptedAlert(2))
	seg = append(seg, "torn"...)
	if err := os.WriteFile(filepath.Join(dir, segmentName(1)), seg, 0o600); err != nil {
		t.Fatal(err)
	}
	j := openJournal(t, dir, 0)
	if len(j.replay) != 1 || gatherValue(t, j.reg, "breach_exporter_state_journal_damaged_records_total") != 3 {
		t.Fatalf("replayed %d, damaged %v; want 1 and 3 (the long line, the record after it, the torn tail)",
			len(j.replay), gatherValue(t, j.reg, "breach_exporter_state_journal_damaged_records_total"))
	}
	big := acceptedAlert(3)
	big.Delta.ExposedFields = []string{strings.Repeat("f", testMaxRecord)}
	if err := j.Commit(big, func() { t.Error("a record over the cap was applied") }); !errors.Is(err, errRecordTooLarge) {
		t.Fatalf("a record over the cap: %v", err)
	}
	if testutil.ToFloat64(j.failures) != 1 {
		t.Errorf("failures %v, want 1", testutil.ToFloat64(j.failures))
	}
	commitAll(t, j, 4, 5)
}

// Replay streams: the memory it holds while applying the last record does
// not grow with the number of records before it.
func TestJournalReplayMemoryIsBounded(t *testing.T) {
	const small, large = 1_000, 10_000
	growthSmall := replayHeapGrowth(t, small)
	growthLarge := replayHeapGrowth(t, large)
	t.Logf("live heap growth at the last record: %d records %d KiB, %d records %d KiB", small, growthSmall>>10, large, growthLarge>>10)
	// A slice of the records would hold more than 200 bytes each: 1.8 MB
	// more for the larger journal. The slack is for the runtime's noise.
	if growthLarge > growthSmall+256<<10 {
		t.Errorf("the live heap at the end of a replay grows with the journal: %d records %d bytes, %d records %d bytes",
			small, growthSmall, large, growthLarge)
	}
}

// replayHeapGrowth writes a journal of n records in two segments and
// returns how much larger the live heap is while the replay applies the
// last one than before it started.
func replayHeapGrowth(t *testing.T, n int) int64 {
	t.Helper()
	dir := t.TempDir()
	writeSegments(t, dir, n)
	store, err := Open(dir, prometheus.NewRegistry(), log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	j, err := store.OpenJournal(JournalOptions{Registerer: prometheus.NewRegistry(), Logger: log.NewNopLogger(), MaxRecordBytes: testMaxRecord})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	before := liveHeap()
	var growth int64
	seen := 0
	applied, err := j.Replay(0, func(watchlist.AcceptedAlert) {
		if seen++; seen == n {
			growth = liveHeap() - before
		}
	})
	if err != nil || applied != n {
		t.Fatalf("replayed %d of %d: %v", applied, n, err)
	}
	return growth
}

// writeSegments writes n records into two segments of dir, as a journal
// that was cut once would hold them.
func writeSegments(t testing.TB, dir string, n int) {
	t.Helper()
	for s, span := range [][2]int{{0, n / 2}, {n / 2, n}} {
		var buf []byte
		for i := span[0]; i < span[1]; i++ {
			buf = appendRecord(buf, uint64(i+1), acceptedAlert(i))
		}
		if err := os.WriteFile(filepath.Join(dir, segmentName(uint64(s+1))), buf, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// liveHeap is the heap that a collection leaves.
func liveHeap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// BenchmarkJournalReplay replays a journal of 250,000 records (the goal:
// well under 5 s and 150 MB for the exporter's start).
func BenchmarkJournalReplay(b *testing.B) {
	const n = 250_000
	dir := b.TempDir()
	writeSegments(b, dir, n)
	b.ResetTimer()
	for b.Loop() {
		store, err := Open(dir, prometheus.NewRegistry(), log.NewNopLogger())
		if err != nil {
			b.Fatal(err)
		}
		j, err := store.OpenJournal(JournalOptions{Registerer: prometheus.NewRegistry(), Logger: log.NewNopLogger(), MaxRecordBytes: testMaxRecord})
		if err != nil {
			b.Fatal(err)
		}
		if applied, err := j.Replay(0, func(watchlist.AcceptedAlert) {}); err != nil || applied != n {
			b.Fatalf("replayed %d of %d: %v", applied, n, err)
		}
		j.Close()
		store.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/record")
}

// An empty segment (a crash between its creation and its first write)
// is removed at start; the numbering goes on after it.
func TestJournalEmptySegmentRemoved(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, segmentName(7)), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	j := openJournal(t, dir, 0)
	if segs := segmentsIn(t, dir); len(segs) != 0 {
		t.Fatalf("segments after the start: %v, want none", segs)
	}
	commitAll(t, j, 0, 1)
	if segs := segmentsIn(t, dir); !reflect.DeepEqual(segs, []uint64{8}) {
		t.Errorf("segments %v, want [8]", segs)
	}
}

// A folder removed under the journal, an unmounted volume, fails every
// commit, for root too: applied none, counted. A folder made anew at the
// path is another folder: the journal never writes into it (no lock of
// ours holds it; another exporter may own it), and a second store can
// take it.
func TestJournalRemovedAndRecreatedFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	j := openJournal(t, dir, 0)
	if err := j.Commit(acceptedAlert(0), func() {}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(acceptedAlert(1), func() { t.Error("an alert written to a removed folder was applied") }); err == nil {
		t.Fatal("a commit into the removed folder's open segment succeeded")
	}
	if testutil.ToFloat64(j.failures) != 1 || testutil.ToFloat64(j.lastOK) != 0 {
		t.Errorf("failures %v, last ok %v", testutil.ToFloat64(j.failures), testutil.ToFloat64(j.lastOK))
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// After a cut, the next write opens a new segment: not in the new folder.
	j.Cut(func() {})
	if err := j.Commit(acceptedAlert(2), func() { t.Error("applied") }); !errors.Is(err, errFolderMoved) {
		t.Fatalf("a commit after the folder was made anew: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the old owner wrote into the new folder: %v", entries)
	}
	second := openJournal(t, dir, 0)
	commitAll(t, second, 3, 4)
	if err := j.Commit(acceptedAlert(5), func() { t.Error("applied") }); !errors.Is(err, errFolderMoved) {
		t.Fatalf("the first owner, once the second writes: %v", err)
	}
	second.close()
	if replay := openJournal(t, dir, 0).replay; len(replay) != 1 || replay[0].Address != acceptedAlert(3).Address {
		t.Errorf("the new folder replays %d records, want only the second owner's", len(replay))
	}
}

// A folder moved away, or the path replaced by a symlink to another
// folder: the journal refuses, and leaves nothing of the refused record
// in the moved folder. The path naming the folder again (a symlink to it
// is fine) resumes the writes.
func TestJournalMovedFolder(t *testing.T) {
	base := t.TempDir()
	dir, moved, other := filepath.Join(base, "data"), filepath.Join(base, "data.old"), filepath.Join(base, "other")
	j := openJournal(t, dir, 0)
	commitAll(t, j, 0, 1)
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(acceptedAlert(1), func() { t.Error("applied") }); !errors.Is(err, errFolderMoved) {
		t.Fatalf("a commit after the folder moved: %v", err)
	}
	// The path replaced by a symlink to another folder.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(other, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, dir); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(acceptedAlert(2), func() { t.Error("applied") }); !errors.Is(err, errFolderMoved) {
		t.Fatalf("a commit after the path became a symlink to another folder: %v", err)
	}
	if testutil.ToFloat64(j.failures) != 2 {
		t.Errorf("failures %v, want 2", testutil.ToFloat64(j.failures))
	}
	// A symlink to the folder itself: the path names it again.
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(moved, dir); err != nil {
		t.Fatal(err)
	}
	commitAll(t, j, 3, 4)
	j.close()
	replay := openJournal(t, moved, 0).replay
	if len(replay) != 2 || replay[0].Address != acceptedAlert(0).Address || replay[1].Address != acceptedAlert(3).Address {
		t.Errorf("the folder replays %d records, want the two accepted", len(replay))
	}
}

// A full disk: each commit fails, the log says so once per interval with
// the count of the lines it left out, and no empty segment stays behind;
// room again, and the writes resume. A real full disk: a 1 MiB tmpfs,
// which needs root (skipped otherwise).
func TestJournalFullDisk(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small tmpfs (root only): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	clock := clockwork.NewFakeClock()
	var logged testkit.SyncBuffer
	j := openJournalWith(t, dir, 0, JournalOptions{Logger: log.NewLogfmtLogger(&logged), Clock: clock, MaxRecordBytes: testMaxRecord})
	filler := filepath.Join(dir, "filler")
	fill(t, filler)
	const tries = 50
	for i := range tries {
		if err := j.Commit(acceptedAlert(i), func() { t.Error("applied on a full disk") }); !errors.Is(err, unix.ENOSPC) {
			t.Fatalf("commit %d on a full disk: %v", i, err)
		}
	}
	if segs := segmentsIn(t, dir); len(segs) != 0 {
		t.Errorf("segments left on the full disk: %v", segs)
	}
	if logged.Count("Journal write failed") != 1 || logged.Count("suppressed=0") != 1 {
		t.Fatalf("log after %d failures:\n%s", tries, logged.String())
	}
	clock.Advance(failureLogInterval)
	j.Commit(acceptedAlert(tries), func() { t.Error("applied on a full disk") })
	if logged.Count("Journal write failed") != 2 || logged.Count(fmt.Sprintf("suppressed=%d", tries-1)) != 1 {
		t.Fatalf("log a minute later:\n%s", logged.String())
	}
	if testutil.ToFloat64(j.failures) != tries+1 {
		t.Errorf("failures %v, want %d", testutil.ToFloat64(j.failures), tries+1)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	commitAll(t, j, 100, 101)
	if testutil.ToFloat64(j.lastOK) != 1 {
		t.Error("last write not successful after room came back")
	}
}

// fill writes path until the file system is full.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

func gatherValue(t *testing.T, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}
