// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/alerts"
	"github.com/breach-exporter/breach_exporter/dashboards"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// increase() and rate() of a series that is born at its first value see no
// change: the series has no earlier sample. So every counter a rule or a
// panel takes increase(), rate() or irate() of must exist, at 0, on the
// exporter's very first scrape, before any API answer or webhook.
func TestEveryRateSelectorMatchesAFreshExporter(t *testing.T) {
	scraped := freshExporterSeries(t)

	uses := rangeSelectorUses(t)
	if len(uses) < 10 {
		t.Fatalf("only %d increase()/rate() selectors found in the rules and dashboards; the extraction is broken", len(uses))
	}
	for _, u := range uses {
		if n := countMatches(u.sel, scraped); n == 0 {
			t.Errorf("%s: %s(%s) selects no series on a fresh exporter's first scrape: the exporter must create it at 0, or the query must read something that exists from the start",
				u.where, u.function, u.sel)
		}
	}
}

// The check must catch the mistakes it exists for: a counter created with
// its first event (the 429 counter, a per-address webhook counter) and
// a label value that is never pre-initialised.
func TestRateSelectorCheckCatchesLazyCounters(t *testing.T) {
	scraped := freshExporterSeries(t)
	for _, expr := range []string{
		`sum(increase(breach_api_requests_total{job="breach", code="500"}[15m]))`,
		`sum(increase(breach_alert_new_databases_total{job="breach"}[1h]))`,
		`sum(increase(breach_alert_exposed_fields_total{job="breach", field="phone"}[1h]))`,
		`rate(breach_alert_new_plaintext_passwords_total{job="breach"}[5m])`,
		`increase(breach_alerts_total{job="breach", severity="page"}[1h])`,
	} {
		sels, err := rangeSelectors(expr)
		if err != nil || len(sels) != 1 {
			t.Fatalf("%s: selectors %v, %v; want one", expr, sels, err)
		}
		if n := countMatches(sels[0].sel, scraped); n != 0 {
			t.Errorf("%s matches %d series of a fresh exporter; the check would not catch it", expr, n)
		}
	}
	for _, expr := range []string{
		`increase(breach_api_request_failures_total{job="breach", kind="rate_limited"}[15m])`,
		`increase(breach_api_requests_total{job="breach", code="429", endpoint="me"}[15m])`,
		`increase(breach_api_requests_total{job="breach", code="401"}[15m])`,
		`increase(breach_alerts_total{job="breach", severity="critical", address="alice@example.com"}[1h])`,
		`rate(breach_api_request_duration_seconds_bucket{job="breach", instance=~".+"}[1m])`,
		`rate(breach_webhook_requests_total{job="breach", outcome!~"accepted|duplicate"}[1m])`,
	} {
		sels, err := rangeSelectors(expr)
		if err != nil || len(sels) != 1 {
			t.Fatalf("%s: selectors %v, %v; want one", expr, sels, err)
		}
		if n := countMatches(sels[0].sel, scraped); n == 0 {
			t.Errorf("%s matches no series of a fresh exporter", expr)
		}
	}
}

func TestRangeSelectorsParse(t *testing.T) {
	sels, err := rangeSelectors(`sum by (a) (increase(foo_total{job="breach", b=~"x|}y", c!="q\"r"} [5m])) / rate( bar [1m]) + irate(baz{}[1m] offset 5m) + increase_x(qux[1m])`)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(sels))
	for i, s := range sels {
		got[i] = s.function + " " + s.sel.String()
	}
	want := []string{`increase foo_total{b=~"x|}y", c!="q\"r"}`, `rate bar{}`, `irate baz{}`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	for _, bad := range []string{`rate(foo{a="b"})`, `rate(foo{a=b}[1m])`, `rate(sum(foo)[1m:])`, `rate(foo{a="b"[1m])`} {
		if s, err := rangeSelectors(bad); err == nil {
			t.Errorf("%s: parsed as %v, want an error", bad, s)
		}
	}
}

