// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sys/unix"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

var at = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)

func sample() State {
	return State{
		Watchlist: watchlist.Saved{
			Accounts: []watchlist.SavedAccount{{Name: "corp", Plan: "business"}, {Name: breach.DefaultAccount, Plan: "pro"}},
			Entries: []watchlist.SavedEntry{
				{Address: breach.Address{Email: "Alice@example.com", Account: "corp"}, State: breach.Verified, LastRefresh: at, LastAttempt: at,
					Sources: []breach.SourceState{{Source: "archive", BreachCount: 3, SourceDBs: []string{"db-1"},
						FieldsExposed: []string{"password"}, HasPlaintextPassword: true,
						LastScannedAt: at.Add(-time.Hour), LastChangedAt: at.Add(-2 * time.Hour)}},
					Alerts: []watchlist.AlertCount{
						{Family: watchlist.AlertsBySeverity, Source: "combolist", Label: "critical", Value: 3},
						{Family: watchlist.NewDatabases, Source: "combolist", Value: 4},
						{Family: watchlist.ExposedFields, Source: "combolist", Label: "password", Value: 2},
						{Family: watchlist.NewPlaintext, Source: "combolist", Value: 1},
						{Family: watchlist.LastObserved, Source: "combolist", Value: 1.7e9},
					},
					Feeds: map[string]watchlist.FeedMoments{
						"archive":   {LastChangedAt: at.Add(-2 * time.Hour), ChangeSeen: at.Add(-time.Hour)},
						"combolist": {Critical: at.Add(-time.Minute)},
					},
					Acknowledged: map[acknowledge.Key]time.Time{
						{Source: "archive", HandledAt: at.Add(-30 * time.Minute)}: at.Add(-29 * time.Minute),
						{HandledAt: at.Add(-20 * time.Minute)}:                    at.Add(-20 * time.Minute),
					}},
				{Address: breach.Address{Email: "found@example.org", Discovered: true}, State: breach.Pending, Failures: 2,
					LastAttempt: at.Add(time.Minute)},
				{Address: breach.Address{Email: "new@example.com"}, State: breach.Unverified, LastRefresh: at},
			},
		},
		Seen:    []breach.RememberedWebhook{{Digest: sha256.Sum256([]byte("body")), At: at}},
		Webhook: breach.WebhookCounts{Accepted: 5, UntrackedDiscoveryOff: 1, UntrackedDiscoveryLimit: 2},
		Journal: 7,
	}
}

func TestRoundTrip(t *testing.T) {
	data, err := Encode(sample(), at)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := sample(); !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, want)
	}
}

