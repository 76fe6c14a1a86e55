// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// followWithin is how soon the watched set must follow a change of the
// address files: a ConfigMap update must reach the exporter before anyone
// wonders whether it did.
const followWithin = 5 * time.Second

// watchedAddresses are the address labels of breach_address_state, one
// series per watched address, sorted.
func watchedAddresses(metrics string) []string {
	var out []string
	for _, line := range strings.Split(metrics, "\n") {
		rest, ok := strings.CutPrefix(line, `breach_address_state{address="`)
		if !ok {
			continue
		}
		addr, _, _ := strings.Cut(rest, `"`)
		out = append(out, addr)
	}
	slices.Sort(out)
	return out
}

// kubeletUpdate writes files into dir the way the kubelet updates a
// ConfigMap volume: each file is a symlink through ..data, itself a
// symlink to a directory of this version; the update renames a new ..data
// over the old one, so the files themselves are never written.
func kubeletUpdate(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	data := "..2026_11_26_" + version
	if err := os.Mkdir(filepath.Join(dir, data), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		testkit.WriteFile(t, filepath.Join(dir, data, name), content)
		if _, err := os.Lstat(filepath.Join(dir, name)); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Symlink(data, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// TestAddressFiles runs the built binary with addresses from a plain file,
// a YAML file and a ConfigMap volume beside the config's: the watched set
// follows each addition, removal, breakage and ConfigMap update within 5 s
// (on the files' events: the timer is an hour), a broken file keeps its
// last good addresses, and the metrics say so. --config.check names every
// problem with its file and line.
func TestAddressFiles(t *testing.T) {
	bin := binary(t, "builds the binary and runs it")
	api := newStandIn(t)
	dir := t.TempDir()
	lists := filepath.Join(dir, "lists")
	cm := filepath.Join(dir, "configmap")
	for _, d := range []string{lists, cm} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	hr := filepath.Join(lists, "hr.txt")
	it := filepath.Join(lists, "it.yaml")
	testkit.WriteFile(t, hr, "# HR export\nbob@example.com\nALICE@example.com\ncarol@example.com\n")
	testkit.WriteFile(t, it, "- dave@example.com\n")
	kubeletUpdate(t, cm, "1", map[string]string{"sales.txt": "erin@example.com\n"})
	sales := filepath.Join(cm, "sales.txt")

	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	cfgFile := filepath.Join(dir, "breach_exporter.yml")
	testkit.WriteFile(t, cfgFile, fmt.Sprintf("api:\n  base_url: %s\n  token_file: token\n"+
		"refresh: {files_interval: 1h}\naddresses: [alice@example.com]\n"+
		"addresses_files: [lists/*.txt, lists/*.yaml, configmap/*.txt]\n", api.BaseURL()))

	addr := testkit.FreeAddress(t)
	p := startProcess(t, bin, "--config.file", cfgFile, "--web.listen-address", addr, "--storage.path", t.TempDir())
	url := "http://" + addr + "/metrics"
	servesMetrics(t, url)

	// follow waits until the watched addresses are want, and returns the
	// exposition that shows it.
	follow := func(what string, want ...string) string {
		t.Helper()
		slices.Sort(want)
		deadline := time.Now().Add(followWithin)
		for {
			_, metrics := testkit.Get(t, url)
			got := watchedAddresses(metrics)
			if slices.Equal(got, want) {
				// One scrape gathers the file metrics before it renders
				// the addresses, so it can straddle a re-read: the file
				// read, then the watchlist synced. The next scrape
				// starts after both and shows the file's metrics too.
				_, metrics = testkit.Get(t, url)
				return metrics
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: watched %q after %s, want %q", what, got, followWithin, want)
			}
			time.Sleep(20 * time.Millisecond) // a poll's pace, not a synchronisation
		}
	}
	expect := func(metrics string, series map[string]float64) {
		t.Helper()
		for s, want := range series {
			if got := sampleValue(metrics, s); got != want {
				t.Errorf("%s = %v, want %v", s, got, want)
			}
		}
	}
	fileSeries := func(name, file string) string { return fmt.Sprintf("%s{file=%q}", name, file) }

	metrics := follow("at start", "alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com")
	expect(metrics, map[string]float64{
		fileSeries("breach_exporter_address_file_addresses", hr):            3,
		fileSeries("breach_exporter_address_file_duplicate_addresses", hr):  1, // ALICE is the config's alice
		fileSeries("breach_exporter_address_file_addresses", it):            1,
		fileSeries("breach_exporter_address_file_addresses", sales):         1,
		fileSeries("breach_exporter_address_file_read_errors_total", hr):    0,
		fileSeries("breach_exporter_address_file_read_errors_total", it):    0,
		fileSeries("breach_exporter_address_file_read_errors_total", sales): 0,
		fileSeries("breach_exporter_address_file_invalid_lines", hr):        0,
		"breach_exporter_address_files_over_limit":                          0,
	})
	if sampleValue(metrics, fileSeries("breach_exporter_address_file_last_read_success_timestamp_seconds", it)) <= 0 {
		t.Error("no last successful read time for it.yaml")
	}

	// Added: a new file, and a line in an existing one (plus one invalid).
	extra := filepath.Join(lists, "new.txt")
	testkit.WriteFile(t, extra, "frank@example.com\n")
	follow("a file added", "alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com", "frank@example.com")
	testkit.WriteFile(t, hr, "bob@example.com\nnot an address\ncarol@example.com\ngina@example.com\n")
	metrics = follow("a line added", "alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com", "frank@example.com", "gina@example.com")
	expect(metrics, map[string]float64{fileSeries("breach_exporter_address_file_invalid_lines", hr): 1})

	// Removed: the file, then a line.
	if err := os.Remove(extra); err != nil {
		t.Fatal(err)
	}
	follow("a file removed", "alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "erin@example.com", "gina@example.com")
	testkit.WriteFile(t, hr, "bob@example.com\ngina@example.com\n")
	metrics = follow("a line removed", "alice@example.com", "bob@example.com", "dave@example.com", "erin@example.com", "gina@example.com")
	if sampleValue(metrics, fileSeries("breach_exporter_address_file_addresses", extra)) != -1 {
		t.Error("a removed file keeps its series")
	}

	// Broken: dave stays, and the errors count.
	before := sampleValue(metrics, fileSeries("breach_exporter_address_file_last_read_success_timestamp_seconds", it))
	testkit.WriteFile(t, it, "- dave@example.com\n- [\n")
	deadline := time.Now().Add(followWithin)
	for sampleValue(metrics, fileSeries("breach_exporter_address_file_read_errors_total", it)) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no read error counted for a broken %s after %s", it, followWithin)
		}
		time.Sleep(20 * time.Millisecond)
		_, metrics = testkit.Get(t, url)
	}
	if got := watchedAddresses(metrics); !slices.Contains(got, "dave@example.com") {
		t.Errorf("a broken file lost its last good addresses: %q", got)
	}
	expect(metrics, map[string]float64{
		fileSeries("breach_exporter_address_file_addresses", it):                           1,
		fileSeries("breach_exporter_address_file_last_read_success_timestamp_seconds", it): before,
	})

	// A ConfigMap update: the symlink swap is seen.
	kubeletUpdate(t, cm, "2", map[string]string{"sales.txt": "hank@example.com\nerin@example.com\nivy@example.com\n"})
	follow("a ConfigMap update", "alice@example.com", "bob@example.com", "dave@example.com", "erin@example.com", "gina@example.com", "hank@example.com", "ivy@example.com")
	kubeletUpdate(t, cm, "3", map[string]string{"sales.txt": "ivy@example.com\n"})
	metrics = follow("a ConfigMap update", "alice@example.com", "bob@example.com", "dave@example.com", "gina@example.com", "ivy@example.com")
	expect(metrics, map[string]float64{fileSeries("breach_exporter_address_file_addresses", sales): 1})

	// Fixed: the broken file is read again.
	testkit.WriteFile(t, it, "- jack@example.com\n")
	follow("a broken file fixed", "alice@example.com", "bob@example.com", "gina@example.com", "ivy@example.com", "jack@example.com")

	// --config.check names each problem with its file and line.
	testkit.WriteFile(t, hr, "bob@example.com\nnot an address\n")
	testkit.WriteFile(t, it, "- [\n")
	out, err := exec.Command(bin, "--config.file", cfgFile, "--config.check").CombinedOutput()
	if code := exitCode(err); code != 1 {
		t.Errorf("--config.check exited %d, want 1:\n%s", code, out)
	}
	for _, want := range []string{hr + `:2: addresses_files: "not an address" is not a valid email address`, it + ": not valid YAML: line 1"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--config.check output lacks %q:\n%s", want, out)
		}
	}

	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}

func exitCode(err error) int {
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
