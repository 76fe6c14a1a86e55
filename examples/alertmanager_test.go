// SPDX-License-Identifier: Apache-2.0

package examples

import (
	"regexp"
	"slices"
	"testing"

	"github.com/breach-exporter/breach_exporter/alerts"
)

// amRoute is the part of an Alertmanager route the grouping test reads.
type amRoute struct {
	Receiver string    `yaml:"receiver"`
	Matchers []string  `yaml:"matchers"`
	GroupBy  []string  `yaml:"group_by"`
	Continue bool      `yaml:"continue"`
	Routes   []amRoute `yaml:"routes"`
}

var amMatcher = regexp.MustCompile(`^([a-z_]+)(=~|=)"(.*)"$`)

// matches is whether labels satisfy every matcher of r (= and =~ only,
// which is all the example uses; a regular expression is anchored, as in
// Alertmanager).
func (r amRoute) matches(t *testing.T, labels map[string]string) bool {
	t.Helper()
	for _, m := range r.Matchers {
		p := amMatcher.FindStringSubmatch(m)
		if p == nil {
			t.Fatalf("matcher %q: the test reads only name=\"v\" and name=~\"re\"", m)
		}
		v := labels[p[1]]
		if p[2] == "=" && v != p[3] || p[2] == "=~" && !regexp.MustCompile("^(?:"+p[3]+")$").MatchString(v) {
			return false
		}
	}
	return true
}

// groupBy is the group_by of the route an alert with labels ends in:
// the first matching child, recursively, inheriting its parent's.
func (r amRoute) groupBy(t *testing.T, labels map[string]string, inherited []string) []string {
	t.Helper()
	if r.GroupBy != nil {
		inherited = r.GroupBy
	}
	for _, child := range r.Routes {
		if child.Continue {
			t.Fatal("a route with continue: the test follows the first match only")
		}
		if child.matches(t, labels) {
			return child.groupBy(t, labels, inherited)
		}
	}
	return inherited
}

// receiver is the receiver of the route an alert with labels ends in,
// inherited as groupBy's group_by is.
func (r amRoute) receiver(t *testing.T, labels map[string]string, inherited string) string {
	t.Helper()
	if r.Receiver != "" {
		inherited = r.Receiver
	}
	for _, child := range r.Routes {
		if child.matches(t, labels) {
			return child.receiver(t, labels, inherited)
		}
	}
	return inherited
}

// The example Alertmanager sends an alert about an address with a team
// (the rules join it onto every per-address alert) to the one team
// receiver, whatever the team and the severity; the same alert without a
// team, and every alert that is about no address, to the central receivers
// by severity, as before owners.
func TestAlertmanagerRoutesByTeam(t *testing.T) {
	var am struct {
		Route amRoute `yaml:"route"`
	}
	readYAML(t, "alertmanager.yml", &am)
	central := map[string]string{"critical": "security-oncall", "warning": "ops", "info": "ops-daily"}
	for _, team := range []string{"payments", "a-team-added-later"} {
		for severity := range central {
			labels := map[string]string{"alertname": "BreachCredentialsExposed", "job": "breach", "address": "alice@example.com", "severity": severity, "team": team}
			if got := am.Route.receiver(t, labels, ""); got != "team" {
				t.Errorf("team %s, severity %s: receiver %s, want team", team, severity, got)
			}
			if got := am.Route.groupBy(t, labels, nil); !slices.Contains(got, "team") || !slices.Contains(got, "address") {
				t.Errorf("team %s, severity %s: grouped by %v, want team and address", team, severity, got)
			}
			delete(labels, "team")
			if got := am.Route.receiver(t, labels, ""); got != central[severity] {
				t.Errorf("no team, severity %s: receiver %s, want the fallback %s", severity, got, central[severity])
			}
		}
	}
	unowned := map[string]string{"alertname": "BreachAddressUnowned", "job": "breach", "severity": "info"}
	if got := am.Route.receiver(t, unowned, ""); got != "ops-daily" {
		t.Errorf("BreachAddressUnowned: receiver %s, want ops-daily", got)
	}
}

// The example Alertmanager makes one notification of one fact with N
// replicas: the alerts about one exporter process (they keep instance:
// no aggregation in their expression) group per job and alert name, not
// per instance, so one store outage seen by three replicas is one
// notification; every other alert (the rules aggregate instance away)
// groups per address, so an address's exposures arrive together.
func TestAlertmanagerGroupsReplicasIntoOneNotification(t *testing.T) {
	var am struct {
		Route amRoute `yaml:"route"`
	}
	readYAML(t, "alertmanager.yml", &am)
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	aggregated := regexp.MustCompile(`\b(max|min|sum|absent)\b`)
	perProcess := 0
	for _, r := range rules {
		if r.Alert == "" {
			continue
		}
		labels := map[string]string{"alertname": r.Alert, "job": "breach", "address": "alice@example.com"}
		for k, v := range r.Labels {
			labels[k] = v
		}
		got := am.Route.groupBy(t, labels, nil)
		if !aggregated.MatchString(r.Expr) {
			perProcess++
			delete(labels, "address")
			labels["instance"] = "10.0.0.1:9799"
			got = am.Route.groupBy(t, labels, nil)
			if slices.Contains(got, "instance") || !slices.Contains(got, "alertname") || !slices.Contains(got, "job") {
				t.Errorf("%s (per process, with instance) groups by %v: want job and alertname, not instance, so N replicas are one notification", r.Alert, got)
			}
			continue
		}
		if !slices.Contains(got, "address") {
			t.Errorf("%s groups by %v: want address, so an address's alerts arrive together", r.Alert, got)
		}
	}
	if perProcess < 8 {
		t.Errorf("found %d alerts about one exporter process, docs/alerts.md lists 8: the test's reading of the rules is wrong", perProcess)
	}
}
