// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/breach-exporter/breach_exporter/internal/ackweb"
)

// reloader is the part of the exporter the admin endpoints need.
type reloader interface {
	Reload(ctx context.Context) error
}

// untilShutdown stops a /-/reload request waiting for its reload when the
// program ends, so the listener's graceful shutdown never waits for one.
type untilShutdown struct {
	r        reloader
	shutdown context.Context
}

func (u untilShutdown) Reload(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(u.shutdown, cancel)()
	return u.r.Reload(ctx)
}

// readiness is what /-/ready answers. The listener starts only after the
// config and the state have loaded, so a serving program is ready until
// it starts draining (the first SIGTERM or SIGINT), unless Check, when
// set, says otherwise.
type readiness struct {
	// Check, when set, is a condition of readiness besides the drain: an
	// error answers 503 with its text.
	Check    func() error
	draining atomic.Bool
}

// startDraining makes /-/ready answer 503 from now on, so the load
// balancer stops sending here while the listeners still answer.
func (r *readiness) startDraining() { r.draining.Store(true) }

func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	if r.draining.Load() {
		http.Error(w, "Not ready: shutting down.", http.StatusServiceUnavailable)
		return
	}
	if r.Check != nil {
		if err := r.Check(); err != nil {
			http.Error(w, "Not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "OK")
}

// closingWhileDraining answers as h does, and while draining asks the
// client to close the connection after the answer (net/http then closes
// it): a keep-alive sender's next request opens a new connection, which
// its load balancer sends to a replica that stays, instead of reusing
// one to this replica until the listener closes it under it.
func (r *readiness) closingWhileDraining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.draining.Load() {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, req)
	})
}

// newMux serves metrics, the landing page, health, readiness and the
// reload endpoint. There is no pprof here: this listener is the one
// Prometheus scrapes.
func newMux(r reloader, metrics http.Handler, telemetryPath string, ready, ack http.Handler) (*http.ServeMux, error) {
	links := []web.LandingLinks{
		{Address: telemetryPath, Text: "Metrics"},
		{Address: "/-/healthy", Text: "Health"},
		{Address: "/-/ready", Text: "Readiness"},
	}
	if ack != nil {
		links = append(links, web.LandingLinks{Address: ackweb.ListPath, Text: "Acknowledgements"})
	}
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        name,
		Description: "Prometheus exporter and alerting bridge for the breach monitoring service",
		Version:     version.Info(),
		// exporter-toolkit links /debug/pprof/ by default; nothing serves
		// it here, so the links would answer 404.
		Profiling: "false",
		Links:     links,
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(telemetryPath, metrics)
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") }
	mux.HandleFunc("/-/healthy", ok)
	mux.Handle("/-/ready", ready)
	mux.Handle("/-/reload", reloadHandler(r))
	if ack != nil {
		for _, path := range ackweb.Paths() {
			mux.Handle(path, ack)
		}
	}
	if telemetryPath != "/" {
		mux.Handle("/", landing)
	}
	return mux, nil
}

// reloadHandler reloads on POST only, as Prometheus and Alertmanager do: a
// GET from a crawler or a browser prefetch, or any other method, must not
// change the running config. A failed reload answers 500 with the reason
// and the old config stays in force.
func reloadHandler(r reloader) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "Use POST to reload the configuration.", http.StatusMethodNotAllowed)
			return
		}
		ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
		defer cancel()
		if err := r.Reload(ctx); err != nil {
			http.Error(w, "Reload failed, the previous configuration stays in force: "+err.Error(), http.StatusInternalServerError)
			return
		}
		fmt.Fprintln(w, "Reloaded")
	})
}
