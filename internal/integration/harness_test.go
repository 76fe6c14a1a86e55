// SPDX-License-Identifier: Apache-2.0

// Package integration runs the simulator of the service and the exporter
// together on loopback and checks that what the exporter exports is what the
// simulator holds and sent.
package integration

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/exporter"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

const (
	token  = "svc_ak_integration"
	secret = "integration-webhook-secret"
	// ghost is in the exporter's config but not on the simulated account.
	ghost = "ghost@example.net"
)

// pipeline is a simulator and an exporter wired together, both on clock.
type pipeline struct {
	detail string // the config's metrics block
	t      *testing.T
	clock  clockwork.Clock
	sim    *sim.Simulator
	exp    *exporter.Exporter
	reg    *prometheus.Registry
}

// startPipeline runs the simulator and the exporter on clock, with
// metrics, the config's metrics block ("" for the default families).
func startPipeline(t *testing.T, clock clockwork.Clock, refresh time.Duration, metrics string) *pipeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &pipeline{t: t, clock: clock, reg: prometheus.NewRegistry(), detail: metrics}

	// The webhook port is taken before the simulator is built, since it
	// needs the URL; the server on it starts once the exporter exists.
	hookListener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.sim, err = sim.New(sim.Options{
		Token:         token,
		Plan:          "pro",
		Seed:          42,
		Clock:         clock,
		WebhookURL:    "http://" + hookListener.Addr().String() + "/webhook",
		WebhookSecret: []byte(secret),
	})
	if err != nil {
		t.Fatal(err)
	}
	apiSrv := httptest.NewServer(p.sim.Handler())
	t.Cleanup(apiSrv.Close)

	addresses := []string{ghost}
	for _, a := range sim.DefaultAddresses() {
		addresses = append(addresses, a.Email)
	}
	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), token)
	testkit.WriteFile(t, filepath.Join(dir, "secret"), secret)
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), fmt.Sprintf(`api:
  base_url: %s/api/v1
  token_file: token
refresh:
  interval: %s
  me_interval: %s
addresses: [%s]
webhook:
  secret_files: [secret]
%s`, apiSrv.URL, refresh, refresh, strings.Join(addresses, ", "), p.detail))

	p.exp, err = exporter.New(exporter.Options{
		ConfigFile: filepath.Join(dir, "config.yml"),
		UserAgent:  "breach_exporter/integration",
		Registerer: p.reg,
		Clock:      clock,
		Webhook:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	hookSrv := httptest.NewUnstartedServer(p.exp.WebhookHandler())
	hookSrv.Listener.Close()
	hookSrv.Listener = hookListener
	hookSrv.Start()
	t.Cleanup(hookSrv.Close)

	done := make(chan struct{})
	go func() {
		defer close(done)
		p.exp.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		p.exp.Close()
		apiSrv.CloseClientConnections()
		hookSrv.CloseClientConnections()
	})
	return p
}

// sweep runs one simulator sweep and waits until its webhooks are delivered.
func (p *pipeline) sweep() []sim.Alert {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alerts := p.sim.Sweep(ctx)
	p.sim.Flush(ctx)
	return alerts
}

func (p *pipeline) samples() map[string]float64 {
	return testkit.Scrape(p.t, p.exp.MetricsHandler(p.reg))
}

// mismatches lists every way the exporter's samples differ from the
// simulator's state and the alerts it delivered; empty means they agree.
func (p *pipeline) mismatches() []string {
	got := p.samples()
	var diffs []string
	check := func(k string, want float64) {
		if v, ok := got[k]; !ok {
			diffs = append(diffs, k+" missing")
		} else if v != want {
			diffs = append(diffs, fmt.Sprintf("%s = %v, want %v", k, v, want))
		}
	}
	for _, a := range sim.DefaultAddresses() {
		state, verified := p.sim.State(a.Email)
		wantState := "unverified"
		if verified {
			wantState = "verified"
		}
		check(testkit.Series("breach_address_state", "address", a.Email, "account", "default", "state", wantState), 1)
		exported := 0
		for k := range got {
			if strings.HasPrefix(k, "breach_source_breaches{") && strings.Contains(k, fmt.Sprintf("address=%q", a.Email)) {
				exported++
			}
		}
		if exported != len(state.Sources) {
			diffs = append(diffs, fmt.Sprintf("%s: %d feeds exported, simulator has %d", a.Email, exported, len(state.Sources)))
		}
		for _, s := range state.Sources {
			l := []string{"address", a.Email, "source", s.Source}
			check(testkit.Series("breach_source_breaches", l...), float64(s.BreachCount))
			check(testkit.Series("breach_source_databases", l...), float64(len(s.SourceDBs)))
			for _, db := range s.SourceDBs {
				check(testkit.Series("breach_source_database_info", append(l, "database", db)...), 1)
			}
			exposed := map[string]bool{}
			for _, f := range s.FieldsExposed {
				exposed[f] = true
			}
			for _, f := range sim.Fields() {
				k := testkit.Series("breach_source_field_exposed", append(l, "field", f)...)
				if _, ok := got[k]; exposed[f] {
					check(k, 1)
				} else if ok {
					diffs = append(diffs, k+" served, but the field is not exposed")
				}
			}
			plaintext := 0.0
			if s.HasPlaintextPassword {
				plaintext = 1
			}
			check(testkit.Series("breach_source_plaintext_password", l...), plaintext)
			check(testkit.Series("breach_source_last_scanned_timestamp_seconds", l...), float64(s.LastScannedAt.UnixMilli())/1000)
			check(testkit.Series("breach_source_last_changed_timestamp_seconds", l...), float64(s.LastChangedAt.UnixMilli())/1000)
		}
	}
	check(testkit.Series("breach_address_state", "address", ghost, "account", "default", "state", "not_monitored"), 1)

	stats := p.sim.Stats()
	for k, n := range stats.Alerts {
		check(testkit.Series("breach_alerts_total", "address", k.Address, "source", k.Source, "severity", k.Severity), float64(n))
	}
	var delivered, counted float64
	for _, n := range stats.Alerts {
		delivered += float64(n)
	}
	for k, v := range got {
		if strings.HasPrefix(k, "breach_alerts_total{") {
			counted += v
		}
	}
	if counted != delivered {
		diffs = append(diffs, fmt.Sprintf("breach_alerts_total sums to %v, the simulator delivered %v", counted, delivered))
	}
	if stats.RateLimited != 0 {
		diffs = append(diffs, fmt.Sprintf("the simulator served %d 429s", stats.RateLimited))
	}
	return diffs
}
