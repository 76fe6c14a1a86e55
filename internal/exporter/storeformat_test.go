// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// goldenEvent is one line of testdata/store-28b5cca/events.jsonl.
type goldenEvent struct {
	Kind string `json:"kind"`
	Data string `json:"data"`
}

func readGoldenEvents(t *testing.T) []goldenEvent {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "store-28b5cca", "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []goldenEvent
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e goldenEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// applier is a replica's applying side alone, on a watchlist of one
// account and two addresses.
func applier(t *testing.T) *replicas {
	t.Helper()
	w := watchlist.New()
	w.Sync([]string{"default"}, []breach.Address{{Email: "a@example.com"}, {Email: "b@example.com"}}, breach.LabelEmail, 0)
	r := &replicas{logger: log.NewNopLogger(), watchlist: w, mine: newMineSet(), logs: ratelog.New(time.Minute, nil),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "invalid"})}
	return r
}

// What 28b5cca wrote to the store reads the same in this release: every
// kind of event, with each value, and its checkpoint.
func TestReadsWhatThePreviousReleaseWrote(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 5, 0, 0, time.UTC)
	events := readGoldenEvents(t)
	if len(events) != 7 {
		t.Fatalf("%d golden events, want 7", len(events))
	}
	answered, err := decodeOutcome(events[0].Kind, []byte(events[0].Data), now)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	want := breach.SourceState{Source: "combolist", BreachCount: 3, SourceDBs: []string{"x", "y"}, FieldsExposed: []string{"password", "email"},
		HasPlaintextPassword: true, LastScannedAt: at, LastChangedAt: at.Add(-time.Hour)}
	if len(answered.Sources) != 1 || answered.Key != "a@example.com" || answered.State != breach.Verified || !answered.At.Equal(at.Add(time.Second)) ||
		!equalSources(answered.Sources[0], want) {
		t.Errorf("answered read as %+v, want its source %+v", answered, want)
	}
	rl, err := decodeOutcome(events[5].Kind, []byte(events[5].Data), now)
	if err != nil || rl.RateLimit == nil || *rl.RateLimit != (breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 59, HasRemaining: true, Reset: at.Add(time.Minute)}) {
		t.Errorf("rate limit read as %+v, %v", rl.RateLimit, err)
	}
	acct, err := decodeOutcome(events[4].Kind, []byte(events[4].Data), now)
	if err != nil || acct.Plan != "business" || !acct.Up {
		t.Errorf("account read as %+v, %v", acct, err)
	}
	a, err := decodeAlert([]byte(events[6].Data), now)
	if err != nil || a.Address != "a@example.com" || a.Delta.NewDatabases != 1 || a.Delta.Severity != "critical" {
		t.Errorf("alert read as %+v, %v", a, err)
	}

	r := applier(t)
	for i, e := range events[:6] {
		r.apply(sharedstore.Event{ID: "1-" + string(rune('1'+i)), Kind: e.Kind, Data: []byte(e.Data)})
	}
	if n := testutil.ToFloat64(r.dropped); n != 0 {
		t.Errorf("%v of the previous release's events skipped, want none", n)
	}

	data, err := os.ReadFile(filepath.Join("testdata", "store-28b5cca", "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := persist.DecodeShared(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Watchlist.Entries) != 2 || len(st.Watchlist.Entries[0].Alerts) != 1 || st.Watchlist.Accounts[0].Plan != "business" {
		t.Errorf("the previous release's checkpoint read as %+v", st.Watchlist)
	}
}

func equalSources(a, b breach.SourceState) bool {
	return a.Source == b.Source && a.BreachCount == b.BreachCount && strings.Join(a.SourceDBs, ",") == strings.Join(b.SourceDBs, ",") &&
		strings.Join(a.FieldsExposed, ",") == strings.Join(b.FieldsExposed, ",") && a.HasPlaintextPassword == b.HasPlaintextPassword &&
		a.LastScannedAt.Equal(b.LastScannedAt) && a.LastChangedAt.Equal(b.LastChangedAt)
}

