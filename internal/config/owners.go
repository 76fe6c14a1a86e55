// SPDX-License-Identifier: Apache-2.0

package config

import (
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prometheus/common/config"

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
		case !slices.Contains(c.OwnerLabels, name) && breach.ValidEmail(name):
			fail("%s.labels: %sis not one of owner_labels (%s)", path, c.quoteAddress(name), strings.Join(c.OwnerLabels, ", "))
		case !slices.Contains(c.OwnerLabels, name):
			fail("%s.labels: %q is not one of owner_labels (%s)", path, echo(name), strings.Join(c.OwnerLabels, ", "))
		case !utf8.ValidString(v):
			fail("%s.labels.%s: not valid UTF-8", path, name)
		case len(v) > breach.MaxOwnerLabelBytes:
			fail("%s.labels.%s: %d bytes, at most %d", path, name, len(v), breach.MaxOwnerLabelBytes)
		}
	}
}

// AddressFiles is an entry of addresses_files: a glob, in YAML a plain
// string or {glob, labels}, whose labels are the owner labels of every
// address of the files it matches.
type AddressFiles struct {
	Glob   string            `yaml:"glob"`
	Labels map[string]string `yaml:"labels"`
}

// UnmarshalYAML accepts a glob as a plain string or as {glob, labels}.
func (g *AddressFiles) UnmarshalYAML(unmarshal func(any) error) error {
	var glob string
	if err := unmarshal(&glob); err == nil {
		*g = AddressFiles{Glob: glob}
		return nil
	}
	type plain AddressFiles
	return unmarshal((*plain)(g))
}

// Globs are the globs of files, in order.
func Globs(files []AddressFiles) []string {
	out := make([]string, len(files))
	for i, f := range files {
		out[i] = f.Glob
	}
	return out
}

// GlobLabels are the owner labels of each glob of files that has any, by
// glob.
func GlobLabels(files []AddressFiles) map[string][]breach.Label {
	out := map[string][]breach.Label{}
	for _, f := range files {
		if len(f.Labels) > 0 {
			out[f.Glob] = breach.OwnerLabels(f.Labels)
		}
	}
	return out
}

// joinGlobs makes each glob of files relative to dir.
func joinGlobs(dir string, files []AddressFiles) {
	for i := range files {
		files[i].Glob = config.JoinDir(dir, files[i].Glob)
	}
}
