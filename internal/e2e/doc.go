// SPDX-License-Identifier: Apache-2.0

// Package e2e holds breach_exporter's end-to-end test, behind the build tag
// e2e so that `go test ./...` stays fast: the simulator and the exporter
// (built from this repository) run on loopback with a real Prometheus and a
// real Alertmanager, configured from the shipped examples, rules and
// dashboards. Run it with
//
//	go test -tags e2e -count=1 -v ./internal/e2e/
//
// It needs the prometheus and prometheus-alertmanager (or alertmanager)
// programs on PATH: Debian's packages of the same names provide them; the
// browser test (TestAcknowledgeFromThePage) needs Debian's chromium, which
// it drives headless over the DevTools protocol (chromedp). With -update it
// writes its screenshots to docs/img.
//
// That every counter the rules and dashboards take increase() or rate() of
// exists on a fresh exporter's first scrape needs no Prometheus: it is
// internal/exporter's firstscrape_test.go, in `go test ./...`.
package e2e
