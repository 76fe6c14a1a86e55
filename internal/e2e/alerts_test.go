// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/alerts"
	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// criticalAlertsDelivered waits for the critical exposure alert at the
// receiver, then checks every delivery of it: each has a cause, the
// plaintext password in the simulator or a critical webhook counted.
func (s *stack) criticalAlertsDelivered(ctx context.Context, t *testing.T) {
	const name = "BreachCredentialsExposed"
	s.eventually(ctx, t, "critical alerts at the receiver", alertTimeout, func(context.Context) error {
		got, malformed := s.receiver.notifications()
		if len(malformed) > 0 {
			return permanent{fmt.Errorf("undecodable notifications: %v", malformed)}
		}
		if len(firing(got, name)) == 0 {
			return fmt.Errorf("no firing %s yet among %d notifications", name, len(got))
		}
		return nil
	})

	got, _ := s.receiver.notifications()
	for _, d := range firing(got, name) {
		s.checkDelivery(t, d)
		l := d.labels
		exposed, err := s.simulatorPlaintext(ctx, l["address"], l["source"])
		if err != nil {
			t.Error(err)
			continue
		}
		counted, err := s.prom.query(ctx, fmt.Sprintf(`breach_alerts_total{job=%q, severity="critical", address=%q, source=%q} >= 1`,
			jobName, l["address"], l["source"]))
		switch {
		case err != nil:
			t.Error(err)
		case !exposed && len(counted) == 0:
			t.Errorf("%s for %s in %s, but the simulator shows no plaintext password there and breach_alerts_total counted no critical webhook", name, l["address"], l["source"])
		}
	}
}

// demoAddressAlerts are raised by design: the demo configuration watches an
// address the simulator's account has unverified and one it does not have,
// and gives no address an owner (BreachAddressUnowned: one alert for all,
// without an address label).
var demoAddressAlerts = map[string]string{
	"BreachAddressUnverified":   "newhire@example.com",
	"BreachAddressNotMonitored": "departed@example.net",
	"BreachAddressUnowned":      "",
}

// exposureGroup holds the alerts the simulator's data may raise at any time.
const exposureGroup = "breach-exposure"

// onlyExpectedAlerts checks that the demo's address alerts are raised for
// their addresses, and the failing URL's of the owners' HTTP source (it
// answers no address until the owners' scenarios publish its list:
// addressURLFailing), and that no other alert (exporter, API or webhook
// health) is pending or firing while everything works; and that every
// active alert's annotations render.
func (s *stack) onlyExpectedAlerts(ctx context.Context, t *testing.T) {
	ownersURL := s.ownerSourceNamed(t, "http").url
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	exposure := map[string]bool{}
	for _, r := range rules {
		if r.Group == exposureGroup && r.Alert != "" {
			exposure[r.Alert] = true
		}
	}
	if len(exposure) == 0 {
		t.Fatalf("the rules file has no alert in group %s", exposureGroup)
	}
	s.eventually(ctx, t, "the demo's address alerts", dataTimeout, func(ctx context.Context) error {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, a := range active {
			name := a.Labels["alertname"]
			want, isDemo := demoAddressAlerts[name]
			switch {
			case exposure[name]:
			case isDemo && a.Labels["address"] == want, name == urlFailing && a.Labels["url"] == ownersURL:
				seen[name] = true
			default:
				return permanent{fmt.Errorf("unexpected %s alert %v", a.State, a.Labels)}
			}
			if err := checkAnnotations(a.Annotations); err != nil {
				return permanent{fmt.Errorf("%s alert %v: %v", a.State, a.Labels, err)}
			}
		}
		for name, address := range demoAddressAlerts {
			if !seen[name] {
				return fmt.Errorf("no %s alert for %s yet; active: %v", name, address, active)
			}
		}
		if !seen[urlFailing] {
			return fmt.Errorf("no %s alert for %s yet; active: %v", urlFailing, ownersURL, active)
		}
		return nil
	})
}

// delivery is one alert as one notification carried it.
type delivery struct {
	receiver, path string
	groupLabels    map[string]string
	labels         map[string]string
	annotations    map[string]string
}

func firing(got []notification, alertname string) []delivery {
	return withStatus(got, alertname, "firing")
}

