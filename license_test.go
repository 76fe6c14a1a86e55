// SPDX-License-Identifier: Apache-2.0

package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spdx is the first line of every Go file of the repository, in every
// module: the license (LICENSE) said where tools look for it.
const spdx = "// SPDX-License-Identifier: Apache-2.0\n"

func TestEveryGoFileNamesItsLicense(t *testing.T) {
	n := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		n++
		if !strings.HasPrefix(string(data), spdx) {
			t.Errorf("%s: the first line must be %q", path, strings.TrimSpace(spdx))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("found %d Go files: the walk is wrong", n)
	}
}
