// SPDX-License-Identifier: Apache-2.0

package examples

import (
	"go/build/constraint"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The Makefile's LINT_MODULES (what vet, staticcheck and golangci-lint run
// on) names every Go module of the repository with every build tag its
// files use; GO_MODULES (tidy-check) names every module too. No constraint
// asks for a tag to be absent: one run with all of a module's tags then
// sees all of its files.
func TestLintCoversEveryBuildTag(t *testing.T) {
	makefile := readPage(t, "../Makefile")
	lintModules := map[string][]string{}
	m := regexp.MustCompile(`(?m)^LINT_MODULES\s*:=\s*(.*)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatal("the Makefile has no LINT_MODULES line")
	}
	for _, entry := range strings.Fields(m[1]) {
		dir, tags, ok := strings.Cut(entry, ":")
		if !ok {
			t.Fatalf("LINT_MODULES entry %q is not folder:tags", entry)
		}
		lintModules[dir] = strings.FieldsFunc(tags, func(r rune) bool { return r == ',' })
	}
	g := regexp.MustCompile(`(?m)^GO_MODULES\s*:=\s*(.*)$`).FindStringSubmatch(makefile)
	if g == nil {
		t.Fatal("the Makefile has no GO_MODULES line")
	}
	goModules := strings.Fields(g[1])

	modules := map[string]bool{} // folder of each go.mod, from the root
	tagsOf := map[string]map[string]bool{}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || (strings.HasPrefix(d.Name(), ".") && path != "..")) {
			return filepath.SkipDir
		}
		rel, _ := filepath.Rel("..", path)
		switch {
		case d.Name() == "go.mod":
			modules[filepath.ToSlash(filepath.Dir(rel))] = true
		case strings.HasSuffix(d.Name(), ".go"):
			for _, tag := range buildTags(t, path) {
				mod := moduleOf(t, filepath.Dir(path))
				if tagsOf[mod] == nil {
					tagsOf[mod] = map[string]bool{}
				}
				tagsOf[mod][tag] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for mod := range modules {
		if _, ok := lintModules[mod]; !ok {
			t.Errorf("module %s is not in the Makefile's LINT_MODULES", mod)
		}
		if !slices.Contains(goModules, mod) {
			t.Errorf("module %s is not in the Makefile's GO_MODULES", mod)
		}
	}
	for mod, tags := range tagsOf {
		for tag := range tags {
			if !slices.Contains(lintModules[mod], tag) {
				t.Errorf("build tag %q of module %s is not among its LINT_MODULES tags %v", tag, mod, lintModules[mod])
			}
		}
	}
	if len(tagsOf) == 0 {
		t.Error("no //go:build line found: the walk looked in the wrong place")
	}
}

// buildTags are the tags a file's //go:build line names (none: no line).
// A negated tag fails the test: LINT_MODULES could not cover it.
func buildTags(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "package ") {
			break
		}
		if !constraint.IsGoBuild(line) {
			continue
		}
		expr, err := constraint.Parse(line)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		var walk func(constraint.Expr, bool)
		walk = func(e constraint.Expr, negated bool) {
			switch e := e.(type) {
			case *constraint.TagExpr:
				if negated {
					t.Errorf("%s: %q needs a run without the tag %q, which LINT_MODULES does not make", path, line, e.Tag)
				}
				tags = append(tags, e.Tag)
			case *constraint.NotExpr:
				walk(e.X, !negated)
			case *constraint.AndExpr:
				walk(e.X, negated)
				walk(e.Y, negated)
			case *constraint.OrExpr:
				walk(e.X, negated)
				walk(e.Y, negated)
			}
		}
		walk(expr, false)
	}
	return tags
}

// moduleOf is the folder, from the repository's root, of the module dir
// belongs to.
func moduleOf(t *testing.T, dir string) string {
	t.Helper()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			rel, _ := filepath.Rel("..", d)
			return filepath.ToSlash(rel)
		}
		if d == ".." || d == "." {
			t.Fatalf("%s is in no module", dir)
		}
	}
}
