// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/alerts"
	"github.com/breach-exporter/breach_exporter/dashboards"
	"github.com/breach-exporter/breach_exporter/internal/config"
)

// Grafana's variables as a freshly imported dashboard has them: the job the
// rules select, "All" (".+", ".*" for the team) for the multi-value ones,
// and the built-ins of a 5-minute range over 1s scrapes.
const (
	dashboardRange = 5 * time.Minute
	rangeStep      = 5 * time.Second
)

var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "15s",
	"$__range_s", "300", // before $__range, which is its prefix
	"$__range", "5m",
	"$job", jobName,
	"$instance", ".+",
	"$account", ".+",
	"$team", ".*", // All keeps the addresses without a team
	"$address", ".+",
	"$source", ".+",
)

func grafanaExpr(expr string) (string, error) {
	out := grafanaVariables.Replace(expr)
	if strings.Contains(out, "$") {
		return "", fmt.Errorf("unknown Grafana variable left in %q", out)
	}
	return out, nil
}

// expectation is what a core panel must show.
type expectation int

const (
	hasSeries expectation = iota // at least one series
	positive                     // at least one series, each latest value > 0
	isOne                        // at least one series, each latest value 1
)

func (e expectation) check(result []series) error {
	if len(result) == 0 {
		return fmt.Errorf("no data")
	}
	for _, s := range result {
		switch v := s.last(); {
		case e == positive && !(v > 0):
			return fmt.Errorf("%v = %g, want > 0", s.Labels, v)
		case e == isOne && v != 1:
			return fmt.Errorf("%v = %g, want 1", s.Labels, v)
		}
	}
	return nil
}

// corePanels are the panels a user looks at first: with the simulator's
// demo account read once and its webhooks received, each of their targets
// shows data on the default families (the demo serves no detail family:
// targets that need one are only run, in dashboardQueriesEvaluate).
// Panels whose "or vector(0)" always yields a series must be positive.
var corePanels = []struct {
	dashboard, panel string
	want             expectation
}{
	{"breach-overview.json", "Verified addresses", positive},
	{"breach-overview.json", "Addresses with a plaintext password", positive},
	{"breach-overview.json", "Last change", positive},
	{"breach-overview.json", "Exposure per address and feed", hasSeries},
	{"breach-overview.json", "Address states", hasSeries},
	{"breach-overview.json", "Fleet: addresses with each field exposed, per feed", hasSeries},
	{"breach-overview.json", "Fleet: addresses with a plaintext password, per feed", hasSeries},
	{"breach-overview.json", "Fleet: addresses by state", hasSeries},
	{"exporter-health.json", "Exporter up", isOne},
	{"exporter-health.json", "API up", isOne},
	{"exporter-health.json", "Plan", isOne},
	{"exporter-health.json", "Last config reload", isOne},
	{"exporter-health.json", "Round length", positive},
	{"exporter-health.json", "Request budget", positive},
	{"exporter-health.json", "API requests by code", hasSeries},
	{"exporter-health.json", "Rate limit: remaining vs budget", hasSeries},
	{"exporter-health.json", "Staleness per address", hasSeries},
	{"exporter-health.json", "Addresses by state", hasSeries},
	{"exporter-health.json", "Last refresh per address", hasSeries},
	{"exporter-health.json", "Webhook requests by outcome", hasSeries},
	{"exporter-health.json", "Build info", hasSeries},
}

// readsDetail reports whether expr reads a detail family.
func readsDetail(expr string) bool {
	return slices.ContainsFunc(config.DetailFamilies, func(name string) bool {
		return regexp.MustCompile(`\b` + name + `\b`).MatchString(expr)
	})
}

func dashboardQueries(t *testing.T) []dashboards.Query {
	t.Helper()
	queries, err := dashboards.Expressions()
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) == 0 {
		t.Fatal("the dashboards have no queries")
	}
	return queries
}

// runPanelQuery runs q as Grafana does: instant for tables and stats, over
// the dashboard's range for graphs.
func (s *stack) runPanelQuery(ctx context.Context, q dashboards.Query) ([]series, error) {
	expr, err := grafanaExpr(q.Expr)
	if err != nil {
		return nil, err
	}
	if q.Instant {
		return s.prom.query(ctx, expr)
	}
	return s.prom.queryRange(ctx, expr, dashboardRange, rangeStep)
}

