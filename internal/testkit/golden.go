package testkit

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
)

// moduleRoot is the folder of go.mod, found from this file's path so that
// any package's tests can read the module's files.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// GoldenFiles are the golden expositions: exactly what /metrics serves for
// fixed states (internal/exporter's TestGolden keeps them true).
func GoldenFiles() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(moduleRoot(), "internal", "exporter", "testdata", "golden", "*.prom"))
	if err == nil && len(files) == 0 {
		err = fmt.Errorf("no golden expositions under %s", moduleRoot())
	}
	return files, err
}

var recordedRule = regexp.MustCompile(`(?m)^\s*-?\s*record:\s*(\S+)`)

var contract = sync.OnceValues(func() (map[string]bool, error) {
	names := map[string]bool{"up": true}
	files, err := GoldenFiles()
	if err != nil {
		return nil, err
	}
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line != "" && !strings.HasPrefix(line, "#") {
				names[line[:strings.IndexAny(line, "{ ")]] = true
			}
		}
	}
	rules, err := os.ReadFile(filepath.Join(moduleRoot(), "alerts", "breach_exporter.rules.yml"))
	if err != nil {
		return nil, err
	}
	for _, m := range recordedRule.FindAllStringSubmatch(string(rules), -1) {
		names[m[1]] = true
	}
	return names, nil
})

// IsContractMetric reports whether the shipped rules and dashboards may
// query name: a series name the golden expositions serve (a histogram's
// _bucket, _sum and _count included), Prometheus's up, or a series the
// rules record. It panics when those files cannot be read.
func IsContractMetric(name string) bool {
	names, err := contract()
	if err != nil {
		panic(err)
	}
	return names[name]
}
