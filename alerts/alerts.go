// Package alerts ships breach_exporter's Prometheus rules and lists their
// expressions, so that tests can evaluate every rule against a real
// Prometheus without parsing the file themselves.
package alerts

import (
	_ "embed"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// RulesFileName is the rules file, relative to this directory.
const RulesFileName = "breach_exporter.rules.yml"

//go:embed breach_exporter.rules.yml
var rulesFile []byte

// Rule is one alerting or recording rule.
type Rule struct {
	Group       string            `yaml:"-"`
	Alert       string            `yaml:"alert"`  // empty for a recording rule
	Record      string            `yaml:"record"` // empty for an alerting rule
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Name is the alert's or the recorded series' name.
func (r Rule) Name() string {
	if r.Alert != "" {
		return r.Alert
	}
	return r.Record
}

// Rules returns every rule of the shipped rules file, in file order.
func Rules() ([]Rule, error) {
	return parse(rulesFile)
}

func parse(data []byte) ([]Rule, error) {
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []Rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		return nil, fmt.Errorf("parse %s: %w", RulesFileName, err)
	}
	var rules []Rule
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			rules = append(rules, r)
		}
	}
	return rules, nil
}
