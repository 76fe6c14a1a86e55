// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Binary is a main package built once per test binary: the tests that
// exercise the process as users run it share one build, made by the first
// test that asks for it (so a run whose tests all skip builds nothing).
// TestMain calls Remove after m.Run.
type Binary struct {
	pkg  string
	once sync.Once
	dir  string
	path string
	err  error
}

// NewBinary is the build of the main package at pkg (a package path or a
// directory); nothing is built yet.
func NewBinary(pkg string) *Binary { return &Binary{pkg: pkg} }

// Path builds the binary on the first call and returns its path; a failed
// build fails every test that asks for it, with the compiler's output.
func (b *Binary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() { b.path, b.err = b.build() })
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func (b *Binary) build() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go tool on PATH to build %s: %w", b.pkg, err)
	}
	// Not a test's TempDir: the build outlives the test that made it.
	if b.dir, err = os.MkdirTemp("", "testkit-build-"); err != nil {
		return "", err
	}
	bin := filepath.Join(b.dir, filepath.Base(b.pkg))
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", bin, b.pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", b.pkg, err, out)
	}
	return bin, nil
}

// Remove deletes the build, if one was made.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
