// SPDX-License-Identifier: Apache-2.0

// Package systemtest holds the tests that build breach_exporter and run it
// as users do, as a process on loopback ports: a start, scrape and reload
// (run_test.go), restarts and the state folder (restart_test.go,
// journal_test.go), the log's shape and privacy (log_test.go,
// privacy_test.go), a connection flood, slow clients and the worst case's
// memory (flood_test.go, slowclients_test.go, memory_test.go), a flood of
// writes to the acknowledgement page's API (ackflood_test.go), two accounts'
// keys, budgets and webhooks against a stand-in that enforces each key's
// window, and --config.check on their problems (accounts_test.go). Their shared
// helpers are in helpers_test.go; the binary is built once per run.
//
// They take minutes of real time and skip under -short:
//
//	go test -race -count=1 ./internal/systemtest/
//	go test -count=1 -run TestMemoryOfTheWorstCase ./internal/systemtest/
//
// The package has no code of its own: only tests.
package systemtest
