package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BuildBinary builds the main package at pkg (a package path or a
// directory) into the test's temporary directory and returns its path:
// tests that exercise the process as users run it use the built binary.
func BuildBinary(t testing.TB, pkg string) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH to build %s: %v", pkg, err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", pkg, err, out)
	}
	return bin
}
