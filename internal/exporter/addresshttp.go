// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/go-kit/log/level"
	commoncfg "github.com/prometheus/common/config"
	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/addrhttp"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
)

// httpSource is one addresses_http entry in force: its Source, whose last
// good list outlives a reload that keeps its URL, and the goroutine that
// fetches it every refresh_interval.
type httpSource struct {
	src *addrhttp.Source
	set addrhttp.Settings
	// key is what a reload compares: the entry, the owner labels and
	// whether errors may show addresses. Another key is another client
	// and another goroutine.
	key string
	// cancel stops the goroutine and done says it returned; nil while
	// none runs.
	cancel context.CancelFunc
	done   chan struct{}
	// logs paces the log lines of its failures, by reason: a source that
	// fails every second says so once a minute (its failures counter
	// counts each).
	logs *ratelog.Limiter
}

// httpSources are the sources in force, by URL (one URL is one source in
// the whole config), guarded by their own lock: Run starts their
// goroutines without waiting for a reload or a re-read of the files.
type httpSources struct {
	mu      sync.Mutex
	byURL   map[string]*httpSource
	changed chan struct{} // a fetch changed a list: sync the watchlist
}

// stop stops the source's goroutine, waits for it (a fetch ends with its
// context) and closes the client's idle connections, which would
// otherwise outlive it until their timeout.
func (hs *httpSource) stop() {
	if hs.cancel == nil {
		return
	}
	hs.cancel()
	<-hs.done
	hs.cancel = nil
	hs.set.Client.CloseIdleConnections()
}

// configureHTTP makes the HTTP sources those of bundle: a source whose
// entry is gone stops; a new one, or one whose settings changed, is
// fetched at once (all such in parallel, each within its timeout), so
// that the sync that follows has its list; then each gets its goroutine
// once Run has started. Called with syncing held, or before anything runs.
func (e *Exporter) configureHTTP(bundle *config.Bundle) {
	cfg := bundle.Config
	e.http.mu.Lock()
	defer e.http.mu.Unlock()
	inForce := map[string]bool{}
	var shown []*addrhttp.Source
	var fresh []*httpSource
	for _, a := range cfg.AccountsInForce() {
		for i := range a.AddressesHTTP {
			h := &a.AddressesHTTP[i]
			inForce[h.URL] = true
			hs := e.http.byURL[h.URL]
			isNew := hs == nil
			if isNew {
				hs = &httpSource{src: addrhttp.NewSource(h.URL), logs: ratelog.New(time.Minute, nil)}
				e.http.byURL[h.URL] = hs
			}
			shown = append(shown, hs.src)
			if key := settingsKey(h, cfg); key != hs.key {
				hs.stop()
				if e.settle(hs, h, cfg) {
					hs.key = key
					fresh = append(fresh, hs)
				}
			}
			if isNew {
				e.seed(hs)
			}
		}
	}
	urls := make([]string, 0, len(inForce))
	for url, hs := range e.http.byURL {
		if !inForce[url] {
			hs.stop()
			delete(e.http.byURL, url)
			continue
		}
		urls = append(urls, url)
	}
	if e.folder != nil {
		if err := e.folder.KeepSourceLists(urls); err != nil {
			level.Warn(e.logger).Log("msg", "Could not remove the saved list of an HTTP source of addresses no longer configured", "err", err)
		}
	}
	e.httpMetrics.Show(shown)
	e.fetchNow(fresh)
	e.startHTTP()
}

// settle gives hs the settings of the entry h: a new client, and no
// validators of the answer before (the parse may differ now). False when
// the client cannot be built (the load checked what it needs).
func (e *Exporter) settle(hs *httpSource, h *config.AddressesHTTP, cfg *config.Config) bool {
	client, err := commoncfg.NewClientFromConfig(h.ClientConfig(), "addresses_http", commoncfg.WithUserAgent(e.opts.UserAgent))
	if err != nil {
		level.Error(e.logger).Log("msg", "HTTP source of addresses not usable; its last good list stays", "url", h.URL, "err", err)
		return false
	}
	hs.set = addrhttp.Settings{
		Client:    client,
		Timeout:   h.Timeout(),
		Interval:  h.Interval(),
		MaxShrink: h.Shrink(),
		Allowed:   cfg.OwnerLabels,
		Show:      cfg.Labels.ShowsAddresses(),
	}
	hs.src.Forget()
	return true
}

// seed starts a new source from the list it last gave, which the state
// folder keeps (reportHTTP): a start while the source fails keeps its
// addresses and their state rather than dropping them until it answers.
func (e *Exporter) seed(hs *httpSource) {
	if e.folder == nil || hs.key == "" {
		return
	}
	url := hs.src.URL()
	body, err := e.folder.LoadSourceList(url)
	if err == nil && body != nil {
		err = hs.src.Seed(body, hs.set)
	}
	if err != nil {
		level.Warn(e.logger).Log("msg", "The saved list of an HTTP source of addresses is not usable; the source starts from its first fetch", "url", url, "err", err)
	}
}

