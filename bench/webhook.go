// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
	"github.com/breach-exporter/breach_exporter/webhook"
)

const webhookPath = "/webhook"

// WebhookOptions size the throughput measurement.
type WebhookOptions struct {
	Clients   int // concurrent senders, each on its own keep-alive connection
	Requests  int // timed requests per round and server
	Rounds    int // rounds per server, alternating baseline and ours
	Addresses int // configured addresses the alerts are spread over
	// AllocRuns is how many requests the server-side allocation count
	// averages over.
	AllocRuns int
}

// WebhookResult is webhook throughput and allocation cost, ours and the
// baseline's.
type WebhookResult struct {
	Clients  int `json:"clients"`
	Requests int `json:"requests_per_round"`
	Rounds   int `json:"rounds"`
	// Accepted per second: the median round.
	OursPerSecond     float64   `json:"ours_per_second"`
	BaselinePerSecond float64   `json:"baseline_per_second"`
	OursRounds        []float64 `json:"ours_rounds_per_second"`
	BaselineRounds    []float64 `json:"baseline_rounds_per_second"`
	// Ratio is the median over slices of ours/baseline.
	Ratio float64 `json:"ratio"`
	// The durable floor: the baseline that also makes each alert durable
	// in the same journal before its 204 (startDurableReceiver). It is
	// what this machine's disk allows any receiver that keeps its promise;
	// DurableRatio is durable/baseline and OursToDurable ours/durable,
	// medians over slices like Ratio.
	DurablePerSecond float64   `json:"durable_per_second"`
	DurableRounds    []float64 `json:"durable_rounds_per_second"`
	DurableRatio     float64   `json:"durable_ratio"`
	OursToDurable    float64   `json:"ours_to_durable_ratio"`
	// The rate of every slice of every round (interleavedRound), in the
	// order sent; the ratios are the medians over slices of the ratio of
	// each slice to the same slice of the other.
	OursSlices       []float64 `json:"ours_slices_per_second"`
	DurableSlices    []float64 `json:"durable_slices_per_second"`
	BaselineSlices   []float64 `json:"baseline_slices_per_second"`
	DurableCPUMicros float64   `json:"durable_cpu_us_per_request"`
	// Accepted is what breach_webhook_requests_total{outcome="accepted"}
	// counted over every round, warm-up included; Sent is what was sent.
	Accepted int `json:"accepted"`
	Sent     int `json:"sent"`
	// Server side only (handler and listener's router, no sockets), from
	// testing.AllocsPerRun and the heap's byte count.
	OursServerAllocs     float64 `json:"ours_server_allocs_per_request"`
	OursServerBytes      float64 `json:"ours_server_bytes_per_request"`
	BaselineServerAllocs float64 `json:"baseline_server_allocs_per_request"`
	BaselineServerBytes  float64 `json:"baseline_server_bytes_per_request"`
	// The whole process during the timed rounds: both servers' HTTP stacks
	// and the client.
	OursProcessAllocs     float64 `json:"ours_process_allocs_per_request"`
	BaselineProcessAllocs float64 `json:"baseline_process_allocs_per_request"`
	// CPU time (user+system) of the whole process per timed request,
	// client included, in microseconds: a cross-check of the rates that
	// other load on the machine disturbs less than wall time.
	OursCPUMicros     float64 `json:"ours_cpu_us_per_request"`
	BaselineCPUMicros float64 `json:"baseline_cpu_us_per_request"`
}

// receiver is one of the servers MeasureWebhook compares.
type receiver string

const (
	receiverBare    receiver = "bare HMAC"
	receiverDurable receiver = "durable HMAC"
	receiverOurs    receiver = "exporter"
)

var receivers = []receiver{receiverBare, receiverDurable, receiverOurs}

// medianRatio is the median of a[i]/b[i], each pair having run next to
// each other (interleavedRound) so that load from elsewhere hit them
// alike.
func medianRatio(a, b []float64) float64 {
	ratios := make([]float64, len(a))
	for i := range ratios {
		ratios[i] = a[i] / b[i]
	}
	return medianFloat(ratios)
}

// signedAlert is one pre-built request body and its signature header, so
// the clients spend no time building them.
type signedAlert struct {
	body      []byte
	signature string
}

