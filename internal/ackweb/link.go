// SPDX-License-Identifier: Apache-2.0

package ackweb

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// PageURL is the acknowledgement page's URL under the external URL
// (--web.external-url, "" for none): what the alerts link to, with
// ?address=<label>&source=<feed> added by the rule's annotation.
func PageURL(external string) (string, error) {
	if external == "" {
		return "", nil
	}
	u, err := url.Parse(external)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--web.external-url %q must be an absolute http or https URL without query or fragment", external)
	}
	u.Path = strings.TrimRight(u.Path, "/") + PagePath
	u.RawPath = ""
	return u.String(), nil
}

// RegisterURL serves breach_exporter_acknowledgement_url_info{url} 1, the
// page's URL, which the alert rules read for their acknowledge_url
// annotation (a rules file cannot read the exporter's flags). Nothing is
// served without an external URL: the annotation is then empty.
func RegisterURL(reg prometheus.Registerer, pageURL string) error {
	if pageURL == "" {
		return nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "breach_exporter_acknowledgement_url_info",
		Help:        "The URL of the acknowledgement page (--web.external-url), which the alerts' acknowledge_url annotation links to. Always 1.",
		ConstLabels: prometheus.Labels{"url": pageURL},
	})
	g.Set(1)
	return reg.Register(g)
}
