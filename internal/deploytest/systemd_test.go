// SPDX-License-Identifier: Apache-2.0

//go:build systemd

package deploytest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
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

// TestSystemdUnitRuns starts the unit under a real systemd: systemd-nspawn
// boots this machine's /usr (read-only) as a container on the host's network
// with a minimal /etc, the unit (ExecStart pointed at a fresh build, its
// listeners moved to free loopback ports) and the configuration and
// credentials where the unit expects them. The exporter must come up with
// all of the unit's sandboxing in force, read the simulator's API, answer a
// signed webhook, run as a dynamic user without capabilities, and get its
// state directory.
func TestSystemdUnitRuns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("booting systemd-nspawn needs root")
	}
	if _, err := exec.LookPath("systemd-nspawn"); err != nil {
		t.Fatal("systemd-nspawn is not installed: `make systemd-test` installs Debian's systemd-container package")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // the dynamic user runs the binary from here
		t.Fatal(err)
	}
	bin := buildExporter(t, dir)

	token := "svc_ak_" + randomHex(t, 16)
	secret := randomHex(t, 32)
	api := startAPI(t, token)
	addrs := freeAddrs(t, 2)
	webAddr, hookAddr := addrs[0], addrs[1]

	// The unit, as installed, but for ExecStart's binary and listeners.
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "breach_exporter.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := execStart.ReplaceAllString(string(raw), "ExecStart=/opt/breach_exporter/breach_exporter")
	for flag, addr := range map[string]string{"--web.listen-address": webAddr, "--webhook.listen-address": hookAddr} {
		re := regexp.MustCompile(regexp.QuoteMeta(flag) + `=\S+`)
		if !re.MatchString(unit) {
			t.Fatalf("the unit's ExecStart has no %s", flag)
		}
		unit = re.ReplaceAllString(unit, flag+"="+addr)
	}
	unitFile := filepath.Join(dir, "breach_exporter.service")
	write(t, unitFile, unit, 0o644)

	// /etc/breach_exporter as the unit's comments describe it.
	etc := filepath.Join(dir, "etc-breach_exporter")
	write(t, filepath.Join(etc, "breach_exporter.yml"), fmt.Sprintf(`api:
  base_url: %s/api/v1
  token_file: /run/credentials/breach_exporter.service/breach_api_token
addresses: [alice@example.com, newhire@example.com]
webhook:
  secret_files: [/run/credentials/breach_exporter.service/breach_webhook_secret]
`, api.URL), 0o644)
	write(t, filepath.Join(etc, "credentials", "api_token"), token+"\n", 0o400)
	write(t, filepath.Join(etc, "credentials", "webhook_secret"), secret+"\n", 0o400)

	// A minimal OS tree around the host's /usr.
	root := filepath.Join(dir, "root")
	for _, d := range []string{"usr", "var", "tmp", "run", "proc", "sys", "dev", "root", "etc", "opt/breach_exporter"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	osRelease, err := os.ReadFile("/usr/lib/os-release")
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "etc", "os-release"), string(osRelease), 0o644)
	write(t, filepath.Join(root, "etc", "machine-id"), "", 0o444)
	write(t, filepath.Join(root, "etc", "passwd"), "root:x:0:0:root:/root:/bin/sh\n", 0o644)
	write(t, filepath.Join(root, "etc", "group"), "root:x:0:\n", 0o644)
	write(t, filepath.Join(root, "etc", "nsswitch.conf"), "passwd: files systemd\ngroup: files systemd\nshadow: files\nhosts: files\n", 0o644)

	machine := "breach-test-" + randomHex(t, 4)
	var console testkit.SyncBuffer
	nspawn := exec.Command("systemd-nspawn", "--quiet", "--directory", root, "--machine", machine,
		// No machined or systemd may run on the host (CI containers): no
		// registration, no scope of its own.
		"--register=no", "--keep-unit",
		"--bind-ro=/usr",
		"--bind-ro="+filepath.Dir(bin)+":/opt/breach_exporter",
		"--bind-ro="+etc+":/etc/breach_exporter",
		"--bind-ro="+unitFile+":/etc/systemd/system/breach_exporter.service",
		"--boot", "systemd.unit=breach_exporter.service", "systemd.journald.forward_to_console=1")
	nspawn.Stdout, nspawn.Stderr = &console, &console
	if err := nspawn.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- nspawn.Wait() }()
	defer func() {
		// SIGTERM asks the container's systemd to shut down cleanly.
		nspawn.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			nspawn.Process.Kill()
			<-exited
			t.Error("systemd-nspawn did not stop within 30 s of SIGTERM")
		}
		// nspawn leaves this mount propagation directory behind when /run is
		// not a tmpfs.
		os.RemoveAll(filepath.Join("/run/systemd/nspawn/propagate", machine))
		if t.Failed() {
			t.Logf("container console:\n%s", console.String())
		}
	}()
	start := time.Now()
	eventually(t, 60*time.Second, "the exporter under systemd to listen", func() (bool, string) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("systemd-nspawn exited: %v", err)
		default:
		}
		_, code := get("http://" + webAddr + "/-/healthy")
		return code == 200, fmt.Sprint(code)
	})
	t.Logf("breach_exporter.service up under systemd in %s", time.Since(start).Round(time.Millisecond))

	checkScrapeAndWebhook(t, "http://"+webAddr, "http://"+hookAddr+"/webhook", secret)

	// The process as systemd started it.
	pid := exporterPID(t, "--web.listen-address="+webAddr)
	status, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var uid int
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:\t"); ok {
			uid, _ = strconv.Atoi(strings.Fields(v)[0])
		}
	}
	// systemd's dynamic users are 61184-65519.
	if uid < 61184 || uid > 65519 {
		t.Errorf("the exporter runs as uid %d, not a dynamic user", uid)
	}
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want+"\n") {
			t.Errorf("exporter process: no %q in its status:\n%s", want, status)
		}
	}
	state, err := os.Stat(filepath.Join(root, "var", "lib", "private", "breach_exporter"))
	if err != nil {
		t.Fatalf("StateDirectory: %v", err)
	}
	if st := state.Sys().(*syscall.Stat_t); int(st.Uid) != uid || state.Mode().Perm() != 0o700 {
		t.Errorf("state directory: owner %d, mode %v; want %d, 0700", st.Uid, state.Mode().Perm(), uid)
	}
}

// exporterPID finds the running exporter whose command line has arg.
func exporterPID(t *testing.T, arg string) string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if strings.HasSuffix(args[0], "breach_exporter") && slices.Contains(args, arg) {
			return e.Name()
		}
	}
	t.Fatalf("no breach_exporter process with %s", arg)
	return ""
}

func write(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// freeAddrs returns n distinct free loopback addresses; all n listeners are
// open at once so that the kernel cannot hand out the same port twice.
func freeAddrs(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		addrs[i] = l.Addr().String()
	}
	return addrs
}
