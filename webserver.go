// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/http"
	"time"
)

// Timeouts of the metrics listener. With a header timeout alone, idle
// keep-alive connections would stay open for ever and, under
// --web.max-connections, hold the slots a scrape needs.
const (
	webReadHeaderTimeout = 10 * time.Second
	// A request here is a GET (or a bodiless POST to /-/reload): reading it
	// whole never takes long. No write timeout: a large scrape on a slow
	// link may take a while, and Prometheus has its own scrape timeout.
	webReadTimeout = 30 * time.Second
	// Keep-alive between scrapes. A scrape interval above this reconnects
	// each time, which costs one TCP handshake.
	webIdleTimeout = 60 * time.Second
)

func newWebServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: webReadHeaderTimeout,
		ReadTimeout:       webReadTimeout,
		IdleTimeout:       webIdleTimeout,
	}
}