// This release writes what the previous one reads: the same member names
// (the previous release matched them to Go's field names), plus "v".
func TestWritesWhatThePreviousReleaseReads(t *testing.T) {
	events := readGoldenEvents(t)
	o, err := decodeOutcome(events[0].Kind, []byte(events[0].Data), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := encodeOutcome(o)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":1,` + strings.TrimPrefix(events[0].Data, "{"); string(data) != want {
		t.Errorf("this release writes\n%s\nwant the previous release's form with its version:\n%s", data, want)
	}
}

// A later release's event of this version with members this one does not
// know is read; one of a later version, or of an unknown kind, is skipped
// and counted.
func TestEventsOfALaterRelease(t *testing.T) {
	now := time.Now().UTC()
	later := `{"v":1,"account":"default","key":"a@example.com","sent":"` + now.Format(time.RFC3339) + `","at":"` + now.Format(time.RFC3339) +
		`","state":"verified","sources":[{"Source":"combolist","BreachCount":2,"SourceDBs":["x"],"FieldsExposed":[],"HasPlaintextPassword":false,` +
		`"LastScannedAt":"2026-11-22T06:00:00Z","LastChangedAt":"2026-11-22T06:00:00Z","Severity":"high"}],"owner":"team-a","region":{"name":"eu"}}`
	r := applier(t)
	r.apply(sharedstore.Event{ID: "1-1", Kind: eventAnswered, Data: []byte(later)})
	if n := testutil.ToFloat64(r.dropped); n != 0 {
		t.Fatalf("an event with members this release does not know was skipped")
	}
	if e := entry(r.watchlist, "a@example.com"); e.State != breach.Verified || len(e.Sources) != 1 || e.Sources[0].BreachCount != 2 {
		t.Errorf("the later release's answer applied as %+v", e)
	}
	_, err := decodeOutcome(eventAnswered, []byte(strings.Replace(later, `"v":1`, `"v":2`, 1)), now)
	if !errors.Is(err, errLaterFormat) {
		t.Errorf("an event of version 2 read with %v, want errLaterFormat", err)
	}
	r.apply(sharedstore.Event{ID: "1-2", Kind: eventAnswered, Data: []byte(strings.Replace(later, `"v":1`, `"v":2`, 1))})
	r.apply(sharedstore.Event{ID: "1-3", Kind: "owner_changed", Data: []byte(`{"v":1}`)})
	if n := testutil.ToFloat64(r.dropped); n != 2 {
		t.Errorf("%v events skipped, want the later version's and the unknown kind's", n)
	}
}

func entry(w *watchlist.List, email string) watchlist.Entry {
	for _, e := range w.View().Entries {
		if e.Address.Email == email {
			return e
		}
	}
	return watchlist.Entry{}
}

// Events are held to what a replica writes, as an API answer is.
func TestEventsAreChecked(t *testing.T) {
	now := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	answer := func(count, scanned, at string) string {
		return fmt.Sprintf(`{"account":"default","key":"a@example.com","sent":"2026-11-22T06:00:00Z","at":"%s","state":"verified","sources":[`+
			`{"Source":"combolist","BreachCount":%s,"LastScannedAt":"%s","LastChangedAt":"2026-11-22T05:00:00Z"}]}`, at, count, scanned)
	}
	for name, data := range map[string]string{
		"negative breach_count": answer("-7", "2026-11-22T06:00:00Z", "2026-11-22T06:00:00Z"),
		"a scan in 2100":        answer("1", "2100-01-01T00:00:00Z", "2026-11-22T06:00:00Z"),
		"a zero scan time":      answer("1", "0001-01-01T00:00:00Z", "2026-11-22T06:00:00Z"),
		"a zero answer time":    answer("1", "2026-11-22T06:00:00Z", "0001-01-01T00:00:00Z"),
		"an upper-case key":     strings.Replace(answer("1", "2026-11-22T06:00:00Z", "2026-11-22T06:00:00Z"), "a@example", "A@example", 1),
		"an unknown state":      `{"account":"default","key":"a@example.com","sent":"2026-11-22T06:00:00Z","at":"2026-11-22T06:00:00Z","state":"hacked"}`,
		"no account":            `{"key":"a@example.com","sent":"2026-11-22T06:00:00Z","at":"2026-11-22T06:00:00Z","state":"pending"}`,
		"a string count":        answer(`"3"`, "2026-11-22T06:00:00Z", "2026-11-22T06:00:00Z"),
	} {
		if _, err := decodeOutcome(eventAnswered, []byte(data), now); err == nil {
			t.Errorf("%s: taken", name)
		}
	}
	if _, err := decodeOutcome(eventRateLimit, []byte(`{"account":"default","rate_limit":{"Limit":-1}}`), now); err == nil {
		t.Error("a negative rate limit taken")
	}
	// The publisher's clock ahead: clamped to now, as a snapshot's is.
	o, err := decodeOutcome(eventAnswered, []byte(answer("1", "2026-11-22T06:00:00Z", "2026-11-22T06:10:00Z")), now)
	if err != nil || !o.At.Equal(now) {
		t.Errorf("an answer 10 minutes ahead read as %v, %v; want it at now", o.At, err)
	}
	// Bounded before decoding.
	r := applier(t)
	r.apply(sharedstore.Event{ID: "1-1", Kind: eventAnswered, Data: bytes.Repeat([]byte(" "), maxEventBytes+1)})
	if n := testutil.ToFloat64(r.dropped); n != 1 {
		t.Errorf("an event over %d bytes: %v skipped, want 1", maxEventBytes, n)
	}
	// One the store did not send (sharedstore: its size only).
	r.apply(sharedstore.Event{ID: "1-2", Oversized: 100 << 20})
	if n := testutil.ToFloat64(r.dropped); n != 2 {
		t.Errorf("an entry of 100 MB the store did not send: %v skipped, want 2", n)
	}
}