func (s *stack) corePanelsHaveData(ctx context.Context, t *testing.T) {
	queries := dashboardQueries(t)
	type coreQuery struct {
		dashboards.Query
		want expectation
	}
	var core []coreQuery
	for _, c := range corePanels {
		n := 0
		for _, q := range queries {
			if q.Dashboard == c.dashboard && q.Panel == c.panel {
				n++
				if !readsDetail(q.Expr) {
					core = append(core, coreQuery{q, c.want})
				}
			}
		}
		if n == 0 {
			t.Errorf("core panel %q not found in %s", c.panel, c.dashboard)
		}
	}
	s.eventually(ctx, t, "core panels show data", dataTimeout, func(ctx context.Context) error {
		var empty []string
		for _, q := range core {
			result, err := s.runPanelQuery(ctx, q.Query)
			if err != nil {
				return permanent{fmt.Errorf("%s %q %s: %v", q.Dashboard, q.Panel, q.RefID, err)}
			}
			if err := q.want.check(result); err != nil {
				empty = append(empty, fmt.Sprintf("%s %q %s: %v", q.Dashboard, q.Panel, q.RefID, err))
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("%d of %d core queries:\n  %s", len(empty), len(core), strings.Join(empty, "\n  "))
		}
		return nil
	})
}

// dashboardQueriesEvaluate runs every target of every panel as an instant
// query, and graphs also as the range query Grafana sends.
func (s *stack) dashboardQueriesEvaluate(ctx context.Context, t *testing.T) {
	for _, q := range dashboardQueries(t) {
		what := fmt.Sprintf("%s %q %s", q.Dashboard, q.Panel, q.RefID)
		expr, err := grafanaExpr(q.Expr)
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if _, err := s.prom.query(ctx, expr); err != nil {
			t.Errorf("%s: %v", what, err)
		}
		result, err := s.runPanelQuery(ctx, q)
		switch {
		case err != nil:
			t.Errorf("%s as Grafana runs it: %v", what, err)
		case len(result) == 0:
			// Not an error: some panels are empty until something happens
			// (e.g. an hour of history); the log says which.
			t.Logf("%s: no data yet", what)
		}
	}
}

// labelValuesQuery is the form of every query variable in the dashboards.
var labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardVariablesList runs each query variable as Grafana's Prometheus
// data source does (label values of the series matching a selector).
func (s *stack) dashboardVariablesList(ctx context.Context, t *testing.T, root string) {
	files, err := filepath.Glob(filepath.Join(root, "dashboards", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards found: %v", err)
	}
	// The values a user must be offered on the first import, and the team
	// the owners' scenarios leave (the test runs after them: the demo's
	// addresses have no team).
	mustOffer := map[string]string{"job": jobName, "instance": s.webAddr, "team": "platform"}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var dash struct {
			Templating struct {
				List []struct {
					Type  string `json:"type"`
					Name  string `json:"name"`
					Query any    `json:"query"`
				} `json:"list"`
			} `json:"templating"`
		}
		if err := json.Unmarshal(data, &dash); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, v := range dash.Templating.List {
			if v.Type != "query" {
				continue
			}
			what := fmt.Sprintf("%s variable %s", filepath.Base(file), v.Name)
			text, _ := v.Query.(string)
			m := labelValuesQuery.FindStringSubmatch(text)
			if m == nil {
				t.Errorf("%s: query %v is not label_values(selector, label)", what, v.Query)
				continue
			}
			selector, err := grafanaExpr(m[1])
			if err != nil {
				t.Errorf("%s: %v", what, err)
				continue
			}
			values, err := s.prom.labelValues(ctx, m[2], selector)
			switch {
			case err != nil:
				t.Errorf("%s: %v", what, err)
			case len(values) == 0:
				t.Errorf("%s: label_values(%s, %s) lists nothing", what, selector, m[2])
			case mustOffer[v.Name] != "" && !slices.Contains(values, mustOffer[v.Name]):
				t.Errorf("%s: lists %v, not %q", what, values, mustOffer[v.Name])
			}
		}
	}
}

func ruleNames(t *testing.T) []string {
	t.Helper()
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Group + "/" + r.Name()
	}
	slices.Sort(names)
	return names
}

// ruleExpressionsEvaluate runs every rule's expression as a query; the rules
// API reports only the result of the rule as a whole.
func (s *stack) ruleExpressionsEvaluate(ctx context.Context, t *testing.T) {
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if _, err := s.prom.query(ctx, r.Expr); err != nil {
			t.Errorf("rule %s/%s: %v", r.Group, r.Name(), err)
		}
	}
}
