// SPDX-License-Identifier: Apache-2.0

// Package bench measures breach_exporter against baselines on the same
// machine in the same run: webhook throughput against a bare HMAC-checking
// net/http server, scrape cost against the same series held in plain
// client_golang GaugeVecs, and request-budget use and alert-to-gauge latency
// against the simulator of the breach monitoring service.
//
// cmd/breach_bench runs everything (make bench) and writes results.json; the
// tests here check each measurement on small inputs, and the Benchmark
// functions give the same code paths to `go test -bench` and pprof.
package bench