// signedAlerts makes n distinct alert.created bodies (the summary carries a
// sequence number, so none is a duplicate) for the given addresses.
func signedAlerts(n int, emails []string, secret []byte) ([]signedAlert, error) {
	out := make([]signedAlert, n)
	observed := time.Now().UTC().Add(-time.Minute).Format(sim.ObservedAtLayout)
	for i := range out {
		body, err := json.Marshal(sim.Alert{
			Event:    breach.EventAlertCreated,
			Severity: breach.Warning,
			Address:  emails[i%len(emails)],
			Source:   "combolist",
			Summary:  fmt.Sprintf("combolist: 1 new breach database(s) #%d", i),
			Delta: sim.Delta{PreviousCount: 2, NewCount: 3, NewSourceDBs: []string{"combo-2026-01"},
				NewlyExposedFields: []string{"password"}},
			ObservedAt:   observed,
			DashboardURL: "https://breach-monitor.example/dashboard/addresses/" + emails[i%len(emails)],
		})
		if err != nil {
			return nil, err
		}
		out[i] = signedAlert{body: body, signature: sim.Sign(secret, body)}
	}
	return out, nil
}

// bareHMACHandler is the baseline: the floor cost of the protocol. It reads
// the body, checks the signature and answers 204, nothing else.
func bareHMACHandler(secret []byte) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, status := verifyHMAC(secret, r); status != 0 {
			w.WriteHeader(status)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// durableHMACHandler is the baseline that also keeps its promise: after
// the signature check it commits a record of the body to j and answers 204
// once the record is synced, as the exporter's receiver does. It parses
// nothing, so the record's address, source and severity are fixed; its
// digest is the body's.
func durableHMACHandler(secret []byte, j *persist.Journal) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, status := verifyHMAC(secret, r)
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		now := time.Now()
		a := watchlist.AcceptedAlert{Digest: sha256.Sum256(body), At: now, Address: "durable@example.com",
			Delta: watchlist.AlertDelta{Source: "combolist", Severity: breach.Warning, ObservedAt: now}}
		if err := j.Commit(a, func() {}); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

// verifyHMAC reads r's body and checks its signature; status is 0 when
// both worked, else the answer to give.
func verifyHMAC(secret []byte, r *http.Request) (body []byte, status int) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, http.StatusBadRequest
	}
	if !hmac.Equal([]byte(sim.Sign(secret, body)), []byte(r.Header.Get(webhook.SignatureHeader))) {
		return nil, http.StatusUnauthorized
	}
	return body, 0
}

// serveLoopback serves srv on a fresh 127.0.0.1 port until stop is called.
func serveLoopback(srv *http.Server) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		<-done
	}, nil
}

// sendAll posts alerts from clients goroutines sharing one keep-alive
// transport and returns how long that took. Any answer but 204 fails it.
func sendAll(url string, alerts []signedAlert, clients int) (time.Duration, error) {
	transport := &http.Transport{MaxIdleConnsPerHost: clients, DisableCompression: true}
	defer transport.CloseIdleConnections()
	return sendAllWith(&http.Client{Transport: transport}, url, alerts, clients)
}

// sendAllWith is sendAll on client's connections.
func sendAllWith(client *http.Client, url string, alerts []signedAlert, clients int) (time.Duration, error) {
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(alerts) || failed.Load() != nil {
					return
				}
				if err := post(client, url, alerts[i]); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := failed.Load(); err != nil {
		return elapsed, *err
	}
	return elapsed, nil
}

func post(client *http.Client, url string, a signedAlert) error {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(a.body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, a.signature)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("webhook answered %d", resp.StatusCode)
	}
	return nil
}

// webhookTarget is one server under test.
type webhookTarget struct {
	url     string
	handler http.Handler // what the listener serves, for in-process use
	stop    func()
	counted func() (int, error) // accepted so far; nil for the baseline
	// exposition is the exporter's /metrics, text format; nil for the
	// baseline.
	exposition func() []byte
}

// webhookRounds is what every webhook intake measurement shares: one set
// of credentials, the addresses, the signed alerts (a warm-up of 4 per
// client, then the timed ones) and the simulator the exporters poll.
type webhookRounds struct {
	creds       credentials
	emails      []string
	warm, timed []signedAlert
	clients     int
	api         *simulatorAPI
}

