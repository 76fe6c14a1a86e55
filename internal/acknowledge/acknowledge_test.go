// SPDX-License-Identifier: Apache-2.0

package acknowledge

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

var now = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

const good = `acknowledgements:
  - address: Alice@example.com
    source: combolist
    handled_at: 2026-11-20T09:00:00Z
    by: security-oncall
    comment: password rotated, sessions revoked
  - address: alice@example.com
    handled_at: 2026-11-10T09:00:00Z
    by: ops
  - address: bob@example.com
    handled_at: 2026-11-21T09:00:00Z
    by: ops
`

func TestForPicksTheLatestEntryCoveringTheFeed(t *testing.T) {
	s, err := Parse([]byte(good), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key, source, by string
		line            int
	}{
		{"alice@example.com", "combolist", "security-oncall", 2}, // both cover it: the later wins
		{"alice@example.com", "archive", "ops", 7},               // only the entry for every feed
		{"bob@example.com", "index", "ops", 10},
		{"carol@example.com", "index", "", 0},
	} {
		e, ok := s.For(tc.key, tc.source)
		if ok != (tc.by != "") || e.By != tc.by || e.Line != tc.line {
			t.Errorf("For(%s, %s) = %+v, %v; want by %q at line %d", tc.key, tc.source, e, ok, tc.by, tc.line)
		}
	}
	var none *Set
	if _, ok := none.For("alice@example.com", "combolist"); ok {
		t.Error("a nil set acknowledges something")
	}
}

