// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// advertiseURL is the URL of this process's metrics the other replicas of
// its store pass scope=cluster scrapes to (internal/exporter/serving.go):
// --web.advertise-url with the telemetry path, or, without it, one made
// from the first --web.listen-address, with this host's name where that
// address names no host. It is "" when neither gives one (a socket
// listener): the other replicas then serve in this one's place.
func (o *options) advertiseURL() (string, error) {
	base := o.advertise
	if base == "" {
		base = derivedBase(*o.webFlags.WebListenAddresses)
		if base == "" {
			return "", nil
		}
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--web.advertise-url %q must be an http:// or https:// URL with a host, without a query", base)
	}
	return strings.TrimSuffix(u.String(), "/") + o.telemetryPath, nil
}

// derivedBase is http://host:port of the first listen address that is a
// TCP address.
func derivedBase(listen []string) string {
	for _, a := range listen {
		host, port, err := net.SplitHostPort(a)
		if err != nil || strings.Contains(a, "://") {
			continue
		}
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			if host, err = os.Hostname(); err != nil {
				return ""
			}
		}
		return "http://" + net.JoinHostPort(host, port)
	}
	return ""
}
