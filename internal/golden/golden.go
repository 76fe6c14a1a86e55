// SPDX-License-Identifier: Apache-2.0

// Package golden reads the golden expositions (internal/exporter's
// testdata/golden/*.prom, kept true by its TestGolden) as the metric
// contract, for the tests of the rules and dashboards. It imports nothing
// but the standard library, so those tests build small and fast.
package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// moduleRoot is the folder of go.mod, found from this file's path so that
// any package's tests can read the module's files.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Files are the golden expositions: exactly what /metrics serves for fixed
// states.
func Files() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(moduleRoot(), "internal", "exporter", "testdata", "golden", "*.prom"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no golden expositions under %s", moduleRoot())
	}
	return files, err
}

// detailFile is the one golden exposition with every detail family on;
// internal/exporter's TestGoldenDetailFamilies holds that no other serves
// one.
const detailFile = "detail.prom"

var recordedRule = regexp.MustCompile(`(?m)^\s*-?\s*record:\s*(\S+)`)

// served reads the golden expositions once.
var served = sync.OnceValues(readContract)

// contract is what the golden expositions serve: for every series name,
// whether only detail.prom serves it, and the label names its series carry.
type contract struct {
	detailOnly map[string]bool
	labels     map[string]map[string]bool
}

// labelName is a label's name in a line of the text exposition.
var labelName = regexp.MustCompile(`[{,]([a-zA-Z_][a-zA-Z0-9_]*)="`)

func readContract() (contract, error) {
	files, err := Files()
	if err != nil {
		return contract{}, err
	}
	detailOnly := map[string]bool{}
	labels := map[string]map[string]bool{}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return contract{}, err
		}
		detail := filepath.Base(path) == detailFile
		for _, line := range strings.Split(string(data), "\n") {
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			name := line[:strings.IndexAny(line, "{ ")]
			only, seen := detailOnly[name]
			detailOnly[name] = detail && (only || !seen)
			if labels[name] == nil {
				labels[name] = map[string]bool{}
			}
			// No value in the golden files holds `,name="`.
			for _, m := range labelName.FindAllStringSubmatch(line[len(name):strings.LastIndexByte(line, ' ')], -1) {
				labels[name][m[1]] = true
			}
		}
	}
	return contract{detailOnly, labels}, nil
}

var recorded = sync.OnceValues(func() (map[string]bool, error) {
	rules, err := os.ReadFile(filepath.Join(moduleRoot(), "alerts", "breach_exporter.rules.yml"))
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, m := range recordedRule.FindAllStringSubmatch(string(rules), -1) {
		out[m[1]] = true
	}
	return out, nil
})

// IsContractMetric reports whether the shipped rules and dashboards may
// query name: a series name the golden expositions serve (a histogram's
// _bucket, _sum and _count included; store.prom has the store's),
// Prometheus's up, or a series the rules record. It panics
// when those files cannot be read.
func IsContractMetric(name string) bool {
	c, err := served()
	if err != nil {
		panic(err)
	}
	rules, err := recorded()
	if err != nil {
		panic(err)
	}
	_, ok := c.detailOnly[name]
	return ok || name == "up" || rules[name]
}

// IsDetailFamily reports whether name is served only with a detail family
// switched on (metrics.detail_families): only detail.prom serves it. It
// panics when the golden files cannot be read.
func IsDetailFamily(name string) bool {
	c, err := served()
	if err != nil {
		panic(err)
	}
	return c.detailOnly[name]
}

// DetailFamilies are the names IsDetailFamily reports, sorted.
func DetailFamilies() []string {
	c, err := served()
	if err != nil {
		panic(err)
	}
	var out []string
	for name, only := range c.detailOnly {
		if only {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// CarriesLabel reports whether the golden expositions serve name with the
// label (account on the per-key series and breach_address_state, for
// instance). It panics when the golden files cannot be read.
func CarriesLabel(name, label string) bool {
	c, err := served()
	if err != nil {
		panic(err)
	}
	return c.labels[name][label]
}