// settingsKey is the settings of the entry h under cfg, as compared.
func settingsKey(h *config.AddressesHTTP, cfg *config.Config) string {
	entry, _ := yaml.Marshal(h) // a struct of plain fields: never fails
	return string(entry) + "\x00" + strings.Join(cfg.OwnerLabels, ",") + "\x00" + string(cfg.Labels.Address)
}

// fetchNow fetches each of sources once, in parallel, and waits for all:
// each within its timeout (config.MaxHTTPTimeout at most).
func (e *Exporter) fetchNow(sources []*httpSource) {
	var wg sync.WaitGroup
	for _, hs := range sources {
		wg.Go(func() {
			e.reportHTTP(hs, hs.src.Fetch(context.Background(), hs.set, e.clock.Now()))
		})
	}
	wg.Wait()
}

// startHTTP starts the goroutine of each source that has none, once Run
// has started: its first fetch one interval after the one configureHTTP
// made. With e.http.mu held.
func (e *Exporter) startHTTP() {
	e.mu.Lock()
	ctx := e.runCtx
	e.mu.Unlock()
	if ctx == nil || ctx.Err() != nil {
		return
	}
	for _, hs := range e.http.byURL {
		if hs.cancel != nil || hs.key == "" {
			continue
		}
		var runCtx context.Context
		runCtx, hs.cancel = context.WithCancel(ctx)
		hs.done = make(chan struct{})
		src, set, done := hs.src, hs.set, hs.done
		report := func(r addrhttp.Result) { e.reportHTTP(hs, r) }
		e.running.Add(1)
		go func() {
			defer e.running.Done()
			defer close(done)
			src.Run(runCtx, set, set.Interval, e.clock.Now, report)
		}()
	}
}

// reportHTTP logs what a fetch found wrong and, when it changed a list,
// asks for a sync of the watchlist without waiting for it.
func (e *Exporter) reportHTTP(hs *httpSource, r addrhttp.Result) {
	if r.Err != nil {
		if suppressed, ok := hs.logs.Allow(r.Err.Reason); ok {
			level.Warn(e.logger).Log("msg", "HTTP source of addresses failed; its last good list stays", "reason", r.Err.Reason, "err", r.Err, ratelog.SuppressedKey, suppressed)
		}
	}
	// Once per content: what a change brought, not every fetch.
	for _, l := range r.Invalid {
		level.Warn(e.logger).Log("msg", "Skipped an entry of an HTTP source of addresses", "url", l.File, "line", l.Line, "reason", l.Reason)
	}
	if r.Body != nil && e.folder != nil {
		if err := e.folder.SaveSourceList(hs.src.URL(), r.Body); err != nil {
			level.Warn(e.logger).Log("msg", "Could not save the list of an HTTP source of addresses; a start while it fails begins from an older one, or none", "url", hs.src.URL(), "err", err)
		}
	}
	if r.Changed {
		select {
		case e.http.changed <- struct{}{}:
		default: // a sync is asked for already; it reads every list
		}
	}
}

// syncOnHTTPChange syncs the watchlist whenever a fetch changed a list,
// until ctx ends. The sync runs apart, as a re-read of the files does.
func (e *Exporter) syncOnHTTPChange(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.http.changed:
		}
		_ = apart(ctx, e.syncHTTP)
	}
}

// syncHTTP syncs the watchlist to the lists in force.
func (e *Exporter) syncHTTP() {
	e.syncing.Lock()
	defer e.syncing.Unlock()
	start := time.Now()
	e.syncWatchlist(e.config.Load())
	level.Info(e.logger).Log("msg", "An HTTP source of addresses changed", "addresses", e.watchlist.Len(), "duration", time.Since(start))
}

// httpMergers are the HTTP sources of account a, in listed order.
func (e *Exporter) httpMergers(a *config.Account) []merger {
	e.http.mu.Lock()
	defer e.http.mu.Unlock()
	var out []merger
	for _, h := range a.AddressesHTTP {
		if hs := e.http.byURL[h.URL]; hs != nil {
			out = append(out, hs.src)
		}
	}
	return out
}

// closeHTTP closes the HTTP sources' idle connections, at the end: their
// goroutines ended with Run.
func (e *Exporter) closeHTTP() {
	e.http.mu.Lock()
	defer e.http.mu.Unlock()
	for _, hs := range e.http.byURL {
		hs.stop()
		if hs.set.Client != nil {
			hs.set.Client.CloseIdleConnections()
		}
	}
}
