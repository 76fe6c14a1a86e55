package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
)

const (
	rulesPath    = "../../../alerts/breach_exporter.rules.yml"
	manifestPath = "../prometheusrule.yaml"
)

func TestPrometheusRuleIsUpToDate(t *testing.T) {
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatal("examples/kubernetes/prometheusrule.yaml is out of date: run `go run ./examples/kubernetes/gen` from the repository root")
	}
}

// The manifest's spec.groups must be the rules file's groups, value for value.
func TestRenderKeepsEveryRule(t *testing.T) {
	rules, err := os.ReadFile(rulesPath)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := render(rules)
	if err != nil {
		t.Fatal(err)
	}
	var source struct {
		Groups interface{} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &source); err != nil {
		t.Fatal(err)
	}
	var wrapped struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec struct {
			Groups interface{} `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := yaml.UnmarshalStrict(manifest, &wrapped); err != nil {
		t.Fatalf("manifest does not parse: %v", err)
	}
	if wrapped.APIVersion != "monitoring.coreos.com/v1" || wrapped.Kind != "PrometheusRule" || wrapped.Metadata.Name == "" {
		t.Errorf("got %s %s %q, want a named monitoring.coreos.com/v1 PrometheusRule", wrapped.APIVersion, wrapped.Kind, wrapped.Metadata.Name)
	}
	if !reflect.DeepEqual(wrapped.Spec.Groups, source.Groups) {
		t.Error("spec.groups differs from the rules file's groups")
	}
}

func TestRenderRejectsAFileWithoutGroups(t *testing.T) {
	for name, input := range map[string]string{
		"empty":       "",
		"no groups":   "rules: []\n",
		"bad yaml":    "groups: [\n",
		"empty list":  "groups: []\n",
		"flow groups": "{groups: [{name: a, rules: []}]}\n",
	} {
		if _, err := render([]byte(input)); err == nil {
			t.Errorf("%s: render accepted %q", name, input)
		}
	}
}

func TestRunWritesTheManifest(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "rules.yml")
	out := filepath.Join(dir, "rule.yaml")
	if err := os.WriteFile(in, []byte("# leading comment\ngroups:\n  - name: g\n    rules: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(in, out); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(got), "spec:\n  groups:\n    - name: g\n      rules: []\n") || strings.Contains(string(got), "leading comment") {
		t.Errorf("unexpected manifest:\n%s", got)
	}
	if err := run(filepath.Join(dir, "missing.yml"), out); err == nil {
		t.Error("run accepted a missing rules file")
	}
}
