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
// alert, so anything slower or bigger than this is not the service.
const (
	readHeaderTimeout = 5 * time.Second  // slowloris: headers must arrive promptly
	readTimeout       = 10 * time.Second // headers plus a body of at most max_body_bytes
	writeTimeout      = 10 * time.Second // the answer is a status line and a tiny body
	idleTimeout       = 60 * time.Second // keep-alive between alerts
	maxHeaderBytes    = 16 << 10         // the service's headers plus a proxy's additions
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

// Serve listens on listenAddress through exporter-toolkit, so
// webConfigFile (empty for none) can add TLS and basic auth to this
// listener alone. It returns when the server stops: nil after Shutdown or
// Close, the error otherwise (address in use, bad web config).
//
// Connection-level errors (TLS handshakes from scanners, resets) go to
// logger at debug level unless srv.ErrorLog is already set: on a public
// port they are noise.
//
// It holds at most lim.MaxConnections connections open at once (see
// package listen): a flood of idle connections waits in the kernel's queue
// instead of taking the process's descriptors, and the listener recovers by
// itself when the flood stops.
func Serve(srv *http.Server, listenAddress, webConfigFile string, lim listen.Limit, logger *slog.Logger) error {
	if listenAddress == "" {
		// net.Listen would pick a random port on every interface.
		return errors.New("webhook: empty listen address")
	}
	if srv.ErrorLog == nil {
		srv.ErrorLog = slog.NewLogLogger(logger.Handler(), slog.LevelDebug)
	}
	systemdSocket := false
	flags := &web.FlagConfig{
		WebListenAddresses: &[]string{listenAddress},
		WebConfigFile:      &webConfigFile,
		WebSystemdSocket:   &systemdSocket,
	}
	return listen.Serve(srv, flags, lim, logger)
}

// DefaultMaxConnections is --webhook.max-connections' default.
const DefaultMaxConnections = 256
