// SPDX-License-Identifier: Apache-2.0

//go:build bench

// The build tag keeps these benchmarks, which link the whole exporter, out
// of a plain `go test ./...` (they never run there without -bench, but the
// binary would still be linked); `make vet` and `make staticcheck` check
// them with the tag.

package bench

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"
)

// The measurements check their own results (an exposition of the wrong
// series, an alert not counted, a restore that lost addresses is an error,
// not a figure); these benchmarks give the same code paths to go test
// -bench and pprof.

func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		for _, impl := range []string{ImplCollector, ImplGaugeVec} {
			b.Run(fmt.Sprintf("%s/%d", impl, n), func(b *testing.B) {
				setup, err := newScrapeSetup(n)
				if err != nil {
					b.Fatal(err)
				}
				h, err := setup.handler(impl)
				if err != nil {
					b.Fatal(err)
				}
				var size int
				b.ReportAllocs()
				for b.Loop() {
					w := &countingWriter{header: http.Header{}}
					h.ServeHTTP(w, scrapeRequest())
					size = w.bytes
				}
				b.ReportMetric(float64(size), "bytes/scrape")
			})
		}
	}
}

// BenchmarkWebhook posts b.N distinct signed alerts over loopback to the
// exporter's receiver and to the bare HMAC server.
func BenchmarkWebhook(b *testing.B) {
	creds := newCredentials()
	emails := benchEmails(100)
	api, err := newSimulatorAPI(creds, emails, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer api.stop()
	for _, ours := range []bool{true, false} {
		name := map[bool]string{true: "ours", false: "bare"}[ours]
		b.Run(name, func(b *testing.B) {
			alerts, err := signedAlerts(b.N, emails, creds.secret)
			if err != nil {
				b.Fatal(err)
			}
			var target webhookTarget
			if ours {
				target, err = startOurReceiver(webhookSetup(api.baseURL, emails), creds)
			} else {
				target, err = startBareReceiver(creds.secret)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer target.stop()
			b.ResetTimer()
			elapsed, err := sendAll(target.url, alerts, 8)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "accepted/s")
		})
	}
}

// BenchmarkReceiverInProcess serves distinct signed alerts straight to the
// handlers, without sockets: the bare HMAC handler, and the receiver of an
// exporter whose scheduler runs (every accepted alert asks it to re-read
// the address), for a small and a large address list.
func BenchmarkReceiverInProcess(b *testing.B) {
	for _, n := range []int{100, 10000} {
		creds := newCredentials()
		emails := benchEmails(n)
		b.Run(fmt.Sprintf("bare/%d", n), func(b *testing.B) {
			benchmarkHandler(b, bareHMACHandler(creds.secret), emails, creds)
		})
		b.Run(fmt.Sprintf("exporter/%d", n), func(b *testing.B) {
			api, err := newSimulatorAPI(creds, emails, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer api.stop()
			target, err := startOurReceiver(webhookSetup(api.baseURL, emails), creds)
			if err != nil {
				b.Fatal(err)
			}
			defer target.stop()
			benchmarkHandler(b, target.handler, emails, creds)
		})
	}
}

func benchmarkHandler(b *testing.B, h http.Handler, emails []string, creds credentials) {
	alerts, err := signedAlerts(b.N, emails, creds.secret)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, len(alerts))
	for i, a := range alerts {
		if reqs[i], err = http.NewRequest(http.MethodPost, "http://127.0.0.1"+webhookPath, bytes.NewReader(a.body)); err != nil {
			b.Fatal(err)
		}
		reqs[i].Header.Set("Content-Type", "application/json")
		reqs[i].Header.Set("X-Service-Signature", a.signature)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpuBefore := cpuTime()
	for i, req := range reqs {
		w := &statusWriter{header: http.Header{}}
		h.ServeHTTP(w, req)
		if w.status != http.StatusNoContent {
			b.Fatalf("request %d answered %d", i, w.status)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpuBefore).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// BenchmarkPlanning is MeasurePlanning for go test -bench and pprof: one
// op is one run of 20,000 requests after the warm-up.
func BenchmarkPlanning(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var perRequest float64
			for b.Loop() {
				res, err := MeasurePlanning(n, 20000)
				if err != nil {
					b.Fatal(err)
				}
				perRequest = res.SecondsPerRequest
			}
			b.ReportMetric(perRequest*1e6, "us/request")
		})
	}
}
