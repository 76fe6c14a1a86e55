// SPDX-License-Identifier: Apache-2.0

//go:build container || systemd

package deploytest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// repoRoot is the exporter's module root, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test's source file")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// buildExporter builds the exporter statically into dir, as `make build` does.
func buildExporter(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "breach_exporter")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// eventually polls cond until it holds or the deadline passes; the pause
// between polls is not synchronisation, cond decides.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last: %s", within, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startAPI serves the repository's simulator of the breach monitoring
// service on the host's loopback, accepting token; its built-in account has
// alice@example.com verified and newhire@example.com unverified.
func startAPI(t *testing.T, token string) *httptest.Server {
	t.Helper()
	simulator, err := sim.New(sim.Options{Token: token, Plan: "pro", Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(simulator.Handler())
	t.Cleanup(api.Close)
	return api
}

// checkScrapeAndWebhook waits until /metrics shows what the API says about
// the two addresses (and also contains each of extra), then checks that a
// webhook with a wrong signature gets 401 and a correctly signed one 204 and
// is counted.
func checkScrapeAndWebhook(t *testing.T, metricsURL, webhookURL, secret string, extra ...string) {
	t.Helper()
	want := append([]string{
		`breach_address_state{address="alice@example.com",account="default",state="verified"} 1`,
		`breach_address_state{address="newhire@example.com",account="default",state="unverified"} 1`,
	}, extra...)
	eventually(t, 60*time.Second, "the API's state in /metrics", func() (bool, string) {
		body, code := get(metricsURL + "/metrics")
		for _, w := range want {
			if !strings.Contains(body, w) {
				return false, fmt.Sprintf("%d, no %s", code, w)
			}
		}
		return code == http.StatusOK, fmt.Sprint(code)
	})

	body := []byte(`{"event":"alert.created","severity":"critical","address":"alice@example.com","source":"index",` +
		`"summary":"deployment test","delta":{"previous_count":1,"new_count":2,"new_source_dbs":["test-db"],` +
		`"newly_exposed_fields":["password"],"has_new_plaintext":true,"is_first_scan":false},` +
		`"observed_at":"` + time.Now().UTC().Format("2006-01-02T15:04:05Z") + `","dashboard_url":"https://example.invalid/a"}`)
	if code := post(t, webhookURL, body, "sha256="+strings.Repeat("0", 64)); code != http.StatusUnauthorized {
		t.Errorf("webhook with a wrong signature: %d, want 401", code)
	}
	if code := post(t, webhookURL, body, sim.Sign([]byte(secret), body)); code != http.StatusNoContent {
		t.Fatalf("signed webhook: %d, want 204", code)
	}
	counted := `breach_alerts_total{address="alice@example.com",severity="critical",source="index"} 1`
	eventually(t, 10*time.Second, "the alert in /metrics", func() (bool, string) {
		b, code := get(metricsURL + "/metrics")
		return strings.Contains(b, counted), fmt.Sprint(code)
	})
}

var client = &http.Client{Timeout: 5 * time.Second}

func get(url string) (string, int) {
	resp, err := client.Get(url)
	if err != nil {
		return err.Error(), 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode
}

func post(t *testing.T, url string, body []byte, signature string) int {
	t.Helper()
	resp, err := client.Do(testkit.SignedRequest(t, url, body, signature))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
