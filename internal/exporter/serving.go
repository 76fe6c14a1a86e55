// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
)

// One copy in Prometheus: with a store, Prometheus scrapes the cluster's
// series (collector.ScopeCluster) through one stable target, the Service,
// whichever replica answers. Every replica answers with the state of one,
// the serving replica: the one holding the store's lease serves its own
// state and records the stream ID it held (sharedstore.Serving); the others
// pass the scrape to it. When it cannot be reached (killed, cut off) or
// nobody holds the lease, a replica serves its own state only once it is
// synced and holds at least the stream ID last served, so that no counter
// Prometheus read goes back (a counter that drops reads as a reset, and
// increase() then pages for the whole count). Why not a redirect: a 302
// sends Prometheus to a pod address it may not reach, and past the web
// listener's authentication a second time.

const (
	// servingLease is how long the serving replica's lease lasts without
	// a renewal (one every convergeEvery): a killed replica's scrapes go
	// elsewhere within it; a clean stop gives the lease back at once.
	servingLease = 5 * time.Second
	// proxiedHeader marks a scrape one replica passed to another: the
	// other answers it itself, so a lease that moved meanwhile never
	// sends a scrape round in circles.
	proxiedHeader = "X-Breach-Exporter-Proxied"
	// scrapeTimeoutHeader is Prometheus' own: how long it waits.
	scrapeTimeoutHeader = "X-Prometheus-Scrape-Timeout-Seconds"
	// defaultScrapeTimeout is Prometheus' default, for a scrape without
	// the header; maxScrapeTimeout bounds what a header may ask.
	defaultScrapeTimeout = 10 * time.Second
	maxScrapeTimeout     = time.Minute
	// dialTimeout bounds the connection to the serving replica: a killed
	// pod's address does not answer at all.
	dialTimeout = time.Second
	// catchUpPoll is how often a replica that serves in the serving
	// replica's place looks whether it caught up with what was served.
	catchUpPoll = 10 * time.Millisecond
)

// errStoreDown is the answer of a store the client already knows is down.
var errStoreDown = errors.New("the store is down")

// serving is a replica's side of the lease.
type serving struct {
	url    string // where the others reach this replica's /metrics
	client *http.Client

	mu      sync.Mutex
	holding bool                // this replica held the lease at its last renewal
	renewed time.Time           // when the store last confirmed it
	last    sharedstore.Serving // what the store said last
}

func newServing(url string) *serving {
	return &serving{url: url, client: &http.Client{
		// Pod addresses: no proxy from the environment, and no redirect
		// followed (a replica never answers one).
		Transport: &http.Transport{
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: dialTimeout}).DialContext,
			MaxIdleConnsPerHost: 2,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true, // the answer is passed on as it came
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// holds reports whether this replica holds the lease: renewed within it.
func (s *serving) holds() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding && time.Since(s.renewed) < servingLease
}

// renewServing renews or takes the lease (a synced replica only; one
// that is not gives it back), every convergeEvery until ctx ends.
func (r *replicas) renewServing(ctx context.Context) {
	t := time.NewTicker(convergeEvery)
	defer t.Stop()
	for {
		// A store that does not answer: the lease runs out by itself,
		// and the next round tries again.
		_, _ = r.holdServing(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// holdServing is one renewal; it returns what the store says.
func (r *replicas) holdServing(ctx context.Context) (sharedstore.Serving, error) {
	synced := r.sync.synced.Load()
	if !synced && r.serving.holds() {
		r.releaseServing(ctx)
	}
	rctx, cancel := context.WithTimeout(ctx, convergeEvery)
	defer cancel()
	sv, err := r.shared.HoldServing(rctx, r.serving.url, servingLease, synced)
	if err != nil {
		return sv, err
	}
	holding := sv.Replica == r.name && sv.URL == r.serving.url
	r.serving.mu.Lock()
	if holding && !r.serving.holding {
		level.Info(r.logger).Log("msg", "This replica serves the cluster's series now (scope=cluster)")
	}
	r.serving.holding, r.serving.last = holding, sv
	if holding {
		r.serving.renewed = time.Now()
	}
	r.serving.mu.Unlock()
	return sv, nil
}

// releaseServing gives the lease back, at a clean stop or when this
// replica is no longer synced: another takes it within a second. The
// store releases it only if it is this replica's, which it may be though
// this replica has not heard so yet (a renewal whose answer was cut off).
func (r *replicas) releaseServing(ctx context.Context) {
	r.serving.mu.Lock()
	r.serving.holding = false
	r.serving.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), convergeEvery)
	defer cancel()
	if err := r.shared.ReleaseServing(ctx, r.serving.url); err != nil {
		level.Debug(r.logger).Log("msg", "Giving the serving lease back failed; it runs out by itself", "err", err)
	}
}

// clusterScope answers scope=cluster scrapes as the top of this file says,
// and passes every other to local.
func (e *Exporter) clusterScope(local http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		scope, err := collector.Scope(req)
		if err != nil || scope != collector.ScopeCluster || e.replicas == nil {
			// Without a store this process's state is the cluster's.
			local.ServeHTTP(w, req)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), scrapeBudget(req))
		defer cancel()
		e.replicas.serveCluster(ctx, w, req.WithContext(ctx), local)
	})
}