func TestBadEntriesNameTheirLine(t *testing.T) {
	entry := func(lines ...string) string {
		return "acknowledgements:\n  - address: alice@example.com\n    handled_at: 2026-11-20T09:00:00Z\n    by: ops\n  - " + strings.Join(lines, "\n    ") + "\n"
	}
	long := strings.Repeat("x", MaxCommentBytes+1)
	for _, tc := range []struct {
		name, data, want string
	}{
		{"unknown key", entry("address: bob@example.com", "handled_at: 2026-11-20T09:00:00Z", "by: ops", "coment: x"), `line 5: acknowledgement: unknown key "coment" at line 8`},
		{"bad time", entry("address: bob@example.com", "handled_at: 20 Nov 2026", "by: ops"), `line 5: acknowledgement: handled_at "20 Nov 2026" at line 6 is not an RFC 3339 time`},
		{"unknown feed", entry("address: bob@example.com", "source: pastebin", "handled_at: 2026-11-20T09:00:00Z", "by: ops"), `line 5: acknowledgement: unknown feed "pastebin"`},
		{"missing address", entry("source: index", "handled_at: 2026-11-20T09:00:00Z", "by: ops"), "line 5: acknowledgement: address is missing"},
		{"not an email", entry("address: bob", "handled_at: 2026-11-20T09:00:00Z", "by: ops"), `line 5: acknowledgement: address "bob" is not an email address`},
		{"missing time", entry("address: bob@example.com", "by: ops"), "line 5: acknowledgement: handled_at is missing"},
		{"future", entry("address: bob@example.com", "handled_at: 2026-11-24T09:00:00Z", "by: ops"), "line 5: acknowledgement: handled_at 2026-11-24T09:00:00Z is in the future"},
		{"missing by", entry("address: bob@example.com", "handled_at: 2026-11-20T09:00:00Z"), "line 5: acknowledgement: by is missing"},
		{"long comment", entry("address: bob@example.com", "handled_at: 2026-11-20T09:00:00Z", "by: ops", "comment: "+long), "line 5: acknowledgement: comment must be valid UTF-8 of at most 256 bytes"},
		{"duplicate key", entry("address: bob@example.com", "address: eve@example.com"), `line 5: acknowledgement: duplicate key "address" at line 6`},
		{"unknown top key", "acknowledgments: []\n", `line 1: unknown key "acknowledgments"`},
		{"not a list", "acknowledgements: {}\n", "line 1: acknowledgements: expected a list of entries"},
	} {
		_, err := Parse([]byte(tc.data), now)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// Every problem of every entry is reported at once, each on its own.
func TestEveryProblemIsReported(t *testing.T) {
	data := "acknowledgements:\n" +
		"  - address: alice@example.com\n    source: nowhere\n    handled_at: yesterday\n    by: ops\n    colour: red\n" +
		"  - address: bob\n    handled_at: 2026-11-20T09:00:00Z\n"
	_, err := Parse([]byte(data), now)
	want := []string{
		`line 2: acknowledgement: handled_at "yesterday" at line 4`,
		`line 2: acknowledgement: unknown key "colour" at line 6`,
		`line 2: acknowledgement: unknown feed "nowhere"`,
		`line 7: acknowledgement: address "bob" is not an email address`,
		`line 7: acknowledgement: by is missing`,
	}
	problems := Problems(err)
	if len(problems) != len(want) {
		t.Fatalf("%d problems, want %d: %v", len(problems), len(want), err)
	}
	for i, p := range problems {
		if !strings.HasPrefix(p.Error(), want[i]) {
			t.Errorf("problem %d: %v, want %q", i, p, want[i])
		}
	}
}

func TestEmptyFilesAcknowledgeNothing(t *testing.T) {
	for _, data := range []string{"", "acknowledgements:\n", "acknowledgements: []\n", "# nothing yet\n"} {
		s, err := Parse([]byte(data), now)
		if err != nil || len(s.Entries()) != 0 {
			t.Errorf("%q: %v, %d entries", data, err, len(s.Entries()))
		}
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "acks.yml")
	if err := os.WriteFile(path, []byte("acknowledgements:\n  - address: x@example.com\n    handled_at: yesterday\n    by: ops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, now)
	if err == nil || !strings.HasPrefix(err.Error(), path+": line 2: ") {
		t.Errorf("got %v, want the file and the entry's line 2", err)
	}
}

func TestUnwatchedWarnsPerEntry(t *testing.T) {
	s, err := Parse([]byte(good), now)
	if err != nil {
		t.Fatal(err)
	}
	warnings := s.Unwatched(func(k string) bool { return k == "alice@example.com" })
	if len(warnings) != 1 || warnings[0].Error() != "line 10: the entry's address is not watched" {
		t.Errorf("got %v, want one warning for bob at line 10", warnings)
	}
}

// No error shows an address, or a value that may be one, wherever it was
// written: the entry's line names it, so hmac labels stay private.
func TestErrorsNeverShowAnAddress(t *testing.T) {
	const secret = "alice secret@example.com"
	data := "acknowledgements:\n" +
		"  - address: " + secret + "\n    handled_at: 2026-11-20T09:00:00Z\n    by: ops\n" +
		"  - address: bob@example.com\n    source: " + secret + "\n    handled_at: 2026-11-20T09:00:00Z\n    by: ops\n" +
		"  - address: bob@example.com\n    handled_at: " + secret + "\n    by: ops\n    " + secret + ": x\n"
	_, err := Parse([]byte(data), now)
	if err == nil {
		t.Fatal("invalid entries passed")
	}
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("an error shows the address: %v", err)
	}
	for _, line := range []string{"line 2: acknowledgement: address (a value with @, not shown) is not", "line 5: acknowledgement: unknown feed (a value", "line 9: acknowledgement: handled_at (a value", "unknown key (a value"} {
		if !strings.Contains(err.Error(), line) {
			t.Errorf("missing %q in %v", line, err)
		}
	}
	if _, err := Parse([]byte(secret+": []\n"), now); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("a top-level key: %v, want an error without it", err)
	}
}

// A file of many bad entries returns MaxReported problems and the count of
// the rest, not one a line; so does Unwatched.
func TestProblemsAreCapped(t *testing.T) {
	var b strings.Builder
	b.WriteString("acknowledgements:\n")
	const n = 1000
	for range n {
		b.WriteString("  - address: bob@example.com\n    handled_at: 2026-11-20T09:00:00Z\n")
	}
	problems := Problems(func() error { _, err := Parse([]byte(b.String()), now); return err }())
	if len(problems) != MaxReported+1 {
		t.Fatalf("%d problems, want %d", len(problems), MaxReported+1)
	}
	if last := problems[MaxReported].Error(); last != fmt.Sprintf("and %d more problems not shown", n-MaxReported) {
		t.Errorf("last problem %q", last)
	}

	b.Reset()
	b.WriteString("acknowledgements:\n")
	for range n {
		b.WriteString("  - address: bob@example.com\n    handled_at: 2026-11-20T09:00:00Z\n    by: ops\n")
	}
	s, err := Parse([]byte(b.String()), now)
	if err != nil {
		t.Fatal(err)
	}
	warnings := s.Unwatched(func(string) bool { return false })
	if len(warnings) != MaxReported+1 || !strings.HasPrefix(warnings[MaxReported].Error(), fmt.Sprintf("and %d more", n-MaxReported)) {
		t.Errorf("%d warnings, last %v; want %d and a count", len(warnings), warnings[len(warnings)-1], MaxReported+1)
	}
}

// A file over its limit, or a device behind a symlink, is refused with an
// error naming the file and the limit, before anything is parsed (issue
// 24, case 4).
func TestLoadRefusesWhatIsNoFileOfItsSize(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.yml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", fileread.MaxAcknowledgementsBytes)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{big: fmt.Sprintf("limit of %d bytes", fileread.MaxAcknowledgementsBytes), zero: "not a regular file (a device)"} {
		_, err := Load(path, now)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v, want an error naming it and %q", path, err, want)
		}
	}
}