// A state that is not signed only is written as version 4, which the
// release before reads; one that is, as version 5, and read back so.
func TestSignedOnlyNamesItsVersion(t *testing.T) {
	for _, signed := range []bool{false, true} {
		st := sample()
		st.SignedOnly = signed
		data, err := Encode(st, at)
		if err != nil {
			t.Fatal(err)
		}
		_, v, err := unframed(data, version)
		if err != nil || v != 4+btoi(signed) {
			t.Errorf("signed only %v: written as version %d (%v)", signed, v, err)
		}
		if got, err := Decode(data); err != nil || got.SignedOnly != signed {
			t.Errorf("signed only %v: read back %v, %v", signed, got.SignedOnly, err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A file cut at any byte, or with any byte changed, is refused whole.
func TestDamagedFilesAreRefused(t *testing.T) {
	data, err := Encode(sample(), at)
	if err != nil {
		t.Fatal(err)
	}
	for n := range len(data) {
		if _, err := Decode(data[:n]); err == nil {
			t.Fatalf("a file truncated to %d of %d bytes was accepted", n, len(data))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		damaged := bytes.Clone(data)
		i := rng.IntN(len(damaged))
		damaged[i] ^= byte(1 + rng.IntN(255))
		if _, err := Decode(damaged); err == nil {
			t.Fatalf("a file with byte %d changed was accepted", i)
		}
	}
	for _, garbage := range [][]byte{nil, []byte("\n"), []byte("{}"), bytes.Repeat([]byte{0}, 4096), []byte(strings.Repeat("a", 64) + "\n{}")} {
		if _, err := Decode(garbage); err == nil {
			t.Errorf("garbage %q accepted", garbage)
		}
	}
}

// withChecksum frames a JSON body as a snapshot file, so the tests below
// reach the checks behind the checksum.
func withChecksum(body string) []byte {
	sum := sha256.Sum256([]byte(body))
	return []byte(hex.EncodeToString(sum[:]) + "\n" + body)
}

func TestValuesOutsideWhatWeWriteAreRefused(t *testing.T) {
	for name, body := range map[string]string{
		"unknown version":    `{"version":6,"addresses":[],"seen":[]}`,
		"signed_only in v4":  `{"version":4,"addresses":[],"seen":[],"signed_only":true}`,
		"account in v3":      `{"version":3,"addresses":[{"email":"a@example.com","account":"corp","state":"pending"}],"seen":[]}`,
		"accounts in v3":     `{"version":3,"accounts":[{"name":"corp"}],"addresses":[],"seen":[]}`,
		"one plan in v4":     `{"version":4,"plan":"pro","addresses":[],"seen":[]}`,
		"nameless account":   `{"version":4,"accounts":[{"plan":"pro"}],"addresses":[],"seen":[]}`,
		"account twice":      `{"version":4,"accounts":[{"name":"corp"},{"name":"corp"}],"addresses":[],"seen":[]}`,
		"unknown member":     `{"version":1,"addresses":[],"seen":[],"extra":1}`,
		"moments in v2":      `{"version":2,"addresses":[{"email":"a@example.com","state":"pending","acknowledged":[{"handled_at":"2026-11-20T09:00:00Z","loaded_at":"2026-11-20T09:00:00Z"}]}],"seen":[]}`,
		"feed without seen":  `{"version":3,"addresses":[{"email":"a@example.com","state":"pending","feeds":[{"source":"index","last_changed_at":"2026-11-20T09:00:00Z","change_seen":"0001-01-01T00:00:00Z"}]}],"seen":[]}`,
		"not an email":       `{"version":1,"addresses":[{"email":"not an email","state":"pending"}],"seen":[]}`,
		"unknown state":      `{"version":1,"addresses":[{"email":"a@example.com","state":"hacked"}],"seen":[]}`,
		"sources, pending":   `{"version":1,"addresses":[{"email":"a@example.com","state":"pending","sources":[{"source":"index"}]}],"seen":[]}`,
		"nameless source":    `{"version":1,"addresses":[{"email":"a@example.com","state":"verified","sources":[{"breach_count":1}]}],"seen":[]}`,
		"negative count":     `{"version":1,"addresses":[{"email":"a@example.com","state":"verified","sources":[{"source":"index","breach_count":-1}]}],"seen":[]}`,
		"twice":              `{"version":1,"addresses":[{"email":"a@example.com","state":"pending"},{"email":"A@example.com","state":"pending"}],"seen":[]}`,
		"negative failures":  `{"version":1,"addresses":[{"email":"a@example.com","state":"pending","failures":-1}],"seen":[]}`,
		"short digest":       `{"version":1,"addresses":[],"seen":[{"digest":"abcd","at":"2026-01-01T00:00:00Z"}]}`,
		"v1 with a journal":  `{"version":1,"addresses":[],"seen":[],"journal":3}`,
		"negative accepted":  `{"version":2,"addresses":[],"seen":[],"webhook":{"accepted":-1}}`,
		"unknown family":     `{"version":2,"addresses":[{"email":"a@example.com","state":"pending","alerts":[{"family":"x","source":"index","value":1}]}],"seen":[]}`,
		"negative alerts":    `{"version":2,"addresses":[{"email":"a@example.com","state":"pending","alerts":[{"family":"new_databases","source":"index","value":-1}]}],"seen":[]}`,
		"severity unlabeled": `{"version":2,"addresses":[{"email":"a@example.com","state":"pending","alerts":[{"family":"alerts","source":"index","value":1}]}],"seen":[]}`,
	} {
		_, err := Decode(withChecksum(body))
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if strings.Contains(err.Error(), "example.com") {
			// The error is logged, where addresses appear only as labels.
			t.Errorf("%s: the error shows an address: %v", name, err)
		}
	}
}

// A version 1 file, from before the alert counts were kept, still restores.
func TestVersion1Restores(t *testing.T) {
	st, err := Decode(withChecksum(`{"version":1,"plan":"pro","addresses":[{"email":"a@example.com","state":"pending"}],"seen":[]}`))
	if err != nil || len(st.Watchlist.Entries) != 1 || st.Watchlist.Accounts[0] != (watchlist.SavedAccount{Name: breach.DefaultAccount, Plan: "pro"}) {
		t.Fatalf("a version 1 file: %v, %+v", err, st)
	}
}

func newStore(t *testing.T, dir string) (*Folder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := Open(dir, reg, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s, reg
}

func TestSaveLoadAndMoveAside(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "data")
	s, reg := newStore(t, dir)
	if _, ok := s.Load(); ok {
		t.Fatal("a first start found a snapshot")
	}
	if err := s.Save(sample(), at); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(s.lastOK); got != 1 {
		t.Errorf("last successful = %v", got)
	}
	if got := testutil.ToFloat64(s.size); got <= 0 {
		t.Errorf("size = %v", got)
	}
	st, ok := s.Load()
	if !ok || !reflect.DeepEqual(st, sample()) {
		t.Fatalf("Load after Save: %v, %+v", ok, st)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("the folder holds %d files after a save, want only the snapshot and the lock (no temporary files)", len(entries))
	}

	// A damaged file is moved aside, counted, and the start goes on empty;
	// the next start does not trip on it again.
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Load(); ok {
		t.Fatal("a damaged snapshot was loaded")
	}
	if _, err := os.Stat(path + ".corrupt"); err != nil {
		t.Errorf("the damaged file was not moved aside: %v", err)
	}
	if n, err := testutil.GatherAndCount(reg, "breach_exporter_state_load_failures_total"); err != nil || n != 1 || testutil.ToFloat64(s.loadFailures) != 1 {
		t.Errorf("load failures not counted: %v %v", n, err)
	}
	if _, ok := s.Load(); ok {
		t.Error("the next start found a snapshot")
	}
}

func TestWriteFailureIsCounted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, _ := newStore(t, dir)
	// The folder vanishing (a volume unmounted) fails the write for any
	// user, root included, where permissions would not.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(sample(), at); err == nil {
		t.Fatal("Save into a missing folder succeeded")
	}
	if testutil.ToFloat64(s.lastOK) != 0 || testutil.ToFloat64(s.writeErrors) != 1 {
		t.Error("the failed write is not visible in the metrics")
	}
}

func TestOpenRefusesAFolderItCannotUse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file, prometheus.NewRegistry(), log.NewNopLogger()); err == nil {
		t.Error("Open accepted a file as the folder")
	}
}

// One store per folder: a second Open fails, naming the folder, until the
// first is closed.
func TestOneStorePerFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, _ := newStore(t, dir)
	if _, err := Open(dir, prometheus.NewRegistry(), log.NewNopLogger()); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a second Open on the folder: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, _ := newStore(t, dir)
	second.Close()
}

