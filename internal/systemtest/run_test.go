// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// TestRun starts the built binary as a user would, against a stand-in API:
// the scrape shows the values, and a reload with a broken file answers 500
// and keeps serving; SIGTERM ends it with exit code 0. (That the values
// survive the API going down, in every way it can, is internal/faulttest's.)
func TestRun(t *testing.T) {
	bin := binary(t, "builds the binary and runs it")
	api := newStandIn(t)

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "breach_exporter.yml")
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	good := fmt.Sprintf("api:\n  base_url: %s\n  token_file: token\n  requests_per_minute: 60\n"+
		"refresh: {interval: 1m, me_interval: 1m}\naddresses: [alice@example.com]\n", api.BaseURL())
	testkit.WriteFile(t, cfgFile, good)

	addr := testkit.FreeAddress(t)
	p := startProcess(t, bin, "--config.file", cfgFile, "--web.listen-address", addr, "--storage.path", t.TempDir())
	base := "http://" + addr
	var metrics string
	testkit.Eventually(t, "alice's breaches in /metrics", func() bool {
		_, metrics = testkit.Get(t, base+"/metrics")
		return strings.Contains(metrics, `breach_source_breaches{address="alice@example.com",source="archive"} 2`) &&
			strings.Contains(metrics, `breach_api_up{account="default"} 1`)
	})
	for _, want := range []string{
		`breach_api_up{account="default"} 1`,
		`breach_account_info{account="default",plan="pro"} 1`,
		`breach_source_plaintext_password{address="alice@example.com",source="archive"} 1`,
		`breach_address_new_databases_total{address="alice@example.com"} 0`,
		`breach_addresses{state="verified"} 1`,
		`breach_exporter_build_info{`,
		`breach_exporter_config_last_reload_successful 1`,
		// The handler's own series, as every exporter's /metrics has them.
		`promhttp_metric_handler_requests_total{code="200"} `,
		`promhttp_metric_handler_requests_total{code="503"} 0`,
		`promhttp_metric_handler_requests_in_flight 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	for path, want := range map[string]int{"/": 200, "/-/healthy": 200, "/-/ready": 200, "/-/reload": 405} {
		if code, _ := testkit.Get(t, base+path); code != want {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
	}

	// A broken config: 500 with the reason, and the old config keeps serving.
	testkit.WriteFile(t, cfgFile, good+"bogus_key: 1\n")
	resp, err := http.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(body), "bogus_key") {
		t.Errorf("reload of a broken file: %d %q, want 500 naming bogus_key", resp.StatusCode, body)
	}
	_, metrics = testkit.Get(t, base+"/metrics")
	if !strings.Contains(metrics, "breach_exporter_config_last_reload_successful 0") ||
		!strings.Contains(metrics, `breach_source_breaches{address="alice@example.com",source="archive"} 2`) {
		t.Error("after a failed reload the old values must stay and the reload gauge must be 0")
	}

	// A named pipe where the config was: 500 at once naming it, and the old
	// config keeps serving: a reload that blocked would hold every later one.
	if err := os.Remove(cfgFile); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(cfgFile, 0o600); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err = client.Post(base+"/-/reload", "", nil)
	if err != nil {
		t.Fatalf("reload of a named pipe: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 500 || !strings.Contains(string(body), cfgFile+": not a regular file (a named pipe)") {
		t.Errorf("reload of a named pipe: %d %q, want 500 naming it", resp.StatusCode, body)
	}
	if _, metrics = testkit.Get(t, base+"/metrics"); !strings.Contains(metrics, `breach_source_breaches{address="alice@example.com",source="archive"} 2`) {
		t.Error("after a reload of a named pipe the old values must stay")
	}

	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}
}
