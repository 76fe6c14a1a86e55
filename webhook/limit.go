package webhook

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/prometheus/exporter-toolkit/web"

	"github.com/breach-exporter/breach_exporter/internal/listen"
)

// ServeLimited is Serve with at most lim.MaxConnections connections open
// at once (see package listen): a flood of idle connections waits in the
// kernel's queue instead of taking the process's descriptors, and the
// listener recovers by itself when the flood stops.
func ServeLimited(srv *http.Server, listenAddress, webConfigFile string, lim listen.Limit, logger *slog.Logger) error {
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