// freshExporterSeries starts the exporter as a deployment runs it (webhook
// receiver on, configured addresses, persistence on in an empty folder, as
// the default --storage.path) against an API that never answers, and
// returns every series of its first scrape once the first request is out.
func freshExporterSeries(t *testing.T) []sample {
	t.Helper()
	api := testkit.NewStandIn(t, nil)
	api.Misbehave(testkit.Hang) // hold every request: no answer before the scrape

	dir := t.TempDir()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken)
	testkit.WriteFile(t, filepath.Join(dir, "secret"), "first-scrape-secret")
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), fmt.Sprintf(`api:
  base_url: %s
  token_file: token
addresses:
  - alice@example.com
  - {email: bob@example.com, alias: bob}
webhook:
  secret_files: [secret]
`, api.BaseURL()))
	reg := prometheus.NewRegistry()
	exp, err := New(Options{
		ConfigFile: filepath.Join(dir, "config.yml"),
		UserAgent:  "breach_exporter/test",
		Registerer: reg,
		Webhook:    true,
		// The rules take increase() of a persistence counter.
		StoragePath:      filepath.Join(dir, "data"),
		SnapshotInterval: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() }) // after Run has stopped
	testkit.Go(t, exp.Run)
	testkit.Eventually(t, "the exporter's first request", func() bool { return len(api.Requests()) > 0 })
	series := flattenSeries(testkit.ParseText(t, testkit.ScrapeText(t, exp.MetricsHandler(reg))))
	if len(series) == 0 {
		t.Fatal("a fresh exporter serves no series")
	}
	return series
}

// sample is one series of a scrape: its name and labels.
type sample struct {
	name   string
	labels map[string]string
}

// flattenSeries lists every series as Prometheus stores them: a histogram
// is its _bucket (with le), _sum and _count series.
func flattenSeries(families []*dto.MetricFamily) []sample {
	var out []sample
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if h := m.GetHistogram(); h != nil {
				for _, suffix := range []string{"_sum", "_count"} {
					out = append(out, sample{mf.GetName() + suffix, labels})
				}
				les := []string{"+Inf"}
				for _, b := range h.GetBucket() {
					les = append(les, strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				for _, le := range les {
					withLe := map[string]string{"le": le}
					for k, v := range labels {
						withLe[k] = v
					}
					out = append(out, sample{mf.GetName() + "_bucket", withLe})
				}
				continue
			}
			out = append(out, sample{mf.GetName(), labels})
		}
	}
	return out
}

// selectorUse is one increase()/rate()/irate() of a rule or a panel.
type selectorUse struct {
	where    string
	function string
	sel      selector
}

// Grafana's variables as "All" and the built-in intervals; job and instance
// are dropped from the selectors anyway (they come from the scrape).
var allVariables = strings.NewReplacer(
	"$__rate_interval", "1m", "$__range_s", "3600", "$__range", "1h",
	"$job", ".+", "$instance", ".+", "$account", ".+", "$address", ".+", "$source", ".+",
)

func rangeSelectorUses(t *testing.T) []selectorUse {
	t.Helper()
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboards.Expressions()
	if err != nil {
		t.Fatal(err)
	}
	var uses []selectorUse
	add := func(where, expr string) {
		sels, err := rangeSelectors(expr)
		if err != nil {
			t.Errorf("%s: %v", where, err)
		}
		for _, s := range sels {
			s.where = where
			uses = append(uses, s)
		}
	}
	for _, r := range rules {
		add("rule "+r.Group+"/"+r.Name(), r.Expr)
	}
	for _, q := range queries {
		add(fmt.Sprintf("%s %q %s", q.Dashboard, q.Panel, q.RefID), allVariables.Replace(q.Expr))
	}
	return uses
}

// selector is a metric name and its label matchers, job and instance left out.
type selector struct {
	name     string
	matchers []matcher
}

