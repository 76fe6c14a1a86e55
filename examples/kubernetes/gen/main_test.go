package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

const rulesPath = "../../../alerts/breach_exporter.rules.yml"

// repoPaths are defaultPaths seen from this package's folder.
func repoPaths() paths {
	p := defaultPaths
	for _, f := range []*string{&p.Rules, &p.Dashboards, &p.Manifest, &p.Chart} {
		*f = filepath.Join("..", "..", "..", *f)
	}
	return p
}

// Every copy of the rules and the dashboards matches its source, and the
// chart has no dashboard whose source is gone.
func TestGeneratedFilesAreUpToDate(t *testing.T) {
	p := repoPaths()
	want, err := outputs(p)
	if err != nil {
		t.Fatal(err)
	}
	for f, data := range want {
		got, err := os.ReadFile(f)
		if err != nil || string(got) != string(data) {
			t.Errorf("%s is out of date: run `make generate` from the repository root", f)
		}
	}
	old, err := stale(p, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range old {
		t.Errorf("%s has no source in %s: run `make generate` from the repository root", f, p.Dashboards)
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
	dec := yaml.NewDecoder(bytes.NewReader(manifest))
	dec.KnownFields(true)
	if err := dec.Decode(&wrapped); err != nil {
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

func TestRunWritesEveryCopy(t *testing.T) {
	dir := t.TempDir()
	p := paths{
		Rules:      filepath.Join(dir, "rules.yml"),
		Dashboards: filepath.Join(dir, "dashboards"),
		Manifest:   filepath.Join(dir, "rule.yaml"),
		Chart:      filepath.Join(dir, "chart"),
	}
	rules := "# leading comment\ngroups:\n  - name: g\n    rules: []\n"
	write := func(name, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	read := func(name string) string {
		t.Helper()
		data, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	write(p.Rules, rules)
	write(filepath.Join(p.Dashboards, "a.json"), `{"title": "a"}`)
	write(filepath.Join(p.Dashboards, "notes.txt"), "not a dashboard")
	// A dashboard whose source was removed goes with the next run.
	write(filepath.Join(p.chartDashboards(), "gone.json"), `{}`)
	if err := run(p); err != nil {
		t.Fatal(err)
	}
	if got := read(p.Manifest); !strings.HasSuffix(got, "spec:\n  groups:\n    - name: g\n      rules: []\n") || strings.Contains(got, "leading comment") {
		t.Errorf("unexpected manifest:\n%s", got)
	}
	if got := read(p.chartRules()); !strings.HasPrefix(got, "# Code generated") || !strings.HasSuffix(got, rules) {
		t.Errorf("unexpected chart rules:\n%s", got)
	}
	if got := read(filepath.Join(p.chartDashboards(), "a.json")); got != `{"title": "a"}` {
		t.Errorf("chart dashboard a.json: %q", got)
	}
	entries, err := os.ReadDir(p.chartDashboards())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Errorf("chart dashboards: %v, want only a.json", entries)
	}
	p.Rules = filepath.Join(dir, "missing.yml")
	if err := run(p); err == nil {
		t.Error("run accepted a missing rules file")
	}
}