// Covers decides on the exporter's moments alone: the acknowledgement
// takes effect at min(handled_at, first loaded), and covers a feed when
// nothing of it was first seen after that.
func TestCovers(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 11, 20, 9, m, 0, 0, time.UTC) }
	var none time.Time
	for _, c := range []struct {
		name                               string
		handled, loaded, changed, critical time.Time
		effective                          time.Time
		covers                             bool
	}{
		{"a change exactly at handled_at", at(10), at(12), at(10), none, at(10), true},
		{"a change a second after handled_at", at(10), at(12), at(10).Add(time.Second), none, at(10), false},
		{"a future handled_at counts from its loading", at(14), at(10), at(11), none, at(10), false},
		{"a future handled_at covers what came before its loading", at(14), at(10), at(9), none, at(10), true},
		{"a critical webhook after handled_at", at(10), at(12), at(5), at(11), at(10), false},
		{"a critical webhook before handled_at", at(10), at(12), at(5), at(10), at(10), true},
		{"not loaded yet: handled_at", at(10), none, at(10), none, at(10), true},
	} {
		e := Entry{HandledAt: c.handled}
		effective, covers := e.Covers(c.loaded, c.changed, c.critical)
		if !effective.Equal(c.effective) || covers != c.covers {
			t.Errorf("%s: Covers = %v, %v; want %v, %v", c.name, effective, covers, c.effective, c.covers)
		}
	}
}

// The page's entries merge with the file's by the one rule, the latest
// handled_at in force; a new merge replaces the page's entries, never the
// file's.
func TestWithPage(t *testing.T) {
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	file, err := Parse([]byte("acknowledgements:\n  - address: alice@example.com\n    source: combolist\n    handled_at: 2026-11-27T00:00:00Z\n    by: file\n"), now)
	if err != nil {
		t.Fatal(err)
	}
	page := []Entry{{Address: "Alice@example.com", Source: "combolist", HandledAt: now, By: "page"}}
	merged := WithPage(file, page)
	if got, ok := merged.For("alice@example.com", "combolist"); !ok || got.By != "page" || !got.Page {
		t.Errorf("in force %+v, want the page's later entry", got)
	}
	if !merged.HasPage() || file.HasPage() {
		t.Error("HasPage: want the merge to hold the page's entry and the file's set none")
	}
	again := WithPage(merged, nil)
	if got, _ := again.For("alice@example.com", "combolist"); got.By != "file" || again.HasPage() || len(again.Entries()) != 1 {
		t.Errorf("after the page's entry is gone, in force %+v of %d, want the file's alone", got, len(again.Entries()))
	}
	early := WithPage(file, []Entry{{Address: "alice@example.com", Source: "combolist", HandledAt: now.Add(-72 * time.Hour), By: "page"}})
	if got, _ := early.For("alice@example.com", "combolist"); got.By != "file" {
		t.Errorf("in force %+v, want the file's later entry", got)
	}
}
