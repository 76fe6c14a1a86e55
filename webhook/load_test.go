// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// serveLoopback runs the webhook listener's real server (its timeouts and
// limits included) on 127.0.0.1 until the test ends.
func serveLoopback(t *testing.T, h *Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, "/webhook")
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ln)
	}()
	t.Cleanup(func() {
		// Shutdown, unlike Close, waits for connections still lingering
		// after an early answer (net/http delays their close by 500 ms).
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		<-served
	})
	return ln.Addr().String()
}

// loadRequest is one request of the load test and the answer it must get.
type loadRequest struct {
	kind   string // the outcome the handler must count it under
	body   []byte
	secret []byte // nil: unsigned
	want   int
}

// Eight senders share one listener and a shuffled mix of valid alerts (each
// sent several times, copies racing each other), unsigned and wrongly
// signed requests and oversized bodies. Every request must get its answer
// and be counted exactly once, each distinct alert accepted exactly once,
// and the heap must not grow with the bytes thrown at it.
func TestLoadMixedSenders(t *testing.T) {
	if testing.Short() {
		t.Skip("a load of 3,000 requests, about a second; runs without -short")
	}
	const (
		senders       = 8
		distinctValid = 600
		copies        = 3 // of each valid body: 1 accepted, 2 duplicates
		unsigned      = 300
		wrongSecret   = 300
		oversized     = 64
		oversizedSize = 1 << 20 // 16 times the default cap
	)
	f := newFixture(t, settings{})
	url := "http://" + serveLoopback(t, f.h) + "/webhook"

	// The copies of a valid body go out back to back, so the senders take
	// them at the same moment and race each other through the dedup; the
	// groups and the other requests are shuffled.
	var groups [][]loadRequest
	for i := range distinctValid {
		// One address per distinct alert, so that its counter shows whether
		// that alert was counted exactly once.
		body := alertBodyFor(loadAddress(i), fmt.Sprintf("load %d", i))
		group := make([]loadRequest, copies)
		for c := range group {
			// Kinds only add up the totals: whichever copy wins is accepted.
			kind := outcomeDuplicate
			if c == 0 {
				kind = outcomeAccepted
			}
			group[c] = loadRequest{kind: kind, body: body, secret: testSecret, want: http.StatusNoContent}
		}
		groups = append(groups, group)
	}
	for i := range unsigned {
		groups = append(groups, []loadRequest{{kind: outcomeInvalidSignature,
			body: alertBody(fmt.Sprintf("unsigned %d", i)), want: http.StatusUnauthorized}})
	}
	for i := range wrongSecret {
		groups = append(groups, []loadRequest{{kind: outcomeInvalidSignature,
			body: alertBody(fmt.Sprintf("forged %d", i)), secret: []byte("not-the-secret"), want: http.StatusUnauthorized}})
	}
	big := bytes.Repeat([]byte("x"), oversizedSize)
	for range oversized {
		groups = append(groups, []loadRequest{{kind: outcomeTooLarge, body: big, secret: testSecret, want: http.StatusRequestEntityTooLarge}})
	}
	rand.New(rand.NewPCG(6, 3)).Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	plan := slices.Concat(groups...)
	want := map[string]float64{}
	for _, r := range plan {
		want[r.kind]++
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	defer client.CloseIdleConnections()

	heapBefore := heapInuse()
	peak := sampleHeapPeak()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // bounds the whole run
	defer cancel()
	began := time.Now()

	work := make(chan loadRequest)
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		wrong     []string
		serverErr int
	)
	for range senders {
		wg.Go(func() {
			for r := range work {
				status, err := post(ctx, client, url, r)
				mu.Lock()
				switch {
				case err != nil:
					wrong = append(wrong, fmt.Sprintf("%s: %v", r.kind, err))
				case status != r.want:
					wrong = append(wrong, fmt.Sprintf("%s: status %d, want %d", r.kind, status, r.want))
					if status >= 500 {
						serverErr++
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, r := range plan {
		work <- r
	}
	close(work)
	wg.Wait()
	took := time.Since(began)
	heapPeak := peak()
	client.CloseIdleConnections()
	heapAfter := heapInuse()

	t.Logf("%d requests from %d senders in %s (%.0f/s); heap in use %d KiB before, peak %d KiB, %d KiB after",
		len(plan), senders, took.Round(time.Millisecond), float64(len(plan))/took.Seconds(),
		heapBefore>>10, heapPeak>>10, heapAfter>>10)
	if serverErr > 0 {
		t.Errorf("%d requests answered 5xx", serverErr)
	}
	if len(wrong) > 0 {
		t.Errorf("%d of %d requests did not get their answer, e.g. %v", len(wrong), len(plan), wrong[:min(5, len(wrong))])
	}
	for _, o := range outcomes {
		if got := f.outcomeCount(o); got != want[o] {
			t.Errorf("breach_webhook_requests_total{outcome=%q} = %v, want %v", o, got, want[o])
		}
	}
	if got := histogramCount(t, f); got != uint64(len(plan)) {
		t.Errorf("duration histogram observed %d requests, want %d", got, len(plan))
	}

	// Each distinct alert reached the counters exactly once, and queued its
	// address for a re-read; nothing else was counted.
	samples := f.samples()
	counted := map[string]float64{}
	var total float64
	for k, v := range samples {
		if strings.HasPrefix(k, "breach_alerts_total{") {
			total += v
			if v != 0 {
				counted[k] = v
			}
		}
	}
	var repeated []string
	for i := range distinctValid {
		k := testkit.Series("breach_alerts_total", "address", loadAddress(i), "source", "index", "severity", "warning")
		if n := counted[k]; n != 1 {
			repeated = append(repeated, fmt.Sprintf("%s x%v", loadAddress(i), n))
		}
		delete(counted, k)
	}
	for k, n := range counted {
		repeated = append(repeated, fmt.Sprintf("%s x%v (never sent as valid)", k, n))
	}
	if len(repeated) > 0 {
		t.Errorf("%d alerts counted other than once or never sent as valid, e.g. %v", len(repeated), repeated[:min(5, len(repeated))])
	}
	if total != distinctValid {
		t.Errorf("breach_alerts_total = %v, want %d", total, distinctValid)
	}
	if q := f.queued(); len(q) != distinctValid {
		t.Errorf("%d addresses queued for a re-read, want %d", len(q), distinctValid)
	}

	// The oversized bodies alone were 64 MiB; a server that buffered them
	// or kept what it read would show it here.
	const retainedLimit, peakLimit = 4 << 20, 8 << 20
	if grown := int64(heapAfter) - int64(heapBefore); grown > retainedLimit {
		t.Errorf("heap in use grew by %d KiB and stayed, want under %d KiB", grown>>10, retainedLimit>>10)
	}
	if grown := int64(heapPeak) - int64(heapBefore); grown > peakLimit {
		t.Errorf("heap in use peaked %d KiB above the start, want under %d KiB", grown>>10, peakLimit>>10)
	}
}

// loadAddress is the address of the i-th distinct valid alert.
func loadAddress(i int) string { return fmt.Sprintf("load-%d@example.com", i) }

// post sends one request and returns the status, having read the answer.
func post(ctx context.Context, client *http.Client, url string, r loadRequest) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(r.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	if r.secret != nil {
		req.Header.Set(SignatureHeader, sim.Sign(r.secret, r.body))
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

func histogramCount(t *testing.T, f *fixture) uint64 {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "breach_webhook_request_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no duration histogram")
	return 0
}

// heapInuse is the live heap after a collection.
func heapInuse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// sampleHeapPeak samples HeapInuse until the returned function is called,
// which returns the highest value seen.
func sampleHeapPeak() (stop func() uint64) {
	done := make(chan struct{})
	result := make(chan uint64)
	go func() {
		tick := time.NewTicker(5 * time.Millisecond) // a sampling rate, not synchronisation
		defer tick.Stop()
		var peak uint64
		for {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-tick.C:
			case <-done:
				result <- peak
				return
			}
		}
	}()
	return func() uint64 {
		close(done)
		return <-result
	}
}

// Slowloris: a sender that trickles its headers, or its body, keeps sending
// bytes the whole time, and the listener still cuts it off at its own
// deadline (readHeaderTimeout, readTimeout). The two run side by side, so
// this costs readTimeout of real time, about 10 s.
func TestSlowSendersAreCutOff(t *testing.T) {
	if testing.Short() {
		t.Skip("real timeouts, about 10 s; runs without -short")
	}
	f := newFixture(t, settings{})
	addr := serveLoopback(t, f.h)
	body := []byte(validAlert)

	cases := []struct {
		name     string
		deadline time.Duration
		// head is sent at once, then trickle a byte at a time, forever.
		head, trickle string
		// answers are the status lines the server may send before closing,
		// "" for none.
		answers []string
	}{
		{
			name: "slow headers", deadline: readHeaderTimeout,
			head:    "POST /webhook HTTP/1.1\r\nHost: hook\r\nX-Slow: ",
			trickle: strings.Repeat("a", 1000),
			answers: []string{""},
		},
		{
			name: "slow body", deadline: readTimeout,
			head: fmt.Sprintf("POST /webhook HTTP/1.1\r\nHost: hook\r\nContent-Type: application/json\r\n%s: %s\r\nContent-Length: %d\r\n\r\n",
				SignatureHeader, sim.Sign(testSecret, body), len(body)),
			trickle: string(body),
			// The handler answers 400 when its read fails, but writeTimeout
			// runs from the end of the headers and expires at the same
			// moment, so the answer may or may not get out.
			answers: []string{"", "HTTP/1.1 400 Bad Request"},
		},
	}
	type result struct {
		took   time.Duration
		status string
		err    error
	}
	results := make([]result, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			took, status, err := slowSend(addr, c.head, c.trickle, c.deadline+5*time.Second)
			results[i] = result{took, status, err}
		})
	}
	wg.Wait()

	for i, c := range cases {
		r := results[i]
		t.Logf("%s: cut off after %s (deadline %s), answer %q", c.name, r.took.Round(time.Millisecond), c.deadline, r.status)
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", c.name, r.err)
		case r.took < c.deadline || r.took > c.deadline+2*time.Second:
			t.Errorf("%s: connection closed after %s, want at the server's %s deadline", c.name, r.took, c.deadline)
		case !slices.Contains(c.answers, r.status):
			t.Errorf("%s: answered %q, want one of %q", c.name, r.status, c.answers)
		}
	}
	if got := f.outcomeSum(); got != 1 || f.outcomeCount(outcomeMalformed) != 1 {
		t.Errorf("handler counted %v requests (%v malformed), want only the slow body, as malformed", got, f.outcomeCount(outcomeMalformed))
	}
	if f.watchlist.Len() != 0 || f.alertSeries() != 0 {
		t.Error("a trickled alert was accepted")
	}
}

// slowSend connects, sends head, then trickles a byte every 100 ms until
// the server closes the connection. It returns how long the connection
// lived and the status line the server sent, if any. limit bounds the wait
// in case the server never closes.
func slowSend(addr, head, trickle string, limit time.Duration) (time.Duration, string, error) {
	began := time.Now()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	conn.SetReadDeadline(began.Add(limit))

	closed := make(chan struct{})
	var status string
	var readErr error
	go func() {
		defer close(closed)
		r := bufio.NewReader(conn)
		status, _ = r.ReadString('\n')
		status = strings.TrimRight(status, "\r\n")
		_, readErr = io.Copy(io.Discard, r)
	}()

	if _, err := io.WriteString(conn, head); err != nil {
		return 0, "", err
	}
	tick := time.NewTicker(100 * time.Millisecond) // the slow sender's pace, not synchronisation
	defer tick.Stop()
	for i := 0; ; i = (i + 1) % len(trickle) {
		select {
		case <-closed:
			took := time.Since(began)
			var netErr net.Error
			if errors.As(readErr, &netErr) && netErr.Timeout() {
				return took, status, fmt.Errorf("the server did not close the connection within %s", limit)
			}
			return took, status, nil
		case <-tick.C:
			// A write error means the server is gone; the reader sees it too.
			io.WriteString(conn, trickle[i:i+1])
		}
	}
}
