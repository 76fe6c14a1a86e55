// SPDX-License-Identifier: Apache-2.0

package config

import (
	"slices"
	"strings"
)

// DetailFamilies are the per-address families served only when
// metrics.detail_families names them. Each multiplies a security team's
// series by its number of addresses; the default serves what the product
// promises (state, last refresh, and per feed the breach count, plaintext
// flag and last change) and what the shipped rules read.
var DetailFamilies = []string{
	"breach_alert_exposed_fields_total",
	"breach_alert_last_observed_timestamp_seconds",
	"breach_alert_new_databases_total",
	"breach_alert_new_plaintext_passwords_total",
	"breach_source_database_info",
	"breach_source_databases",
	"breach_source_field_exposed",
	"breach_source_last_scanned_timestamp_seconds",
}

// MetricsConfig says which optional families the exporter serves.
type MetricsConfig struct {
	// DetailFamilies switches on per-address detail families by name
	// (DetailFamilies); a reload applies a change.
	DetailFamilies []string `yaml:"detail_families"`
	// AddressInfo serves breach_address_info, one series per address
	// with its owner labels; unset means yes.
	AddressInfo *bool `yaml:"address_info"`
}

// Info reports whether breach_address_info is served.
func (c *MetricsConfig) Info() bool { return c.AddressInfo == nil || *c.AddressInfo }

// Detail reports whether the detail family name is switched on.
func (c *MetricsConfig) Detail(name string) bool {
	return slices.Contains(c.DetailFamilies, name)
}

func (c *MetricsConfig) validate(fail func(string, ...any)) {
	first := map[string]int{}
	for i, name := range c.DetailFamilies {
		if !slices.Contains(DetailFamilies, name) {
			fail("metrics.detail_families[%d]: %q is not a detail family; the detail families are %s", i, echo(name), strings.Join(DetailFamilies, ", "))
			continue
		}
		if j, seen := first[name]; seen {
			fail("metrics.detail_families[%d]: %q duplicates metrics.detail_families[%d]", i, name, j)
			continue
		}
		first[name] = i
	}
}
