//go:build systemd

package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// maxExposure is the highest `systemd-analyze security` exposure score the
// example unit may have (0 is best, 10 worst; systemd calls up to 2.0 "OK").
const maxExposure = 2.0

var (
	execStart = regexp.MustCompile(`(?m)^ExecStart=(\S+)`)
	exposure  = regexp.MustCompile(`Overall exposure level for \S+: ([0-9.]+)`)
)

// TestSystemdUnit checks examples/breach_exporter.service with systemd's own
// tools, ExecStart pointed at a freshly built exporter: `systemd-analyze
// verify` accepts it, `systemd-analyze security --offline=true` scores it at
// most maxExposure, and the exporter accepts every flag ExecStart passes.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Fatal("systemd-analyze is not installed: `make systemd-test` installs Debian's systemd package")
	}
	dir := t.TempDir()
	bin := buildExporter(t, dir)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "breach_exporter.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	m := execStart.FindStringSubmatchIndex(unit)
	if m == nil {
		t.Fatal("the unit has no ExecStart=")
	}
	unit = unit[:m[2]] + bin + unit[m[3]:]
	for _, want := range []string{"StateDirectory=breach_exporter", "DynamicUser=yes"} {
		if !strings.Contains(unit, "\n"+want+"\n") {
			t.Errorf("the unit has no %s", want)
		}
	}
	path := filepath.Join(dir, "breach_exporter.service")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := exec.Command("systemd-analyze", "verify", path).CombinedOutput()
	if err != nil || strings.Contains(string(out), path) {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}

	out, err = exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", path).CombinedOutput()
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	sm := exposure.FindSubmatch(out)
	if sm == nil {
		t.Fatalf("no exposure level in systemd-analyze security's output:\n%s", out)
	}
	score, err := strconv.ParseFloat(string(sm[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security --offline=true: exposure %.1f (at most %.1f)", score, maxExposure)
	if score > maxExposure {
		t.Errorf("exposure %.1f is above %.1f:\n%s", score, maxExposure, out)
	}

	// Every flag on ExecStart must exist: the exporter validates them and a
	// configuration like the unit's (secrets as systemd credentials) with
	// --config.check, which neither listens nor calls the API.
	args := execArgs(t, unit)
	creds := filepath.Join(dir, "credentials")
	if err := os.Mkdir(creds, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{
		"breach_api_token":      "svc_ak_systemdtest0123456789\n",
		"breach_webhook_secret": "systemd-test-secret\n",
	} {
		if err := os.WriteFile(filepath.Join(creds, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	config := filepath.Join(dir, "breach_exporter.yml")
	if err := os.WriteFile(config, []byte(`api:
  base_url: https://breaches.example.com/api/v1
  token_file: credentials/breach_api_token
addresses: [alice@example.com]
webhook:
  secret_files: [credentials/breach_webhook_secret]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	replaced := false
	for i, a := range args {
		if strings.HasPrefix(a, "--config.file=") {
			args[i], replaced = "--config.file="+config, true
		}
	}
	if !replaced {
		t.Fatalf("ExecStart has no --config.file=: %q", args)
	}
	if out, err := exec.Command(args[0], append(args[1:], "--config.check")...).CombinedOutput(); err != nil {
		t.Errorf("the exporter rejects the unit's ExecStart %q: %v\n%s", args, err, out)
	}
}

// execArgs is ExecStart's command line, continuation lines joined. The
// unit's arguments need no quoting, and the test fails if that changes.
func execArgs(t *testing.T, unit string) []string {
	t.Helper()
	var line strings.Builder
	in := false
	for _, l := range strings.Split(unit, "\n") {
		if strings.HasPrefix(l, "ExecStart=") {
			in = true
			l = strings.TrimPrefix(l, "ExecStart=")
		}
		if !in {
			continue
		}
		trimmed := strings.TrimSuffix(strings.TrimRight(l, " \t"), "\\")
		line.WriteString(trimmed + " ")
		if trimmed == strings.TrimRight(l, " \t") {
			break
		}
	}
	if strings.ContainsAny(line.String(), `"'$%`) {
		t.Fatalf("ExecStart uses quoting or specifiers this test does not expand: %s", line.String())
	}
	return strings.Fields(line.String())
}
