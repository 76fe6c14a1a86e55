// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/listen"
	"github.com/prometheus/exporter-toolkit/web"
)

// HealthyPath answers 200 on the webhook listener, for load balancers.
const HealthyPath = "/-/healthy"

// Limits of the webhook listener. A sender posts one small body per
// alert, so anything slower or bigger than this is not the service: a
// connection that trickles its request holds a slot for at most
// readTimeout.
const (
	readHeaderTimeout = 3 * time.Second  // slowloris: headers (and a TLS handshake) must arrive promptly
	readTimeout       = 5 * time.Second  // headers plus a body of at most max_body_bytes
	writeTimeout      = 10 * time.Second // the answer is a status line and a tiny body
	idleTimeout       = 60 * time.Second // keep-alive between alerts
	// headerLimit is what a request line and its headers may take at most:
	// the service's headers plus a proxy's additions. Past it the answer
	// is 431.
	headerLimit = 16 << 10
	// net/http reads MaxHeaderBytes plus 4096 bytes of slack for its
	// buffer before it answers 431, so the field is set that much lower.
	maxHeaderBytes = headerLimit - 4096
)

// NewServer returns the webhook listener's server: it serves exactly path
// (the handler h) and HealthyPath, and 404 for everything else, so the
// exporter's /metrics and /-/reload are never reachable through it. path
// must differ from HealthyPath (main checks --webhook.path).
//
// Paths are compared as received, without the redirects of
// http.ServeMux's path cleaning: there is one right URL and it is in the
// sender's configuration.
func NewServer(h *Handler, path string) *http.Server {
	router := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case path:
			h.ServeHTTP(w, r)
		case HealthyPath:
			serveHealthy(w, r)
		default:
			h.serveNotFound(w, r) // counted as outcome not_found
		}
	})
	return &http.Server{
		Handler:           router,
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

func serveHealthy(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.WriteString(w, "Healthy\n")
}

// Serve listens on listenAddress (TCP) and serves srv there through
// exporter-toolkit, so webConfigFile (empty for none) can add TLS and basic
// auth to this listener alone. It returns when the server stops: nil after
// Shutdown or Close, the error otherwise (address in use, bad web config).
//
// Connection-level errors (TLS handshakes from scanners, resets) go to
// logger at debug level unless srv.ErrorLog is already set: on a public
// port they are noise.
//
// It holds at most lim.MaxConnections connections open at once, and
// lim.PerClient from one client (see package listen): a flood of idle
// connections waits in the kernel's queue instead of taking the process's
// descriptors, one client's slow connections cannot take every slot, and
// the listener recovers by itself when a flood stops.
func Serve(srv *http.Server, listenAddress, webConfigFile string, lim listen.Limit, logger *slog.Logger) error {
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	}
	l, err := listen.TCP(listenAddress, lim)
	if err != nil {
		return err
	}
	defer l.Close()
	logger.Info("Connection limits", "max_connections", lim.MaxConnections, "max_connections_per_client", lim.PerClient)
	err = web.Serve(l, srv, &web.FlagConfig{WebConfigFile: &webConfigFile}, logger)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Defaults of --webhook.max-connections and
// --webhook.max-connections-per-client: it takes 16 clients (addresses,
// or IPv6 /64s) to fill every slot, while the service's deliveries (one
// POST per alert) need a few connections at a time.
const (
	DefaultMaxConnections          = 256
	DefaultMaxConnectionsPerClient = 16
)
