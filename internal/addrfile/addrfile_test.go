// SPDX-License-Identifier: Apache-2.0

package addrfile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/addrfile"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func emails(addrs []breach.Address) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.Email
	}
	return out
}

func TestParsePlain(t *testing.T) {
	data := "# HR export\nalice@example.com\n\n  bob@example.com   # inline comment\nnot an address\ncarol#x@example.com\n\xff"
	_, _, err := addrfile.Parse("hr.txt", []byte(data), false)
	if err == nil || !strings.Contains(err.Error(), "UTF-8") {
		t.Errorf("invalid UTF-8: %v, want an error", err)
	}
	data = strings.TrimSuffix(data, "\xff")
	addrs, invalid, err := addrfile.Parse("hr.txt", []byte(data), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := emails(addrs), []string{"alice@example.com", "bob@example.com", "carol#x@example.com"}; !slices.Equal(got, want) {
		t.Errorf("addresses %q, want %q", got, want)
	}
	if len(invalid) != 1 || invalid[0].Line != 5 || invalid[0].File != "hr.txt" || strings.Contains(invalid[0].Error(), "not an address") {
		t.Errorf("invalid %v, want line 5 only, without its text", invalid)
	}
	_, invalid, _ = addrfile.Parse("hr.txt", []byte(data), true)
	if len(invalid) != 1 || !strings.Contains(invalid[0].Error(), `"not an address"`) {
		t.Errorf("shown: %v, want the line's text", invalid)
	}
	for _, empty := range []string{"", "# nothing\n\n", "nobody\n"} {
		if _, _, err := addrfile.Parse("hr.txt", []byte(empty), false); !errors.Is(err, addrfile.ErrNoAddress) {
			t.Errorf("addrfile.Parse(%q) = %v, want addrfile.ErrNoAddress", empty, err)
		}
	}
}

func TestParseYAML(t *testing.T) {
	addrs, invalid, err := addrfile.Parse("it.yaml", []byte("# IT\n- alice@example.com\n- {email: x@example.com}\n- 'bob@example.com'\n- 42\n"), false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := emails(addrs), []string{"alice@example.com", "bob@example.com"}; !slices.Equal(got, want) {
		t.Errorf("addresses %q, want %q", got, want)
	}
	if len(invalid) != 2 || invalid[0].Line != 3 || invalid[1].Line != 5 {
		t.Errorf("invalid %v, want lines 3 and 5", invalid)
	}
	for data, want := range map[string]string{
		"- a@example.com\n- [":    "not valid YAML",
		"a: b\n":                  "must be a YAML list",
		"":                        addrfile.ErrNoAddress.Error(),
		"- nobody\n":              addrfile.ErrNoAddress.Error(),
		"- a@example.com\n\xff\n": "UTF-8",
	} {
		if _, _, err := addrfile.Parse("it.yml", []byte(data), false); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("addrfile.Parse(%q) = %v, want %q", data, err, want)
		}
	}
}

type files struct {
	t   *testing.T
	dir string
}

func (f files) write(name, content string) string {
	f.t.Helper()
	path := filepath.Join(f.dir, name)
	testkit.WriteFile(f.t, path, content)
	return path
}

// A file keeps its last good content through every kind of failure, goes
// when no glob matches it any more, and the metrics follow.
func TestSourceKeepsLastGood(t *testing.T) {
	f := files{t, t.TempDir()}
	hr := f.write("hr.txt", "alice@example.com\nbob@example.com\n")
	it := f.write("it.yaml", "- carol@example.com\n- BOB@example.com\n")
	reg := prometheus.NewPedanticRegistry()
	m, err := addrfile.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := addrfile.NewSource(m)
	globs := []string{filepath.Join(f.dir, "*.txt"), filepath.Join(f.dir, "*.yaml")}
	now := time.Unix(1000, 0)

	r := s.Read(globs, now, false)
	if !r.Changed || len(r.Failed) != 0 || len(r.Files) != 2 || r.Files[0].Path != hr || r.Files[1].Path != it {
		t.Fatalf("first read: %+v", r)
	}
	merged := emails(s.Merge([]breach.Address{{Email: "Alice@Example.com"}}))
	if want := []string{"Alice@Example.com", "bob@example.com", "carol@example.com"}; !slices.Equal(merged, want) {
		t.Errorf("merged %q, want %q", merged, want)
	}
	samples := testkit.Samples(t, reg)
	for series, want := range map[string]float64{
		testkit.Series("breach_exporter_address_file_addresses", "file", hr):                           2,
		testkit.Series("breach_exporter_address_file_duplicate_addresses", "file", hr):                 1,
		testkit.Series("breach_exporter_address_file_duplicate_addresses", "file", it):                 1,
		testkit.Series("breach_exporter_address_file_read_errors_total", "file", it):                   0,
		testkit.Series("breach_exporter_address_file_last_read_success_timestamp_seconds", "file", it): 1000,
		testkit.Series("breach_exporter_address_file_up", "file", it):                                  1,
		testkit.Series("breach_exporter_address_file_invalid_lines", "file", it):                       0,
		testkit.Series("breach_exporter_address_files_over_limit"):                                     0,
	} {
		if got, ok := samples[series]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}

	if r := s.Read(globs, now, false); r.Changed {
		t.Error("an unchanged read says changed")
	}

	// Broken in each way: the last good content stays, each failure counts.
	for i, broken := range []string{"- [", "", "\xff", "a: b"} {
		f.write("it.yaml", broken)
		r := s.Read(globs, now.Add(time.Minute), false)
		if r.Changed || len(r.Failed) != 1 || !strings.Contains(r.Failed[0].Error(), it) {
			t.Errorf("broken %q: %+v, want one failure naming the file", broken, r)
		}
		if got := emails(r.Files[1].Addresses); !slices.Equal(got, []string{"carol@example.com", "BOB@example.com"}) {
			t.Errorf("broken %q: %q, want the last good content", broken, got)
		}
		samples := testkit.Samples(t, reg)
		if got := samples[testkit.Series("breach_exporter_address_file_read_errors_total", "file", it)]; got != float64(i+1) {
			t.Errorf("read errors %v, want %d", got, i+1)
		}
		if got := samples[testkit.Series("breach_exporter_address_file_last_read_success_timestamp_seconds", "file", it)]; got != 1000 {
			t.Errorf("last success %v, want the good read's", got)
		}
		if got, ok := samples[testkit.Series("breach_exporter_address_file_up", "file", it)]; !ok || got != 0 {
			t.Errorf("broken %q: up %v (present %v), want 0", broken, got, ok)
		}
	}
	// The last good content back: up again, a new last success.
	f.write("it.yaml", "- carol@example.com\n- BOB@example.com\n")
	s.Read(globs, now.Add(2*time.Minute), false)
	samples = testkit.Samples(t, reg)
	if got := samples[testkit.Series("breach_exporter_address_file_up", "file", it)]; got != 1 {
		t.Errorf("fixed: up %v, want 1", got)
	}
	if got := samples[testkit.Series("breach_exporter_address_file_last_read_success_timestamp_seconds", "file", it)]; got != 1120 {
		t.Errorf("fixed: last success %v, want the fixing read's 1120", got)
	}

	// An invalid line is skipped; the rest stands.
	f.write("hr.txt", "alice@example.com\nnope\ndave@example.com\n")
	r = s.Read(globs, now, false)
	if !r.Changed || len(r.Invalid) != 1 || r.Invalid[0].Line != 2 || r.Invalid[0].File != hr {
		t.Errorf("invalid line: %+v", r)
	}

	// Removed: its addresses go.
	os.Remove(it)
	r = s.Read(globs, now, false)
	if !r.Changed || len(r.Files) != 1 {
		t.Errorf("after removal: %+v", r)
	}
	if got := emails(s.Merge(nil)); !slices.Equal(got, []string{"alice@example.com", "dave@example.com"}) {
		t.Errorf("after removal: %q", got)
	}
	if _, ok := testkit.Samples(t, reg)[testkit.Series("breach_exporter_address_file_addresses", "file", it)]; ok {
		t.Error("a removed file keeps its series")
	}
}

// A glob reads at most addrfile.MaxFilesPerGlob files and counts the rest;
// directories (Kubernetes's ..data) are passed over.
func TestSourceBounds(t *testing.T) {
	f := files{t, t.TempDir()}
	for i := range addrfile.MaxFilesPerGlob + 3 {
		f.write(fmt.Sprintf("f%03d", i), fmt.Sprintf("a%d@example.com\n", i))
	}
	if err := os.Mkdir(filepath.Join(f.dir, "..data"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := addrfile.NewSource(nil)
	r := s.Read([]string{filepath.Join(f.dir, "*")}, time.Now(), false)
	if len(r.Files) != addrfile.MaxFilesPerGlob || r.OverLimit != 3 || len(r.Failed) != 0 {
		t.Errorf("%d files, %d over the limit, failed %v; want %d, 3, none", len(r.Files), r.OverLimit, r.Failed, addrfile.MaxFilesPerGlob)
	}
}

// Merge is linear: 100,000 addresses across files merge without a
// quadratic step (a benchmark measures; this checks the result).
func TestMergeLarge(t *testing.T) {
	f := files{t, t.TempDir()}
	var b strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&b, "user%d@example.com\n", i)
	}
	f.write("all.txt", b.String())
	f.write("again.txt", "user5@example.com\n")
	s := addrfile.NewSource(nil)
	r := s.Read([]string{filepath.Join(f.dir, "*.txt")}, time.Now(), false)
	if len(r.Failed) != 0 {
		t.Fatal(r.Failed)
	}
	if got := len(s.Merge(nil)); got != 100_000 {
		t.Errorf("%d addresses, want 100,000", got)
	}
}

func BenchmarkReadMerge100k(b *testing.B) {
	dir := b.TempDir()
	var sb strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&sb, "user%d@example.com\n", i)
	}
	if err := os.WriteFile(filepath.Join(dir, "all.txt"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	s := addrfile.NewSource(nil)
	globs := []string{filepath.Join(dir, "*.txt")}
	for b.Loop() {
		s.Read(globs, time.Now(), false)
		s.Merge(nil)
	}
}