func newWebhookRounds(clients, requests, addresses int) (*webhookRounds, error) {
	w := &webhookRounds{creds: newCredentials(), emails: benchEmails(addresses), clients: clients}
	alerts, err := signedAlerts(requests+4*clients, w.emails, w.creds.secret)
	if err != nil {
		return nil, err
	}
	w.timed, w.warm = alerts[:requests], alerts[requests:]
	if w.api, err = newSimulatorAPI(w.creds, w.emails, nil); err != nil {
		return nil, err
	}
	return w, nil
}

func (w *webhookRounds) stop() { w.api.stop() }

// sent is how many alerts a round sends, warm-up included.
func (w *webhookRounds) sent() int { return len(w.warm) + len(w.timed) }

// round times one round against target; accepted is what it counted,
// 0 for a target that does not count.
func (w *webhookRounds) round(target webhookTarget) (r roundResult, accepted int, err error) {
	r, err = timedRound(target.url, w.warm, w.timed, w.clients)
	if err == nil && target.counted != nil {
		accepted, err = target.counted()
	}
	return r, accepted, err
}

// eachRound runs run for every variant rounds times, rotating which goes
// first, so that none always inherits another's garbage or warm caches,
// and back to back, so that load from elsewhere hits them alike.
func eachRound(rounds, variants int, run func(variant int) error) error {
	for round := range rounds {
		for i := range variants {
			if err := run((round + i) % variants); err != nil {
				return err
			}
		}
	}
	return nil
}

// MeasureWebhook compares accepted signed alerts per second through the
// exporter's real receiver (webhook.NewServer around the exporter's handler,
// the exporter running against the simulator, its journal on: each 204
// waits for an fsync, shared by the requests that queued during the last
// one) with the bare HMAC server and the durable floor, on loopback, in
// rounds whose slices alternate (interleavedRound).
func MeasureWebhook(o WebhookOptions) (WebhookResult, error) {
	if o.Clients < 1 || o.Requests < 1 || o.Rounds < 1 || o.Addresses < 1 || o.AllocRuns < 1 {
		return WebhookResult{}, errors.New("every webhook option must be at least 1")
	}
	res := WebhookResult{Clients: o.Clients, Requests: o.Requests, Rounds: o.Rounds}
	w, err := newWebhookRounds(o.Clients, o.Requests, o.Addresses)
	if err != nil {
		return res, err
	}
	defer w.stop()

	rates, slices := map[receiver][]float64{}, map[receiver][]float64{}
	for range o.Rounds {
		if err := w.webhookRound(&res, rates, slices, 1/float64(o.Rounds)); err != nil {
			return res, err
		}
	}
	res.OursRounds, res.BaselineRounds, res.DurableRounds = rates[receiverOurs], rates[receiverBare], rates[receiverDurable]
	res.OursPerSecond, res.BaselinePerSecond = medianFloat(res.OursRounds), medianFloat(res.BaselineRounds)
	res.DurablePerSecond = medianFloat(res.DurableRounds)
	res.OursSlices, res.BaselineSlices, res.DurableSlices = slices[receiverOurs], slices[receiverBare], slices[receiverDurable]
	res.Ratio = medianRatio(res.OursSlices, res.BaselineSlices)
	res.DurableRatio = medianRatio(res.DurableSlices, res.BaselineSlices)
	res.OursToDurable = medianRatio(res.OursSlices, res.DurableSlices)

	res.OursServerAllocs, res.OursServerBytes, err = ourServerAllocs(w.emails, w.creds, o.AllocRuns)
	if err != nil {
		return res, err
	}
	bareAlerts, err := signedAlerts(2*(o.AllocRuns+1), w.emails, w.creds.secret)
	if err != nil {
		return res, err
	}
	res.BaselineServerAllocs, res.BaselineServerBytes, err = serverAllocs(bareHMACHandler(w.creds.secret), bareAlerts)
	return res, err
}

