// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
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

// newMux serves metrics, the landing page, health and the reload endpoint.
// There is no pprof here: this listener is the one Prometheus scrapes.
// Readiness needs no check of its own: the listener starts only after the
// config has loaded.
func newMux(r reloader, metrics http.Handler, telemetryPath string) (*http.ServeMux, error) {
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        name,
		Description: "Prometheus exporter and alerting bridge for the breach monitoring service",
		Version:     version.Info(),
		// exporter-toolkit links /debug/pprof/ by default; nothing serves
		// it here, so the links would answer 404.
		Profiling: "false",
		Links: []web.LandingLinks{
			{Address: telemetryPath, Text: "Metrics"},
			{Address: "/-/healthy", Text: "Health"},
			{Address: "/-/ready", Text: "Readiness"},
		},
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(telemetryPath, metrics)
	ok := func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") }
	mux.HandleFunc("/-/healthy", ok)
	mux.HandleFunc("/-/ready", ok)
	mux.Handle("/-/reload", reloadHandler(r))
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