// withStatus lists the deliveries of alertname as firing or resolved.
func withStatus(got []notification, alertname, status string) []delivery {
	var out []delivery
	for _, n := range got {
		for _, a := range n.Alerts {
			if a.Status == status && a.Labels["alertname"] == alertname {
				out = append(out, delivery{n.Receiver, n.Path, n.GroupLabels, a.Labels, a.Annotations})
			}
		}
	}
	return out
}

func (s *stack) checkDelivery(t *testing.T, d delivery) {
	t.Helper()
	l := d.labels
	what := fmt.Sprintf("%s for %s/%s", l["alertname"], l["address"], l["source"])
	if d.receiver != criticalReceiver {
		t.Errorf("%s went to receiver %q, want %q", what, d.receiver, criticalReceiver)
	}
	for key, want := range map[string]string{"severity": "critical", "job": jobName} {
		if l[key] != want {
			t.Errorf("%s: label %s=%q, want %q", what, key, l[key], want)
		}
	}
	// One page for all replicas: the rule aggregates instance away.
	if v, ok := l["instance"]; ok {
		t.Errorf("%s: label instance=%q, want none", what, v)
	}
	if !slices.Contains(s.exporter.addresses, l["address"]) {
		t.Errorf("%s: address %q is not a configured address %v", what, l["address"], s.exporter.addresses)
	}
	if !slices.Contains(feeds, l["source"]) {
		t.Errorf("%s: source %q is not a feed %v", what, l["source"], feeds)
	}
	if d.groupLabels["address"] != l["address"] || d.groupLabels["source"] != "" {
		t.Errorf("%s: grouped by %v, want one notification per address", what, d.groupLabels)
	}
	if summary := d.annotations["summary"]; !strings.Contains(summary, l["address"]) || !strings.Contains(summary, l["source"]) {
		t.Errorf("%s: summary %q does not name the address and the feed", what, summary)
	}
	if err := checkAnnotations(d.annotations); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	s.checkAcknowledgeURL(t, what, d)
}

// checkAcknowledgeURL follows BreachCredentialsExposed's link to the
// acknowledgement page (--web.external-url is the exporter's own address):
// the page of the alert's address label and feed answers.
func (s *stack) checkAcknowledgeURL(t *testing.T, what string, d delivery) {
	t.Helper()
	if d.labels["alertname"] != "BreachCredentialsExposed" {
		return
	}
	want := "http://" + s.webAddr + "/acknowledge?address=" + url.QueryEscape(d.labels["address"]) + "&source=" + url.QueryEscape(d.labels["source"])
	if got := d.annotations["acknowledge_url"]; got != want {
		t.Errorf("%s: acknowledge_url %q, want %q", what, got, want)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), httpTimeout)
	defer cancel()
	if err := getOK(ctx, want); err != nil {
		t.Errorf("%s: the acknowledgement page: %v", what, err)
	}
}

// checkAnnotations finds missing annotations and templates that failed:
// Prometheus then sends the alert with the error as the annotation's text.
func checkAnnotations(annotations map[string]string) error {
	for _, key := range []string{"summary", "description", "runbook_url"} {
		if annotations[key] == "" {
			return fmt.Errorf("no %s annotation", key)
		}
	}
	for key, text := range annotations {
		if strings.Contains(text, "error expanding template") || strings.Contains(text, "<no value>") {
			return fmt.Errorf("annotation %s did not render: %q", key, text)
		}
	}
	return nil
}

// simulatorPlaintext asks the simulator's API, independently of the
// exporter, whether the feed shows a plaintext password for the address.
func (s *stack) simulatorPlaintext(ctx context.Context, address, source string) (bool, error) {
	states, err := s.simulatorFeeds(ctx, address)
	if err != nil {
		return false, err
	}
	for _, src := range states {
		if src.Source == source {
			return src.HasPlaintextPassword, nil
		}
	}
	return false, nil
}

// simulatorFeeds reads the address's feeds from the simulator's API, as
// the service reports them, independently of the exporter.
func (s *stack) simulatorFeeds(ctx context.Context, address string) ([]sim.BreachSourceState, error) {
	token, err := os.ReadFile(s.exporter.tokenFile)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.exporter.apiBase+"/breaches?"+url.Values{"email": {address}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("simulator GET /breaches for %s: %s", address, resp.Status)
	}
	var body struct {
		Sources []sim.BreachSourceState `json:"sources"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, err
	}
	return body.Sources, nil
}
