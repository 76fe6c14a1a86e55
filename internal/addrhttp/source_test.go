// SPDX-License-Identifier: Apache-2.0

package addrhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/addrhttp"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

var teamOwner = []string{"team", "owner"}

// server is a directory export on loopback whose answer a test swaps.
type server struct {
	*httptest.Server
	handler atomic.Pointer[http.HandlerFunc]
	// ifNoneMatch is the If-None-Match of the last request.
	ifNoneMatch atomic.Pointer[string]
	requests    atomic.Int64
}

func newServer(t *testing.T) *server {
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		inm := r.Header.Get("If-None-Match")
		s.ifNoneMatch.Store(&inm)
		(*s.handler.Load())(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) answer(h http.HandlerFunc) { s.handler.Store(&h) }

// list answers body with etag (none if empty), and 304 to a request that
// has it.
func list(body, etag string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if etag != "" {
			if r.Header.Get("If-None-Match") == etag {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

// group is a file_sd group of n addresses from first, with team.
func group(first, n int, team string) string {
	targets := make([]string, n)
	for i := range n {
		targets[i] = fmt.Sprintf("%q", fmt.Sprintf("user%d@example.com", first+i))
	}
	return fmt.Sprintf(`{"targets": [%s], "labels": {"team": %q}}`, strings.Join(targets, ","), team)
}

func settings(s *server) addrhttp.Settings {
	return addrhttp.Settings{Client: s.Client(), Timeout: 5 * time.Second, Interval: time.Second, MaxShrink: 0.5, Allowed: teamOwner}
}

func addresses(src *addrhttp.Source) []breach.Address {
	out, _ := src.MergeInto(map[string]string{}, "default", nil)
	return out
}

func newSource(t *testing.T, url string) (*addrhttp.Source, *prometheus.Registry) {
	reg := prometheus.NewPedanticRegistry()
	m, err := addrhttp.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	src := addrhttp.NewSource(url)
	m.Show([]*addrhttp.Source{src})
	return src, reg
}

// Every failure the done-when names keeps the last good list, counts its
// reason, and says what happened without an address.
func TestFetchKeepsLastGood(t *testing.T) {
	srv := newServer(t)
	src, reg := newSource(t, srv.URL)
	set := settings(srv)
	set.Timeout = 300 * time.Millisecond // the hang below ends here

	// Every reason at 0 from the first scrape, before any fetch.
	samples := testkit.Samples(t, reg)
	for _, r := range addrhttp.Reasons {
		if v, ok := samples[testkit.Series("breach_exporter_address_http_failures_total", "reason", r, "url", srv.URL)]; !ok || v != 0 {
			t.Errorf("failures{reason=%q} = %v (present %v) before any fetch, want 0", r, v, ok)
		}
	}

	srv.answer(list("["+group(0, 3, "payments")+"]", ""))
	if r := src.Fetch(context.Background(), set, time.Unix(1000, 0)); !r.Changed || r.Err != nil {
		t.Fatalf("first fetch: %+v", r)
	}
	good := addresses(src)
	if len(good) != 3 || good[0].Labels[0] != (breach.Label{Name: "team", Value: "payments"}) {
		t.Fatalf("addresses %+v", good)
	}

	for _, c := range []struct {
		name, reason string
		h            http.HandlerFunc
	}{
		{"hang", addrhttp.ReasonRequest, testkit.Hang},
		{"500", addrhttp.ReasonStatus, testkit.Status(http.StatusInternalServerError)},
		{"50 MB", addrhttp.ReasonTooLarge, testkit.HugeBodyOf(50 << 20)},
		{"invalid JSON", addrhttp.ReasonInvalid, list(`[{"targets": ["user1@example.com", "alice@example.com"`, "")},
		{"not a list", addrhttp.ReasonInvalid, list(`{"targets": ["alice@example.com"]}`, "")},
		{"no address", addrhttp.ReasonInvalid, list(`[{"targets": ["alice"]}]`, "")},
		{"304 to a request without validators", addrhttp.ReasonStatus, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotModified) }},
	} {
		srv.answer(c.h)
		start := time.Now()
		r := src.Fetch(context.Background(), set, time.Unix(2000, 0))
		took := time.Since(start)
		if r.Err == nil || r.Err.Reason != c.reason || r.Changed {
			t.Errorf("%s: %+v, want a failure of reason %s", c.name, r, c.reason)
			continue
		}
		if msg := r.Err.Error(); strings.Contains(msg, "@") || !strings.Contains(msg, srv.URL) {
			t.Errorf("%s: error %q must name the URL and no address", c.name, msg)
		}
		if took > 5*time.Second {
			t.Errorf("%s: took %s, past the timeout", c.name, took)
		}
		if got := addresses(src); !slicesEqual(got, good) {
			t.Errorf("%s: addresses %+v, want the last good list", c.name, got)
		}
		samples := testkit.Samples(t, reg)
		if v := samples[testkit.Series("breach_exporter_address_http_failures_total", "reason", c.reason, "url", srv.URL)]; v < 1 {
			t.Errorf("%s: failures{reason=%s} = %v", c.name, c.reason, v)
		}
		if samples[testkit.Series("breach_exporter_address_http_up", "url", srv.URL)] != 0 ||
			samples[testkit.Series("breach_exporter_address_http_last_success_timestamp_seconds", "url", srv.URL)] != 1000 ||
			samples[testkit.Series("breach_exporter_address_http_addresses", "url", srv.URL)] != 3 {
			t.Errorf("%s: up, last success or addresses wrong: %v", c.name, samples)
		}
	}
}

func slicesEqual(a, b []breach.Address) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}

// An unchanged list costs no parse: a 304 to its ETag, and the same body
// under a new ETag every time, are both no change and a success.
func TestFetchUnchanged(t *testing.T) {
	srv := newServer(t)
	src, reg := newSource(t, srv.URL)
	set := settings(srv)
	body := "[" + group(0, 2, "payments") + "]"
	srv.answer(list(body, `"v1"`))
	if r := src.Fetch(context.Background(), set, time.Unix(1000, 0)); !r.Changed {
		t.Fatalf("first fetch: %+v", r)
	}
	if r := src.Fetch(context.Background(), set, time.Unix(1001, 0)); r.Changed || r.Err != nil {
		t.Errorf("304: %+v, want no change", r)
	}
	if got := *srv.ifNoneMatch.Load(); got != `"v1"` {
		t.Errorf("If-None-Match %q, want the last ETag", got)
	}
	var n atomic.Int64
	srv.answer(func(w http.ResponseWriter, r *http.Request) {
		list(body, fmt.Sprintf(`"v%d"`, n.Add(1)+1))(w, r)
	})
	for i := range 3 {
		if r := src.Fetch(context.Background(), set, time.Unix(int64(1002+i), 0)); r.Changed || r.Err != nil {
			t.Errorf("a new ETag, the same body: %+v, want no change", r)
		}
	}
	samples := testkit.Samples(t, reg)
	if samples[testkit.Series("breach_exporter_address_http_up", "url", srv.URL)] != 1 ||
		samples[testkit.Series("breach_exporter_address_http_last_success_timestamp_seconds", "url", srv.URL)] != 1004 {
		t.Errorf("up or last success wrong: %v", samples)
	}
	// Forget (a change of owner_labels): the next request is unconditional.
	src.Forget()
	src.Fetch(context.Background(), set, time.Unix(1005, 0))
	if got := *srv.ifNoneMatch.Load(); got != "" {
		t.Errorf("after Forget: If-None-Match %q, want none", got)
	}
}

// A list that loses more than max_shrink of its addresses is held as a
// failure until the same list is answered twice in a row; a smaller loss
// is taken at once.
func TestFetchHoldsAShrunkList(t *testing.T) {
	srv := newServer(t)
	src, reg := newSource(t, srv.URL)
	set := settings(srv)
	srv.answer(list("["+group(0, 10, "payments")+"]", ""))
	src.Fetch(context.Background(), set, time.Unix(1000, 0))

	six := "[" + group(0, 6, "payments") + "]" // lost 4 of 10: within half
	srv.answer(list(six, ""))
	if r := src.Fetch(context.Background(), set, time.Unix(1001, 0)); !r.Changed || len(addresses(src)) != 6 {
		t.Fatalf("shrunk by 40%%: %+v, %d addresses; want taken", r, len(addresses(src)))
	}
	two, one := "["+group(0, 2, "payments")+"]", "["+group(0, 1, "payments")+"]"
	for i, step := range []struct {
		body  string
		taken bool
	}{
		{two, false}, // lost 4 of 6: held
		{one, false}, // another list: held anew
		{two, false}, // not twice in a row
		{two, true},  // twice in a row: taken
	} {
		srv.answer(list(step.body, ""))
		r := src.Fetch(context.Background(), set, time.Unix(int64(1002+i), 0))
		if step.taken != (r.Err == nil) {
			t.Errorf("step %d: %+v, taken %v", i, r, step.taken)
		}
		if !step.taken && (r.Err.Reason != addrhttp.ReasonShrunk || len(addresses(src)) != 6) {
			t.Errorf("step %d: %+v, %d addresses; want held, 6 kept", i, r, len(addresses(src)))
		}
	}
	if got := len(addresses(src)); got != 2 {
		t.Errorf("%d addresses, want the list taken", got)
	}
	if v := testkit.Samples(t, reg)[testkit.Series("breach_exporter_address_http_failures_total", "reason", "shrunk", "url", srv.URL)]; v != 3 {
		t.Errorf("failures{shrunk} = %v, want 3", v)
	}
}

// Skipped entries are said once per content, without the address outside
// email mode, and counted.
func TestFetchInvalidEntries(t *testing.T) {
	srv := newServer(t)
	src, reg := newSource(t, srv.URL)
	set := settings(srv)
	body := `[{"targets": ["a@example.com", "nope", "bob@@example.com"], "labels": {"team": "x", "floor": "3"}}]`
	srv.answer(list(body, ""))
	r := src.Fetch(context.Background(), set, time.Unix(1000, 0))
	if !r.Changed || len(r.Invalid) != 3 {
		t.Fatalf("%+v, want three invalid entries", r)
	}
	for _, l := range r.Invalid {
		if strings.Contains(l.Error(), "bob@") || strings.Contains(l.Error(), "nope") {
			t.Errorf("%q shows a target outside email mode", l.Error())
		}
	}
	if r := src.Fetch(context.Background(), set, time.Unix(1001, 0)); len(r.Invalid) != 0 {
		t.Errorf("the same content again: %+v, want nothing new to say", r)
	}
	if v := testkit.Samples(t, reg)[testkit.Series("breach_exporter_address_http_invalid_entries", "url", srv.URL)]; v != 3 {
		t.Errorf("invalid entries %v, want 3", v)
	}
	set.Show = true
	if r := addrhttp.NewSource(srv.URL).Fetch(context.Background(), set, time.Unix(1002, 0)); len(r.Invalid) != 3 || !strings.Contains(fmt.Sprint(r.Invalid), `"bob@@example.com"`) {
		t.Errorf("email mode: %+v, want the targets shown", r.Invalid)
	}
}

// Run fetches every interval and returns when its context ends, with the
// fetch it was in.
func TestRunStops(t *testing.T) {
	srv := newServer(t)
	srv.answer(list("["+group(0, 1, "x")+"]", ""))
	src := addrhttp.NewSource(srv.URL)
	set := settings(srv)
	set.Interval = time.Millisecond
	results := make(chan addrhttp.Result, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		src.Run(ctx, set, 0, time.Now, func(r addrhttp.Result) {
			select {
			case results <- r:
			default:
			}
		})
	}()
	if r := <-results; !r.Changed {
		t.Errorf("first result %+v, want the list", r)
	}
	<-results // a second fetch: it runs on
	srv.answer(testkit.Hang)
	testkit.Eventually(t, "a fetch that hangs", func() bool { return srv.requests.Load() >= 3 })
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return within 5 s of its context's end")
	}
}