type matcher struct {
	label, op, value string
	re               *regexp.Regexp
}

func (s selector) String() string {
	parts := make([]string, len(s.matchers))
	for i, m := range s.matchers {
		parts[i] = m.label + m.op + strconv.Quote(m.value)
	}
	return s.name + "{" + strings.Join(parts, ", ") + "}"
}

func (m matcher) matches(v string) bool {
	switch m.op {
	case "=":
		return v == m.value
	case "!=":
		return v != m.value
	case "=~":
		return m.re.MatchString(v)
	default: // "!~"
		return !m.re.MatchString(v)
	}
}

func countMatches(sel selector, series []sample) int {
	n := 0
	for _, s := range series {
		if s.name != sel.name {
			continue
		}
		ok := true
		for _, m := range sel.matchers {
			ok = ok && m.matches(s.labels[m.label]) // absent label = ""
		}
		if ok {
			n++
		}
	}
	return n
}

var (
	rangeFunction = regexp.MustCompile(`\b(increase|rate|irate)\s*\(`)
	metricName    = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*`)
	labelName     = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*`)
	matchOp       = regexp.MustCompile(`^(=~|!~|!=|=)`)
)

// rangeSelectors finds every increase(), rate() and irate() in expr and
// parses its argument, which must be a plain range selector
// name{matchers}[range]: anything else (a subquery, a function) is an
// error, so that nothing escapes the check unseen.
func rangeSelectors(expr string) ([]selectorUse, error) {
	var out []selectorUse
	for _, loc := range rangeFunction.FindAllStringSubmatchIndex(expr, -1) {
		function := expr[loc[2]:loc[3]]
		sel, err := parseRangeSelector(expr[loc[1]:])
		if err != nil {
			return out, fmt.Errorf("%s(...) at offset %d: %v", function, loc[0], err)
		}
		out = append(out, selectorUse{function: function, sel: sel})
	}
	return out, nil
}

func parseRangeSelector(s string) (selector, error) {
	var sel selector
	s = strings.TrimLeft(s, " \t\n")
	sel.name = metricName.FindString(s)
	if sel.name == "" {
		return sel, fmt.Errorf("argument %.30q is not a metric selector", s)
	}
	s = strings.TrimLeft(s[len(sel.name):], " \t\n")
	if strings.HasPrefix(s, "{") {
		s = s[1:]
		for {
			s = strings.TrimLeft(s, " \t\n,")
			if strings.HasPrefix(s, "}") {
				s = s[1:]
				break
			}
			var m matcher
			if m.label = labelName.FindString(s); m.label == "" {
				return sel, fmt.Errorf("bad label matcher at %.30q", s)
			}
			s = strings.TrimLeft(s[len(m.label):], " \t\n")
			if m.op = matchOp.FindString(s); m.op == "" {
				return sel, fmt.Errorf("bad matcher operator at %.30q", s)
			}
			s = strings.TrimLeft(s[len(m.op):], " \t\n")
			quoted, err := strconv.QuotedPrefix(s)
			if err != nil || !strings.HasPrefix(quoted, `"`) {
				return sel, fmt.Errorf("label %s: value at %.30q is not a double-quoted string", m.label, s)
			}
			s = s[len(quoted):]
			if m.value, err = strconv.Unquote(quoted); err != nil {
				return sel, err
			}
			if m.op == "=~" || m.op == "!~" {
				if m.re, err = regexp.Compile("^(?:" + m.value + ")$"); err != nil {
					return sel, err
				}
			}
			if m.label != "job" && m.label != "instance" {
				sel.matchers = append(sel.matchers, m)
			}
		}
	}
	if !strings.HasPrefix(strings.TrimLeft(s, " \t\n"), "[") {
		return sel, fmt.Errorf("%s is not followed by a range [...]", sel.name)
	}
	sort.Slice(sel.matchers, func(i, j int) bool { return sel.matchers[i].label < sel.matchers[j].label })
	return sel, nil
}
