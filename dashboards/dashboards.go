// SPDX-License-Identifier: Apache-2.0

// Package dashboards ships breach_exporter's Grafana dashboards and lists the
// PromQL of every panel, so that tests can evaluate each query against a real
// Prometheus: there is no Grafana to look at them.
package dashboards

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
)

//go:embed *.json
var files embed.FS

// Query is one target of one panel. Expr still holds Grafana's variables:
// $job, $instance, $account, $address, $source (multi-value ones are used with =~, so
// ".+" selects all), $__rate_interval, $__range and $__range_s.
type Query struct {
	Dashboard string // file name, e.g. breach-overview.json
	Panel     string // panel title
	RefID     string
	Expr      string
	Instant   bool // Grafana runs it as an instant query (tables, stats)
	// Description is the panel's; it names the detail families the panel
	// needs ("needs detail family ...").
	Description string
}

type panel struct {
	Title       string  `json:"title"`
	Description string  `json:"description"`
	Panels      []panel `json:"panels"` // a collapsed row's panels
	Targets     []struct {
		RefID   string `json:"refId"`
		Expr    string `json:"expr"`
		Instant bool   `json:"instant"`
	} `json:"targets"`
}

// needsDetail is how a panel's description says it reads a detail family.
var needsDetail = regexp.MustCompile(`(?i)\bneeds? detail famil`)

// NeedsDetail reports whether the panel's description says it needs the
// detail family name ("Needs detail family name ..."): without it the
// panel has no data (its noValue text says how to switch it on).
func (q Query) NeedsDetail(name string) bool {
	return needsDetail.MatchString(q.Description) && strings.Contains(q.Description, name)
}

// Expressions lists every target of every panel of every shipped dashboard.
func Expressions() ([]Query, error) {
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		return nil, err
	}
	var queries []Query
	for _, name := range names {
		data, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		var dash struct {
			Panels []panel `json:"panels"`
		}
		if err := json.Unmarshal(data, &dash); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		queries = appendQueries(queries, name, dash.Panels)
	}
	return queries, nil
}

func appendQueries(queries []Query, dashboard string, panels []panel) []Query {
	for _, p := range panels {
		for _, t := range p.Targets {
			queries = append(queries, Query{Dashboard: dashboard, Panel: p.Title, RefID: t.RefID, Expr: t.Expr, Instant: t.Instant, Description: p.Description})
		}
		queries = appendQueries(queries, dashboard, p.Panels)
	}
	return queries
}