// webhookRound runs one round: the three receivers at once, their slices
// interleaved (interleavedRound); it adds each one's rate to rates, its
// slices' to slices and its costs to res, each round weighing share.
func (w *webhookRounds) webhookRound(res *WebhookResult, rates, slices map[receiver][]float64, share float64) error {
	targets := make([]webhookTarget, 0, len(receivers))
	defer func() {
		for _, t := range targets {
			t.stop()
		}
	}()
	sliced := make([]*slicedTarget, 0, len(receivers))
	for _, kind := range receivers {
		var target webhookTarget
		var err error
		switch kind {
		case receiverOurs:
			target, err = startOurReceiver(webhookSetup(w.api.baseURL, w.emails), w.creds)
		case receiverDurable:
			target, err = startDurableReceiver(w.creds.secret)
		default:
			target, err = startBareReceiver(w.creds.secret)
		}
		if err != nil {
			return fmt.Errorf("%s receiver: %w", kind, err)
		}
		targets = append(targets, target)
		t := newSlicedTarget(target.url, w.clients)
		defer t.close()
		sliced = append(sliced, t)
	}
	results, err := interleavedRound(sliced, w.warm, w.timed, w.clients)
	if err != nil {
		return err
	}
	for i, kind := range receivers {
		if counted := targets[i].counted; counted != nil {
			accepted, err := counted()
			if err != nil {
				return fmt.Errorf("%s receiver: %w", kind, err)
			}
			res.Accepted += accepted
			res.Sent += w.sent()
		}
		rates[kind] = append(rates[kind], results[i].rate)
		slices[kind] = append(slices[kind], results[i].sliceRates...)
		res.addRound(kind, results[i].roundResult, share)
	}
	return nil
}

// addRound adds a round of kind to the means of allocations and CPU per
// request, each round weighing share.
func (res *WebhookResult) addRound(kind receiver, round roundResult, share float64) {
	switch kind {
	case receiverOurs:
		res.OursProcessAllocs += round.allocs * share
		res.OursCPUMicros += round.cpuMicros * share
	case receiverDurable:
		res.DurableCPUMicros += round.cpuMicros * share
	default:
		res.BaselineProcessAllocs += round.allocs * share
		res.BaselineCPUMicros += round.cpuMicros * share
	}
}

// roundResult is one timed round: accepted requests per second, and
// process-wide allocations and CPU microseconds per request.
type roundResult struct {
	rate, allocs, cpuMicros float64
}