// body100k is a list of 100,000 addresses in 1,000 groups, each with a
// team and an owner.
func body100k() string {
	var b strings.Builder
	b.WriteString("[")
	for g := range 1000 {
		if g > 0 {
			b.WriteString(",\n")
		}
		targets := make([]string, 100)
		for i := range targets {
			targets[i] = fmt.Sprintf(`"user%d@example.com"`, g*100+i)
		}
		fmt.Fprintf(&b, `{"targets": [%s], "labels": {"team": "team-%d", "owner": "owner-%d"}}`, strings.Join(targets, ","), g%50, g)
	}
	b.WriteString("]")
	return b.String()
}

// BenchmarkFetch100k fetches a changed list of 100,000 addresses with
// owner labels every iteration (B/op: the transient cost of one parse),
// and reports what the Source keeps (retained-MB) and the body's size.
func BenchmarkFetch100k(b *testing.B) {
	body := body100k()
	bodies := [2]string{body, strings.Replace(body, "team-0", "team-x", 1)}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, bodies[n.Add(1)%2])
	}))
	defer srv.Close()
	set := addrhttp.Settings{Client: srv.Client(), Timeout: 10 * time.Second, MaxShrink: 0.5, Allowed: teamOwner}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	src := addrhttp.NewSource(srv.URL)
	if r := src.Fetch(context.Background(), set, time.Now()); r.Err != nil || !r.Changed {
		b.Fatal(r)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ResetTimer()
	for b.Loop() {
		if r := src.Fetch(context.Background(), set, time.Now()); r.Err != nil || !r.Changed {
			b.Fatal(r)
		}
	}
	runtime.KeepAlive(src)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/1e6, "retained-MB")
	b.ReportMetric(float64(len(body))/1e6, "body-MB")
}

