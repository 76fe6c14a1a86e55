package persist

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

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

func openJournal(t *testing.T, dir string, position uint64) (*Journal, []watchlist.AcceptedAlert, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	j, replay, err := OpenJournal(dir, position, reg, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, replay, reg
}

// commitAll commits alerts first..last-1 concurrently and returns the
// order the journal applied them in.
func commitAll(t *testing.T, j *Journal, first, last int) []int {
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
	j, replay, _ := openJournal(t, dir, 0)
	if len(replay) != 0 {
		t.Fatalf("an empty folder replayed %d", len(replay))
	}
	order := commitAll(t, j, 0, 200)
	if testutil.ToFloat64(j.records) != 200 || testutil.ToFloat64(j.syncs) > 200 || testutil.ToFloat64(j.lastOK) != 1 {
		t.Errorf("records %v, syncs %v, last ok %v", testutil.ToFloat64(j.records), testutil.ToFloat64(j.syncs), testutil.ToFloat64(j.lastOK))
	}
	t.Logf("200 concurrent commits took %v syncs", testutil.ToFloat64(j.syncs))
	j.Close()
	if err := j.Commit(acceptedAlert(0), func() { t.Error("applied after Close") }); err == nil {
		t.Error("a commit after Close succeeded")
	}

	_, replay, _ = openJournal(t, dir, 0)
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
	j, _, _ := openJournal(t, dir, 0)
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
	segments, _ := listSegments(dir)
	if len(segments) != 1 {
		t.Errorf("after Drop: segments %v, want the one written since the cut", segments)
	}
	j.Close()
	// A crash between the snapshot and Drop: the replay skips what the
	// snapshot holds, in any segment.
	j2, replay, _ := openJournal(t, dir, 12)
	if len(replay) != 3 || replay[0].Address == acceptedAlert(0).Address {
		t.Fatalf("replay after position 12: %d records", len(replay))
	}
	// The next record follows the last one.
	commitAll(t, j2, 15, 16)
	if m := j2.Cut(func() {}); m.Position != 16 {
		t.Errorf("position after one more commit: %d, want 16", m.Position)
	}
}

// A crash in mid-write leaves a torn record: the replay takes the intact
// records before it and counts the rest as damaged, whatever byte the
// write stopped at; new records go to a new segment.
func TestJournalTornTail(t *testing.T) {
	dir := t.TempDir()
	j, _, _ := openJournal(t, dir, 0)
	commitAll(t, j, 0, 1)
	commitAll(t, j, 1, 2)
	commitAll(t, j, 2, 3)
	j.Close()
	segments, _ := listSegments(dir)
	path := segmentPath(dir, segments[0])
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	firstLen := len(appendRecord(nil, 1, acceptedAlert(0)))
	for n := firstLen; n < len(whole); n++ {
		if err := os.WriteFile(path, whole[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		reg := prometheus.NewRegistry()
		jn, replay, err := OpenJournal(dir, 0, reg, log.NewNopLogger())
		if err != nil {
			t.Fatal(err)
		}
		got := gatherValue(t, reg, "breach_exporter_state_journal_damaged_records_total")
		intact := bytes.Count(whole[:n], []byte("\n"))
		if want := float64(min(1, n-bytes.LastIndexByte(whole[:n], '\n')-1)); len(replay) != intact || got != want {
			t.Fatalf("cut at %d of %d bytes: %d replayed, %v damaged", n, len(whole), intact, got)
		}
		jn.Close()
	}
	// A changed byte is caught by the checksum.
	damaged := append([]byte(nil), whole...)
	damaged[firstLen+20] ^= 1
	os.WriteFile(path, damaged, 0o600)
	j, replay, reg := openJournal(t, dir, 0)
	if len(replay) != 1 || gatherValue(t, reg, "breach_exporter_state_journal_damaged_records_total") != 2 {
		t.Fatalf("a changed byte in the second record: %d replayed", len(replay))
	}
	commitAll(t, j, 3, 4)
	if segs, _ := listSegments(dir); len(segs) != 2 {
		t.Errorf("segments after a damaged one: %v, want a new one", segs)
	}
}

// A write that fails answers every waiting commit with the error, applies
// none, and shows in the metrics; the next write that works clears it.
func TestJournalWriteFailure(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	j, _, _ := openJournal(t, dir, 0)
	os.RemoveAll(dir) // an unmounted volume fails for root too
	if err := j.Commit(acceptedAlert(0), func() { t.Error("a failed commit was applied") }); err == nil {
		t.Fatal("a commit into a missing folder succeeded")
	}
	if testutil.ToFloat64(j.failures) != 1 || testutil.ToFloat64(j.lastOK) != 0 {
		t.Errorf("failures %v, last ok %v", testutil.ToFloat64(j.failures), testutil.ToFloat64(j.lastOK))
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(acceptedAlert(1), func() {}); err != nil || testutil.ToFloat64(j.lastOK) != 1 {
		t.Errorf("after the folder came back: %v, last ok %v", err, testutil.ToFloat64(j.lastOK))
	}
}

// A folder removed (or replaced) under an open segment must not take
// alerts: the write and the sync succeed on a file that no start reads.
func TestJournalFolderRemovedUnderAnOpenSegment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	j, _, _ := openJournal(t, dir, 0)
	if err := j.Commit(acceptedAlert(0), func() {}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(acceptedAlert(1), func() { t.Error("an alert written to a removed folder was applied") }); err == nil {
		t.Fatal("a commit into the removed folder's open segment succeeded")
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := j.Commit(acceptedAlert(2), func() {}); err != nil {
		t.Fatalf("after the folder came back: %v", err)
	}
	if testutil.ToFloat64(j.failures) != 1 || testutil.ToFloat64(j.lastOK) != 1 {
		t.Errorf("failures %v, last ok %v; want 1 and 1", testutil.ToFloat64(j.failures), testutil.ToFloat64(j.lastOK))
	}
	j.Close()
	// What the new folder holds is replayed at the next start.
	_, replay, _ := openJournal(t, dir, 0)
	if len(replay) != 1 || replay[0].Address != acceptedAlert(2).Address {
		t.Errorf("replayed %v, want only the alert committed after the folder came back", replay)
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
