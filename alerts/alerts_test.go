package alerts

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/golden"
)

const runbookBase = "https://github.com/breach-exporter/breach_exporter/blob/main/docs/runbook.md#"

var (
	// A metric name of the exporter (or up) and the selector that follows it.
	metricRef = regexp.MustCompile(`\b(up|breach_[a-z0-9_]+)\b(\{[^}]*\})?`)
	// A recorded threshold, the only series without the job selector.
	thresholdRef = regexp.MustCompile(`breach:[a-z_]+:threshold`)
)

func mustRules(t *testing.T) []Rule {
	t.Helper()
	rules, err := Rules()
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	return rules
}

// The README's sed one-liner retargets the rules only if every selector
// carries exactly job="breach". Every alert pages on the default families:
// none reads a detail family, which the default does not serve.
func TestEverySelectorCarriesTheJobSelector(t *testing.T) {
	for _, r := range mustRules(t) {
		for _, m := range metricRef.FindAllStringSubmatch(r.Expr, -1) {
			if !golden.IsContractMetric(m[1]) {
				t.Errorf("%s: %s is not a metric of the exporter's contract", r.Name(), m[1])
			}
			if golden.IsDetailFamily(m[1]) {
				t.Errorf("%s: reads %s, a detail family the default does not serve", r.Name(), m[1])
			}
			if !strings.Contains(m[2], `job="breach"`) {
				t.Errorf("%s: %s lacks the selector job=\"breach\"", r.Name(), m[0])
			}
		}
	}
}

func TestThresholdsAreRecordedAndUsed(t *testing.T) {
	rules := mustRules(t)
	recorded := map[string]bool{}
	for _, r := range rules {
		if r.Record != "" {
			if !thresholdRef.MatchString(r.Record) {
				t.Errorf("recording rule %s is not a threshold breach:<name>:threshold", r.Record)
			}
			recorded[r.Record] = true
		}
	}
	used := map[string]bool{}
	for _, r := range rules {
		for _, name := range thresholdRef.FindAllString(r.Expr, -1) {
			if r.Alert == "" {
				t.Errorf("threshold %s used outside an alert", name)
			}
			if !recorded[name] {
				t.Errorf("%s reads %s, which no rule records", r.Name(), name)
			}
			used[name] = true
		}
	}
	for name := range recorded {
		if !used[name] {
			t.Errorf("threshold %s is recorded but no alert reads it", name)
		}
	}
}

func TestAlertsAreLabelledAndAnnotated(t *testing.T) {
	runbook, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, line := range strings.Split(string(runbook), "\n") {
		if name, ok := strings.CutPrefix(line, "### "); ok {
			sections[name] = true
		}
	}
	seen := map[string]bool{}
	for _, r := range mustRules(t) {
		if r.Alert == "" {
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		switch r.Labels["severity"] {
		case "critical", "warning", "info":
		default:
			t.Errorf("%s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
		}
		for _, key := range []string{"summary", "description"} {
			if r.Annotations[key] == "" {
				t.Errorf("%s: no %s annotation", r.Alert, key)
			}
		}
		if want := runbookBase + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
			t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
		}
		if !sections[r.Alert] {
			t.Errorf("%s: docs/runbook.md has no section \"### %s\"", r.Alert, r.Alert)
		}
	}
	for name := range sections {
		if !seen[name] {
			t.Errorf("docs/runbook.md has a section for %s, which is no alert", name)
		}
	}
}

// promtool checks the cases; this checks that every alert has both kinds.
func TestEveryAlertHasAFiringAndASilentCase(t *testing.T) {
	data, err := os.ReadFile("breach_exporter.rules.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				Alertname string        `yaml:"alertname"`
				ExpAlerts []interface{} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.RuleFiles) != 1 || file.RuleFiles[0] != RulesFileName {
		t.Errorf("rule_files %v, want [%s]", file.RuleFiles, RulesFileName)
	}
	fires, silent := map[string]bool{}, map[string]bool{}
	for _, tc := range file.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			} else {
				silent[a.Alertname] = true
			}
		}
	}
	for _, r := range mustRules(t) {
		if r.Alert == "" {
			continue
		}
		if !fires[r.Alert] {
			t.Errorf("%s: no test case where it fires", r.Alert)
		}
		if !silent[r.Alert] {
			t.Errorf("%s: no test case where it stays silent", r.Alert)
		}
	}
}

func TestParseReportsBadYAML(t *testing.T) {
	if _, err := parse([]byte("groups: [")); err == nil {
		t.Fatal("parse accepted broken YAML")
	}
}
