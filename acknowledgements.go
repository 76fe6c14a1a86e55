// SPDX-License-Identifier: Apache-2.0

package main

import (
	"net/http"

	"github.com/go-kit/log"
	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/ackweb"
	"github.com/breach-exporter/breach_exporter/internal/exporter"
)

// externalURL is the acknowledgement page's URL under --web.external-url.
func externalURL(s string) (string, error) { return ackweb.PageURL(s) }

// newAcknowledgements is the acknowledgement page's handler, with the
// authentication that --web.config.file and the flags give writes, and
// the series of its URL.
func newAcknowledgements(o *options, exp *exporter.Exporter, reg prometheus.Registerer, logger log.Logger) (http.Handler, error) {
	// Read here to warn at the start; the page reads it again at every
	// authentication, as the toolkit does.
	auth, err := ackweb.ReadWebConfig(*o.webFlags.WebConfigFile)
	if err != nil {
		return nil, err
	}
	auth.UserHeader = o.ackUserHeader
	if auth.Proxies, err = ackweb.ParseProxies(o.ackProxies); err != nil {
		return nil, err
	}
	if o.ackWrite && !auth.Any() {
		level.Warn(logger).Log("msg", "--web.enable-acknowledgements is set but nothing authenticates a writer (no basic_auth_users nor required client certificates in --web.config.file, no --web.acknowledgements.user-header): every write is refused")
	}
	page, err := externalURL(o.extURL)
	if err != nil {
		return nil, err
	}
	if err := ackweb.RegisterURL(reg, page); err != nil {
		return nil, err
	}
	return ackweb.New(ackweb.Options{
		Watchlist: exp.Watchlist(), Config: exp.Config(), Store: exp, Write: o.ackWrite, Auth: auth, WebConfigFile: *o.webFlags.WebConfigFile,
		Registerer: reg, Logger: log.With(logger, "component", "acknowledgements"),
	})
}
