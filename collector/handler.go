// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/klauspost/compress/gzip"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Handler serves /metrics: the collector's families and a Prometheus registry's
// (process, Go, API, webhook and reload metrics), merged in name order.
//
// It answers in the text format (version 0.0.4), which every Prometheus
// accepts, whatever the Accept header prefers: the per-address lines are
// rendered once for all scrapes, and OpenMetrics would need a second
// rendering of each (it spells 1 as "1.0"). It compresses with gzip when the
// client accepts it, at the fastest level: the exposition repeats itself so
// much that level 1 already shrinks it about twentyfold.
type Handler struct {
	renderer *Renderer
	gatherer prometheus.Gatherer
	logger   log.Logger
}

// NewHandler returns the /metrics handler of c and g. The families of g must
// not share a name with the collector's: a scrape that finds one answers
// 500 (see ServeHTTP).
func NewHandler(c *Renderer, g prometheus.Gatherer, logger log.Logger) *Handler {
	return &Handler{renderer: c, gatherer: g, logger: logger}
}

var (
	textFormat = expfmt.NewFormat(expfmt.TypeTextPlain)
	gzipPool   = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed)
		return w
	}}
	bufPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}
)

// The scrape parameter scope selects a part of the exposition; without it
// a scrape has both. ScopeReplica is the registry's families: this
// process's own health (its store connection, backlog, reloads, requests,
// process and Go metrics). ScopeCluster is the collector's families: the
// watched addresses, the accounts and the alert counts, the state the
// replicas of a store share, which Prometheus needs once (docs/alerts.md).
const (
	ScopeParam   = "scope"
	ScopeReplica = "replica"
	ScopeCluster = "cluster"
)

// Scope is the scope a scrape asks for: "", ScopeReplica or ScopeCluster;
// an error for any other value, or for more than one.
func Scope(r *http.Request) (string, error) {
	values := r.URL.Query()[ScopeParam]
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", fmt.Errorf("more than one %s parameter", ScopeParam)
	case values[0] == ScopeReplica || values[0] == ScopeCluster:
		return values[0], nil
	}
	return "", fmt.Errorf("unknown %s %q: use %s or %s, or none for everything", ScopeParam, values[0], ScopeReplica, ScopeCluster)
}

// ServeHTTP writes one scrape, of the scope it asks for.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	scope, err := Scope(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var mfs []*dto.MetricFamily
	if scope != ScopeCluster {
		mfs, err = h.gatherer.Gather()
	}
	if err != nil {
		level.Error(h.logger).Log("msg", "Gathering metrics failed", "err", err)
		http.Error(w, "An error has occurred while gathering metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	if err := checkNames(mfs); err != nil {
		// Two families of one name are not an exposition Prometheus
		// accepts, and which one is right is a programming error to fix,
		// not to guess: fail the scrape as promhttp fails on a Gather
		// error, so `up` and the tests see it at once.
		level.Error(h.logger).Log("msg", "Gathered metrics collide with the collector's", "err", err)
		http.Error(w, "An error has occurred while gathering metrics:\n\n"+err.Error(), http.StatusInternalServerError)
		return
	}
	var rendered rendering
	if scope != ScopeReplica {
		rendered = h.renderer.render()
	}

	header := w.Header()
	header.Set("Content-Type", string(textFormat))
	header.Add("Vary", "Accept-Encoding")
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		header.Set("Content-Encoding", "gzip")
		gz := gzipPool.Get().(*gzip.Writer)
		gz.Reset(w)
		defer func() {
			if err := gz.Close(); err != nil {
				level.Debug(h.logger).Log("msg", "Finishing a scrape failed", "err", err)
			}
			gzipPool.Put(gz)
		}()
		out = gz
	}
	bw := bufPool.Get().(*bufio.Writer)
	bw.Reset(out)
	defer bufPool.Put(bw)
	err = h.write(bw, mfs, rendered)
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		// The scraper went away or timed out: nothing to answer any more.
		level.Debug(h.logger).Log("msg", "Writing a scrape failed", "err", err)
	}
}

// write merges the Prometheus registry's families (sorted by name, as Gather returns
// them) with the collector's.
func (h *Handler) write(w *bufio.Writer, mfs []*dto.MetricFamily, r rendering) error {
	enc := expfmt.NewEncoder(w, textFormat)
	i := 0
	for _, f := range families {
		for ; i < len(mfs) && mfs[i].GetName() < f.name; i++ {
			if err := enc.Encode(mfs[i]); err != nil {
				return err
			}
		}
		if err := r.writeFamily(w, f); err != nil {
			return err
		}
	}
	for ; i < len(mfs); i++ {
		if err := enc.Encode(mfs[i]); err != nil {
			return err
		}
	}
	return nil
}

// checkNames fails when a gathered family (sorted by name, as Gather
// returns them) has the name of one of the collector's families, written
// or not: the names are the collector's.
func checkNames(mfs []*dto.MetricFamily) error {
	i := 0
	for _, mf := range mfs {
		name := mf.GetName()
		for i < len(families) && families[i].name < name {
			i++
		}
		if i < len(families) && families[i].name == name {
			return fmt.Errorf("metric family %s is both gathered from the registry and rendered by the collector", name)
		}
	}
	return nil
}

// writeFamily writes f's header and lines, nothing when it has none.
func (r rendering) writeFamily(w *bufio.Writer, f *family) error {
	if f.index < 0 {
		lines := r.global[f]
		if len(lines) == 0 {
			return nil
		}
		w.Write(f.header)
		_, err := w.Write(lines)
		return err
	}
	started := false
	for _, b := range r.blocks {
		lines := b.lines(f)
		if len(lines) == 0 {
			continue
		}
		if !started {
			started = true
			w.Write(f.header)
		}
		if _, err := w.Write(lines); err != nil {
			return err
		}
	}
	return nil
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip.
func acceptsGzip(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		name, params, _ := strings.Cut(part, ";")
		name = strings.TrimSpace(name)
		if name != "gzip" && name != "*" {
			continue
		}
		q := 1.0
		if v, ok := strings.CutPrefix(strings.TrimSpace(params), "q="); ok {
			if parsed, err := strconv.ParseFloat(v, 64); err == nil {
				q = parsed
			}
		}
		return q > 0
	}
	return false
}
