// SPDX-License-Identifier: Apache-2.0

package config

import (
	"slices"
	"testing"
)

func TestMetricsDetailFamilies(t *testing.T) {
	const base = "api:\n  base_url: https://breaches.example.com/api/v1\n"
	c, err := parseFile(t, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Metrics.DetailFamilies) != 0 {
		t.Errorf("default detail families %v, want none", c.Metrics.DetailFamilies)
	}
	c, err = parseFile(t, base+"metrics:\n  detail_families: [breach_source_database_info, breach_source_field_exposed]\n")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Metrics.Detail("breach_source_field_exposed") || c.Metrics.Detail("breach_source_databases") {
		t.Errorf("Detail does not follow %v", c.Metrics.DetailFamilies)
	}
	all := base + "metrics:\n  detail_families:\n"
	for _, name := range DetailFamilies {
		all += "    - " + name + "\n"
	}
	if c, err = parseFile(t, all); err != nil || !slices.Equal(c.Metrics.DetailFamilies, DetailFamilies) {
		t.Errorf("every detail family: %v, %v", c, err)
	}

	assertParseFails(t, base+"metrics:\n  detail_families: [breach_source_databases, breach_address_state]\n",
		"metrics.detail_families[1]", `"breach_address_state" is not a detail family`, "breach_source_field_exposed")
	assertParseFails(t, base+"metrics:\n  detail_families: [breach_source_databases, breach_source_databases]\n",
		"metrics.detail_families[1]", "duplicates metrics.detail_families[0]")
	assertParseFails(t, base+"metrics:\n  details: []\n", `unknown key "details"`)
	assertParseFails(t, base+"metrics:\n  detail_families: breach_source_databases\n", "config.yml:4")
}
