// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Bounds of the slow-client test.
const (
	slowConnections = 1_000
	slowClients     = 8 // source addresses 127.0.0.2 to 127.0.0.9
	signedAlerts    = 20
	signedInterval  = 250 * time.Millisecond // 5 s of alerts: past the read timeouts, through redials
	// The promise: a signed alert is answered within a second while the
	// slow clients trickle.
	signedDeadline = time.Second
	signerAddress  = "127.0.0.100"
)

// TestSlowClientsDoNotDelaySignedAlerts builds breach_exporter and has
// 1,000 connections from 8 addresses trickle their headers (half of them)
// or their bodies (the other half) into the webhook listener, one byte
// every 100 ms, redialling whenever they are closed. Meanwhile a sender on
// another address posts 20 signed alerts over 5 s, one connection each:
// every one is answered 204 within a second, and the connections refused for their
// client are counted.
func TestSlowClientsDoNotDelaySignedAlerts(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("dials from several 127.0.0.0/8 addresses, which Linux routes to lo")
	}
	bin := binary(t, "builds the binary and holds 1,000 slow connections")
	const secret = "slow-client-test-secret"
	cfg := receiverConfig(t, newStandIn(t), secret, "")
	webAddr, hookAddr := testkit.FreeAddress(t), testkit.FreeAddress(t)
	startProcess(t, bin, "--config.file", cfg, "--web.listen-address", webAddr,
		"--webhook.listen-address", hookAddr, "--log.level", "warn", "--storage.path", "")
	metricsURL := "http://" + webAddr + "/metrics"
	servesMetrics(t, metricsURL)

	var (
		stop            = make(chan struct{})
		wg              sync.WaitGroup
		dials, closedBy atomic.Int64
	)
	header := "POST /webhook HTTP/1.1\r\nHost: x\r\nX-Slow: "
	body := "POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"X-Service-Signature: sha256=" + strings.Repeat("0", 64) + "\r\nContent-Length: 60000\r\n\r\n{"
	for i := range slowConnections {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i%slowClients))}
		start := header
		if i%2 == 1 {
			start = body
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			trickle(hookAddr, local, start, stop, &dials, &closedBy)
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	// Whatever the server does with them, the slow clients hold at least
	// their share of every client's slots before the sender starts.
	openSlow := func() bool {
		_, m := testkit.Get(t, metricsURL)
		return sampleValue(m, `breach_exporter_listener_open_connections{listener="webhook"}`) >= 16*slowClients
	}
	testkit.Eventually(t, "the slow clients to hold their connections", openSlow)

	sender := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext:       (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(signerAddress)}}).DialContext,
	}}
	latencies := make([]time.Duration, 0, signedAlerts)
	pace := time.NewTicker(signedInterval)
	defer pace.Stop()
	for i := range signedAlerts {
		<-pace.C
		alert := []byte(`{"event":"alert.created","severity":"critical","address":"alice@example.com","source":"combolist",` +
			`"summary":"slow clients ` + strconv.Itoa(i) + `","delta":{"new_source_dbs":["x"]},"observed_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`)
		sent := time.Now()
		resp, err := sender.Do(signedRequest(t, "http://"+hookAddr+"/webhook", secret, alert))
		took := time.Since(sent)
		if err != nil {
			t.Fatalf("signed alert %d: %v after %s", i, err, took)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("signed alert %d: %d, want 204", i, resp.StatusCode)
		}
		latencies = append(latencies, took)
	}
	slices.Sort(latencies)
	median, worst := latencies[len(latencies)/2], latencies[len(latencies)-1]
	_, metrics := testkit.Get(t, metricsURL)
	refused := sampleValue(metrics, `breach_exporter_listener_client_limit_refused_total{listener="webhook"}`)
	t.Logf("%d signed alerts beside %d slow connections from %d addresses: median %s, worst %s; %d slow dials, %d closed by the server, %v refused for their client",
		signedAlerts, slowConnections, slowClients, median.Round(time.Microsecond), worst.Round(time.Microsecond), dials.Load(), closedBy.Load(), refused)
	if worst >= signedDeadline {
		t.Errorf("a signed alert took %s beside the slow clients, want under %s (median %s)", worst, signedDeadline, median)
	}
	if refused == 0 {
		t.Error("no connection was refused for its client: the slow clients were not capped")
	}
	if got := sampleValue(metrics, `breach_webhook_requests_total{outcome="accepted"}`); got != signedAlerts {
		t.Errorf("accepted = %v, want %d", got, signedAlerts)
	}
}