// scrapeBudget is the time a scrape may take here: nine tenths of what
// Prometheus waits, leaving it the answer's transfer.
func scrapeBudget(req *http.Request) time.Duration {
	d := defaultScrapeTimeout
	if s, err := strconv.ParseFloat(req.Header.Get(scrapeTimeoutHeader), 64); err == nil && s > 0 {
		d = min(time.Duration(s*float64(time.Second)), maxScrapeTimeout)
	}
	return d * 9 / 10
}

func (r *replicas) serveCluster(ctx context.Context, w http.ResponseWriter, req *http.Request, local http.Handler) {
	var sv sharedstore.Serving
	err := errStoreDown
	if r.shared.Up() {
		// A quarter of the budget at most: a store that hangs must leave
		// time to serve.
		deadline, _ := ctx.Deadline()
		sctx, cancel := context.WithTimeout(ctx, time.Until(deadline)/4)
		sv, err = r.holdServing(sctx)
		cancel()
	}
	if err != nil {
		// The store does not answer here: the serving replica it named
		// last may still answer.
		r.serving.mu.Lock()
		sv = r.serving.last
		r.serving.mu.Unlock()
	}
	if sv.Replica != r.name && sv.URL != "" && req.Header.Get(proxiedHeader) == "" && r.proxy(ctx, w, req, sv.URL) {
		return
	}
	if err != nil {
		// Nor does it: with the store away nobody adds to the history,
		// so a synced replica's state is the cluster's.
		if !r.sync.synced.Load() {
			http.Error(w, "Not serving the cluster's series: this replica is not synced and the store does not answer.", http.StatusServiceUnavailable)
			return
		}
		local.ServeHTTP(w, req)
		return
	}
	if err := r.caughtUp(ctx, sv.Served); err != nil {
		http.Error(w, "Not serving the cluster's series: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	if sv.Replica != r.name {
		local.ServeHTTP(w, req)
		return
	}
	local.ServeHTTP(&recordingWriter{ResponseWriter: w, record: func() { r.recordServed(ctx) }}, req)
}

// caughtUp waits until this replica is synced and has applied served,
// the stream ID the last scrape of the cluster's series held, or ctx ends.
func (r *replicas) caughtUp(ctx context.Context, served string) error {
	t := time.NewTicker(catchUpPoll)
	defer t.Stop()
	for {
		synced := r.sync.synced.Load()
		if synced && !sharedstore.Before(r.position(), served) {
			return nil
		}
		select {
		case <-ctx.Done():
			if !synced {
				return errors.New("this replica is not synced with the store yet")
			}
			return fmt.Errorf("this replica has not caught up with the stream ID last served (%s) yet", served)
		case <-t.C:
		}
	}
}

// recordServed records this replica's position as served. It runs once
// the scrape rendered, before its first byte goes out: the position then
// holds at least what the scrape shows (it only moves forward).
func (r *replicas) recordServed(ctx context.Context) {
	if p := r.position(); p != "" {
		if err := r.shared.RecordServed(ctx, p); err != nil {
			level.Debug(r.logger).Log("msg", "Recording the stream ID served failed", "err", err)
		}
	}
}

// recordingWriter calls record once, before the first header or byte.
type recordingWriter struct {
	http.ResponseWriter
	record func()
	once   sync.Once
}

func (w *recordingWriter) WriteHeader(code int) {
	w.once.Do(w.record)
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.once.Do(w.record)
	return w.ResponseWriter.Write(b)
}

// proxy passes the scrape to the serving replica at url and copies its
// answer; false, having written nothing, when it gave no 200 within half
// the scrape's budget (the other half is left to serving here).
func (r *replicas) proxy(ctx context.Context, w http.ResponseWriter, req *http.Request, url string) bool {
	deadline, _ := ctx.Deadline()
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	headers := time.AfterFunc(time.Until(deadline)/2, cancel)
	out, err := http.NewRequestWithContext(pctx, http.MethodGet, url+"?"+collector.ScopeParam+"="+collector.ScopeCluster, nil)
	if err != nil {
		headers.Stop()
		return false
	}
	// Not the scrape's Authorization: the URL comes from the store, which
	// anyone with write access to it can point elsewhere, and Prometheus'
	// credentials must not follow it there. With web auth on, the serving
	// replica refuses the passed scrape and this one serves in its place
	// (caught up, as below).
	for _, h := range []string{"Accept-Encoding", "User-Agent"} {
		if v := req.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	out.Header.Set(proxiedHeader, "1")
	out.Header.Set(scrapeTimeoutHeader, strconv.FormatFloat(time.Until(deadline).Seconds(), 'f', 3, 64))
	resp, err := r.serving.client.Do(out)
	if !headers.Stop() || err != nil {
		if err == nil {
			resp.Body.Close()
		}
		level.Debug(r.logger).Log("msg", "The serving replica did not answer a scrape in time; serving this one's state", "url", url, "err", err)
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		level.Debug(r.logger).Log("msg", "The serving replica refused a scrape; serving this one's state", "url", url, "status", resp.StatusCode)
		return false
	}
	for _, h := range []string{"Content-Type", "Content-Encoding", "Vary"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(http.StatusOK)
	if _, err := io.Copy(w, resp.Body); err != nil {
		level.Debug(r.logger).Log("msg", "Passing on the serving replica's scrape failed", "err", err)
	}
	return true
}