// timedRound warms the connections up, then times the real requests.
func timedRound(url string, warm, timed []signedAlert, clients int) (roundResult, error) {
	if _, err := sendAll(url, warm, clients); err != nil {
		return roundResult{}, fmt.Errorf("warm-up: %w", err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cpuBefore := cpuTime()
	elapsed, err := sendAll(url, timed, clients)
	cpu := cpuTime() - cpuBefore
	runtime.ReadMemStats(&after)
	if err != nil {
		return roundResult{}, err
	}
	n := float64(len(timed))
	return roundResult{
		rate:      n / elapsed.Seconds(),
		allocs:    float64(after.Mallocs-before.Mallocs) / n,
		cpuMicros: float64(cpu.Microseconds()) / n,
	}, nil
}

func startBareReceiver(secret []byte) (webhookTarget, error) {
	mux := http.NewServeMux()
	mux.Handle(webhookPath, bareHMACHandler(secret))
	url, stop, err := serveLoopback(&http.Server{Handler: mux})
	return webhookTarget{url: url + webhookPath, stop: stop}, err
}

// startDurableReceiver serves durableHMACHandler with a journal in a
// fresh folder on the machine's disk, as the exporter's is.
func startDurableReceiver(secret []byte) (webhookTarget, error) {
	dir, err := os.MkdirTemp("", "breach-bench-durable-")
	if err != nil {
		return webhookTarget{}, err
	}
	reg := prometheus.NewRegistry()
	store, err := persist.Open(dir, reg, log.NewNopLogger())
	if err != nil {
		os.RemoveAll(dir)
		return webhookTarget{}, err
	}
	j, err := store.OpenJournal(persist.JournalOptions{Registerer: reg, Logger: log.NewNopLogger(), MaxRecordBytes: config.MaxWebhookBodyBytes})
	if err == nil {
		_, err = j.Replay(0, func(watchlist.AcceptedAlert) {}) // a fresh folder: starts the writer
	}
	if err != nil {
		store.Close()
		os.RemoveAll(dir)
		return webhookTarget{}, err
	}
	mux := http.NewServeMux()
	mux.Handle(webhookPath, durableHMACHandler(secret, j))
	url, stopServer, err := serveLoopback(&http.Server{Handler: mux})
	stop := func() {
		if stopServer != nil {
			stopServer()
		}
		j.Close()
		store.Close()
		os.RemoveAll(dir)
	}
	if err != nil {
		stop()
		return webhookTarget{}, err
	}
	return webhookTarget{url: url + webhookPath, stop: stop}, nil
}

// webhookSetup is the exporter the webhook rounds run: the receiver on, its
// journal syncing every accepted alert, at the usual budget.
func webhookSetup(baseURL string, emails []string) exporterSetup {
	return exporterSetup{baseURL: baseURL, emails: emails, requestsPerMinute: 55, webhook: true, persist: true}
}

// startOurReceiver runs a whole exporter, scheduler included, against the
// simulator, with its receiver on its own listener as main sets it up.
func startOurReceiver(setup exporterSetup, creds credentials) (webhookTarget, error) {
	r, err := newExporter(setup, creds)
	if err != nil {
		return webhookTarget{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		r.exp.Run(ctx)
	}()
	srv := webhook.NewServer(r.exp.WebhookHandler(), webhookPath)
	url, stopServer, err := serveLoopback(srv)
	stop := func() {
		if stopServer != nil {
			stopServer()
		}
		cancel()
		<-ran
		r.close()
	}
	if err != nil {
		stop()
		return webhookTarget{}, err
	}
	counted := func() (int, error) {
		v, _, err := sampleValue(r.exp.MetricsHandler(r.reg), "breach_webhook_requests_total", map[string]string{"outcome": "accepted"})
		return int(v), err
	}
	exposition := func() []byte {
		rec := httptest.NewRecorder()
		r.exp.MetricsHandler(r.reg).ServeHTTP(rec, scrapeRequest())
		return rec.Body.Bytes()
	}
	return webhookTarget{url: url + webhookPath, handler: srv.Handler, stop: stop, counted: counted, exposition: exposition}, nil
}

// ourServerAllocs counts the allocations of one accepted alert in the
// exporter's receiver (router, handler, counters, log line, dedup and the
// scheduler's Refresh), without sockets. The scheduler is not running, so
// its re-planning after the Refresh is not included.
func ourServerAllocs(emails []string, creds credentials, runs int) (allocs, bytesPerRequest float64, err error) {
	r, err := newExporter(exporterSetup{baseURL: "http://127.0.0.1:1/api/v1", emails: emails, requestsPerMinute: 55, webhook: true, persist: true}, creds)
	if err != nil {
		return 0, 0, err
	}
	defer r.close()
	alerts, err := signedAlerts(2*(runs+1), emails, creds.secret)
	if err != nil {
		return 0, 0, err
	}
	return serverAllocs(webhook.NewServer(r.exp.WebhookHandler(), webhookPath).Handler, alerts)
}

// serverAllocs serves half of alerts under testing.AllocsPerRun and the
// other half under a heap byte count; requests and writers are built
// beforehand so only the handler's own allocations are counted.
func serverAllocs(h http.Handler, alerts []signedAlert) (allocs, bytesPerRequest float64, err error) {
	type call struct {
		req *http.Request
		w   *statusWriter
	}
	calls := make([]call, len(alerts))
	for i, a := range alerts {
		req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1"+webhookPath, bytes.NewReader(a.body))
		if err != nil {
			return 0, 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(webhook.SignatureHeader, a.signature)
		calls[i] = call{req: req, w: &statusWriter{header: http.Header{}}}
	}
	next := 0
	serve := func() {
		c := calls[next]
		next++
		h.ServeHTTP(c.w, c.req)
	}
	half := len(calls) / 2
	allocs = testing.AllocsPerRun(half-1, serve) // it calls serve once more to warm up

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for next < len(calls) {
		serve()
	}
	runtime.ReadMemStats(&after)
	bytesPerRequest = float64(after.TotalAlloc-before.TotalAlloc) / float64(len(calls)-half)

	for i, c := range calls {
		if c.w.status != http.StatusNoContent {
			return 0, 0, fmt.Errorf("request %d answered %d", i, c.w.status)
		}
	}
	return allocs, bytesPerRequest, nil
}

// statusWriter keeps the status and nothing else.
type statusWriter struct {
	header http.Header
	status int
}

func (w *statusWriter) Header() http.Header { return w.header }

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return len(p), nil
}

func medianFloat(values []float64) float64 {
	if len(values) == 0 {
		return 0
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// benchEmails are the addresses the simulator and the exporter share.
func benchEmails(n int) []string {
	emails := make([]string, n)
	for i := range emails {
		emails[i] = fmt.Sprintf("user%06d@example.com", i)
	}
	return emails
}
