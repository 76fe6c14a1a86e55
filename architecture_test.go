// SPDX-License-Identifier: Apache-2.0

package main

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/breach-exporter/breach_exporter"

var (
	packageRow = regexp.MustCompile("^\\| `([a-z/]+)`")
	ourPackage = regexp.MustCompile("`((?:internal/)?[a-z]+)`")
)

// documentedImports reads the package table of docs/architecture.md: for
// each package, the packages of ours its column "imports of ours" lists.
func documentedImports(t *testing.T, page string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, line := range strings.Split(page, "\n") {
		m := packageRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) != 3 {
			t.Fatalf("docs/architecture.md: a package row needs 3 cells: %s", line)
		}
		imports := []string{}
		for _, im := range ourPackage.FindAllStringSubmatch(cells[2], -1) {
			imports = append(imports, im[1])
		}
		if len(imports) == 0 && cells[2] != "none" {
			t.Fatalf("docs/architecture.md: %s's imports must be packages in backticks or none: %q", m[1], cells[2])
		}
		slices.Sort(imports)
		out[m[1]] = imports
	}
	return out
}

// actualImports asks go list for the packages main is built from and their
// imports of ours, outside tests.
func actualImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}:{{join .Imports " "}}`, ".")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	got := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, imports, _ := strings.Cut(line, ":")
		name, ok := ours(path)
		if !ok {
			continue
		}
		list := []string{}
		for _, im := range strings.Fields(imports) {
			if n, ok := ours(im); ok {
				list = append(list, n)
			}
		}
		slices.Sort(list)
		got[name] = list
	}
	return got
}

// ours names a package of this module as the page does ("main",
// "collector", "internal/api").
func ours(path string) (string, bool) {
	if path == module {
		return "main", true
	}
	rest, ok := strings.CutPrefix(path, module+"/")
	return rest, ok
}

// docs/architecture.md's package table names every package the exporter is
// built from and exactly the packages of ours each one imports.
func TestArchitecturePageMatchesTheImports(t *testing.T) {
	page, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedImports(t, string(page))
	actual := actualImports(t)
	for pkg, imports := range actual {
		doc, ok := documented[pkg]
		if !ok {
			t.Errorf("docs/architecture.md has no row for %s (imports %v)", pkg, imports)
			continue
		}
		for _, im := range imports {
			if !slices.Contains(doc, im) {
				t.Errorf("%s imports %s; docs/architecture.md does not say so", pkg, im)
			}
		}
		for _, im := range doc {
			if !slices.Contains(imports, im) {
				t.Errorf("docs/architecture.md says %s imports %s; it does not", pkg, im)
			}
		}
	}
	for pkg := range documented {
		if _, ok := actual[pkg]; !ok {
			t.Errorf("docs/architecture.md has a row for %s, which the exporter is not built from", pkg)
		}
	}
}
