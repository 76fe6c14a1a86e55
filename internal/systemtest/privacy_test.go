// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Outside email mode no log line of the built binary shows an address: not
// the scheduler's (a transport error repeats the request URL, whose query is
// the address), not the webhook's discovery, at debug level. The API is a
// closed port, so every read fails.
func TestLogsShowNoAddress(t *testing.T) {
	bin := binary(t, "seconds of real time: the API reads fail and back off")
	const secret = "privacy-test-webhook-secret"
	key := []byte("privacy-test-label-key")
	for _, mode := range []string{"hash", "alias", "hmac"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
			testkit.WriteFile(t, filepath.Join(dir, "secret"), secret+"\n")
			testkit.WriteFile(t, filepath.Join(dir, "key"), string(key)+"\n")
			labels := "labels: {address: " + mode + "}\n"
			if mode != "hash" {
				labels = "labels: {address: " + mode + ", address_key_file: key}\n"
			}
			cfgFile := filepath.Join(dir, "breach_exporter.yml")
			testkit.WriteFile(t, cfgFile, "api: {base_url: 'http://127.0.0.1:1/api/v1', token_file: token, requests_per_minute: 60}\n"+
				"refresh: {interval: 1s, me_interval: 1h}\n"+labels+
				"addresses: [{email: Secret.Person@example.com, alias: ops}]\nwebhook: {secret_files: [secret]}\n")

			hook := testkit.FreeAddress(t)
			p := startProcess(t, bin, "--config.file", cfgFile, "--web.listen-address", testkit.FreeAddress(t), "--webhook.listen-address", hook,
				"--storage.path", "", "--log.level", "debug")

			body := []byte(`{"event":"alert.created","severity":"info","address":"Secret.Discovered@example.com","source":"index",` +
				`"delta":{},"observed_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`)
			deadline := time.Now().Add(20 * time.Second)
			for posted := false; ; {
				if !posted {
					posted = postSigned(t, "http://"+hook+"/webhook", body, sim.Sign([]byte(secret), body))
				}
				// Both addresses read (and failed) at least once.
				if posted && p.logs.Count("Reading the address failed") >= 2 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no failed reads of both addresses in 20 s:\n%s", p.logs.String())
				}
				time.Sleep(50 * time.Millisecond) // polling the log output, with a deadline
			}

			logs := p.logs.String()
			if strings.Contains(strings.ToLower(logs), "secret.") || strings.Contains(logs, "%40") {
				t.Fatalf("a log line shows an address:\n%s", logs)
			}
			want := map[string]string{
				"hash":  breach.HashLabel("secret.discovered@example.com"),
				"alias": breach.HMACLabel(key, "secret.discovered@example.com"),
				"hmac":  breach.HMACLabel(key, "secret.discovered@example.com"),
			}[mode]
			if !strings.Contains(logs, "address="+want) || !strings.Contains(logs, "breaches?<redacted>") {
				t.Fatalf("the logs name no address by its label %s, or show no URL:\n%s", want, logs)
			}
		})
	}
}

// postSigned reports whether the receiver accepted body; false while it is
// not listening yet.
func postSigned(t *testing.T, url string, body []byte, signature string) bool {
	t.Helper()
	resp, err := http.DefaultClient.Do(testkit.SignedRequest(t, url, body, signature))
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("signed alert answered %d", resp.StatusCode)
	}
	return true
}
