// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
)

// The page's acknowledgements round-trip through their file; a damaged
// file, one of a later version or with an invalid entry is refused whole.
func TestPageFile(t *testing.T) {
	now := time.Date(2026, 11, 28, 1, 0, 0, 0, time.UTC)
	in := []acknowledge.Entry{{Address: "alice@example.com", Source: "combolist", HandledAt: now, By: "Ada", Comment: "reset", Page: true},
		{Address: "bob@example.com", HandledAt: now, By: "Bo", Page: true}}
	data, err := EncodePage(in, now)
	if err != nil {
		t.Fatal(err)
	}
	out, err := DecodePage(data, now)
	if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Fatalf("DecodePage = %v, %v; want %v", out, err, in)
	}
	later, _ := framed(pageFileV1{Version: pageVersion + 1, WrittenAt: now})
	bad, _ := framed(pageFileV1{Version: pageVersion, WrittenAt: now, Entries: []pageEntryV1{{Address: "not an address", HandledAt: now, By: "x"}}})
	for name, data := range map[string][]byte{
		"damaged":       append([]byte{}, data[:len(data)-3]...),
		"later version": later,
		"invalid entry": bad,
	} {
		if _, err := DecodePage(data, now); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A page file that cannot be read is moved aside and counted, and the
// page starts empty.
func TestLoadPageMovesABadFileAside(t *testing.T) {
	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	f, err := Open(dir, reg, log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := time.Now()
	if err := f.SavePage([]acknowledge.Entry{{Address: "alice@example.com", HandledAt: now, By: "Ada"}}, now); err != nil {
		t.Fatal(err)
	}
	if got := f.LoadPage(now); len(got) != 1 || !got[0].Page {
		t.Fatalf("LoadPage = %v, want the saved entry", got)
	}
	if err := os.WriteFile(filepath.Join(dir, PageFileName), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := f.LoadPage(now); got != nil {
		t.Errorf("LoadPage of garbage = %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, PageFileName+".corrupt")); err != nil {
		t.Errorf("the bad file was not moved aside: %v", err)
	}
	if got := testutil.ToFloat64(f.loadFailures); got != 1 {
		t.Errorf("load failures = %v, want 1", got)
	}
}
