// SPDX-License-Identifier: Apache-2.0

package config

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// validateOwnerLabels checks owner_labels: Prometheus label names, not
// reserved, each once, at most breach.MaxOwnerLabelNames (each is a label
// of breach_address_info).
func (c *Config) validateOwnerLabels(fail func(string, ...any)) {
	if len(c.OwnerLabels) > breach.MaxOwnerLabelNames {
		fail("owner_labels: %d names, at most %d", len(c.OwnerLabels), breach.MaxOwnerLabelNames)
	}
	first := map[string]int{}
	for i, name := range c.OwnerLabels {
		j, dup := first[name]
		switch {
		case !breach.ValidLabelName(name):
			fail("owner_labels[%d]: %q is not a label name: [a-zA-Z_][a-zA-Z0-9_]*, not starting with __, not address or account", i, echo(name))
		case dup:
			fail("owner_labels[%d]: %q duplicates owner_labels[%d]", i, name, j)
		default:
			first[name] = i
		}
	}
}

// validateAddressLabels checks the labels of the address at path: names
// from owner_labels, values UTF-8 of at most breach.MaxOwnerLabelBytes.
func (c *Config) validateAddressLabels(path string, labels map[string]string, fail func(string, ...any)) {
	for _, name := range slices.Sorted(maps.Keys(labels)) {
		v := labels[name]
		switch {
		case !slices.Contains(c.OwnerLabels, name):
			fail("%s.labels: %q is not one of owner_labels (%s)", path, echo(name), strings.Join(c.OwnerLabels, ", "))
		case !utf8.ValidString(v):
			fail("%s.labels.%s: not valid UTF-8", path, name)
		case len(v) > breach.MaxOwnerLabelBytes:
			fail("%s.labels.%s: %d bytes, at most %d", path, name, len(v), breach.MaxOwnerLabelBytes)
		}
	}
}