// A changed list comes with its body to save; a Source seeded with it
// keeps it through a failing first fetch, and the same body is no change.
func TestSeed(t *testing.T) {
	srv := newServer(t)
	set := settings(srv)
	body := "[" + group(0, 2, "payments") + "]"
	srv.answer(list(body, ""))
	r := addrhttp.NewSource(srv.URL).Fetch(context.Background(), set, time.Unix(1000, 0))
	if !r.Changed || string(r.Body) != body {
		t.Fatalf("%+v, want the body of the changed list", r)
	}
	src, reg := newSource(t, srv.URL)
	if err := src.Seed([]byte("[]"), set); err == nil {
		t.Error("an empty list seeds")
	}
	if err := src.Seed(r.Body, set); err != nil {
		t.Fatal(err)
	}
	srv.answer(testkit.Status(http.StatusServiceUnavailable))
	if r := src.Fetch(context.Background(), set, time.Unix(1001, 0)); r.Err == nil || len(addresses(src)) != 2 {
		t.Errorf("a failure after the seed: %+v, %d addresses; want the seeded 2", r, len(addresses(src)))
	}
	if v := testkit.Samples(t, reg)[testkit.Series("breach_exporter_address_http_last_success_timestamp_seconds", "url", srv.URL)]; v != 0 {
		t.Errorf("last success %v after a seed alone, want 0", v)
	}
	srv.answer(list(body, ""))
	if r := src.Fetch(context.Background(), set, time.Unix(1002, 0)); r.Changed || r.Err != nil || r.Body != nil {
		t.Errorf("the seeded body answered: %+v, want no change", r)
	}
}