// The lock is the folder's: removing or replacing its lock file lets no
// second store in, and the error still names the folder and, when the
// lock file says it, the holder's pid.
func TestLockHoldsWithoutItsFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	first, _ := newStore(t, dir)
	defer first.Close()
	_, err := Open(dir, prometheus.NewRegistry(), log.NewNopLogger())
	if err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("a second Open: %v", err)
	}
	lock := filepath.Join(dir, LockName)
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, prometheus.NewRegistry(), log.NewNopLogger()); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a second Open after the lock file was removed: %v", err)
	}
	if err := os.WriteFile(lock, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, prometheus.NewRegistry(), log.NewNopLogger()); err == nil {
		t.Fatal("a second Open after the lock file was replaced succeeded")
	}
}

// A snapshot counts as written only in the folder the path names: once
// the folder was moved (or removed and made anew), Save fails, counted,
// and writes nothing into the new folder, which a second store can take.
func TestSnapshotRefusedInAMovedFolder(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	s, _ := newStore(t, dir)
	defer s.Close()
	if err := s.Save(sample(), at); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir, filepath.Join(base, "data.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.Save(sample(), at); err == nil || !errors.Is(err, errFolderMoved) {
		t.Fatalf("Save after the folder moved: %v", err)
	}
	if testutil.ToFloat64(s.lastOK) != 0 || testutil.ToFloat64(s.writeErrors) != 1 {
		t.Error("the refused snapshot is not visible in the metrics")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the new folder holds %v", entries)
	}
	second, _ := newStore(t, dir)
	second.Close()
}

// What is not a regular file of bounded size in the snapshot's place is a
// damaged snapshot: read without blocking and without reading it whole,
// moved aside and counted, and the start goes on empty. A named pipe
// would block a plain read until someone writes; a sparse file over the
// limit costs nothing to make.
func TestOddFilesInTheSnapshotsPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func(path string) error
	}{
		{"a named pipe", func(path string) error { return unix.Mkfifo(path, 0o600) }},
		{"a file over the limit", func(path string) error {
			f, err := os.Create(path)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(fileread.MaxSnapshotBytes + 1)
		}},
		{"a symlink to a device", func(path string) error { return os.Symlink("/dev/zero", path) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			s, _ := newStore(t, dir)
			path := filepath.Join(dir, FileName)
			if err := tc.make(path); err != nil {
				t.Fatal(err)
			}
			loaded := make(chan bool, 1)
			go func() { _, ok := s.Load(); loaded <- ok }()
			select {
			case ok := <-loaded:
				if ok {
					t.Fatal("it was loaded as a snapshot")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Load blocked")
			}
			if got := testutil.ToFloat64(s.loadFailures); got != 1 {
				t.Errorf("load failures = %v, want 1", got)
			}
			if _, err := os.Lstat(path + ".corrupt"); err != nil {
				t.Errorf("not moved aside: %v", err)
			}
			if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("still in the snapshot's place: %v", err)
			}
		})
	}
}
