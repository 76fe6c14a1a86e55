// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Two accounts' keys, secrets and addresses. corp is the stand-in's first
// account (testkit.APIToken), labs its second.
const (
	labsToken  = "svc_ak_labs_account"
	corpSecret = "corp-webhook-secret-0123456789"
	labsSecret = "labs-webhook-secret-0123456789"
	// A low budget, which is also the stand-in's limit per key: a request
	// over it in any of the stand-in's windows (real-time minutes) is a 429.
	accountsBudget = 5
)

var accountAddresses = map[string][]string{
	"corp": {"alice@corp.example", "carol@corp.example"},
	"labs": {"zoe@labs.example", "yan@labs.example"},
}

// TestTwoAccounts runs the built binary with two accounts against a
// stand-in that enforces each key's fixed window: each key keeps within its
// budget (no window over it, no 429), each address is read with its own
// account's key only, and a webhook counts for an address only when its
// own account's secret signed it.
func TestTwoAccounts(t *testing.T) {
	bin := binary(t, "builds the binary and runs it across a minute boundary of the stand-in's windows")
	var labs []sim.Address
	for _, a := range accountAddresses["labs"] {
		labs = append(labs, sim.Address{Email: a, Verified: true})
	}
	api := testkit.NewStandIn(t, nil, func(o *sim.Options) {
		o.MoreAccounts = []sim.Account{{Token: labsToken, Plan: "pro", Addresses: labs}}
		o.RateLimit = accountsBudget
	})
	for _, a := range accountAddresses["corp"] {
		api.Answer(a, sim.Verified())
	}

	dir := t.TempDir()
	for name, content := range map[string]string{
		"corp.token": testkit.APIToken, "labs.token": labsToken, "corp.secret": corpSecret, "labs.secret": labsSecret,
	} {
		testkit.WriteFile(t, filepath.Join(dir, name), content+"\n")
	}
	cfg := filepath.Join(dir, "breach_exporter.yml")
	account := func(name string) string {
		return fmt.Sprintf("  - name: %s\n    api: {base_url: %s, token_file: %s.token, requests_per_minute: %d}\n"+
			"    webhook: {secret_files: [%s.secret]}\n    addresses: [%s]\n",
			name, api.BaseURL(), name, accountsBudget, name, strings.Join(accountAddresses[name], ", "))
	}
	// A one-second round: both keys always have an address to read, so
	// each sends at its budget's pace (one request every 12 s).
	testkit.WriteFile(t, cfg, "refresh: {interval: 1s, me_interval: 1h}\naccounts:\n"+account("corp")+account("labs"))

	webAddr, hookAddr := testkit.FreeAddress(t), testkit.FreeAddress(t)
	p := startProcess(t, bin, "--config.file", cfg, "--web.listen-address", webAddr,
		"--webhook.listen-address", hookAddr, "--storage.path", t.TempDir())
	servesMetrics(t, "http://"+webAddr+"/metrics")

	// Webhooks: one per account signed with its own secret, then corp's
	// address signed with labs' secret.
	observed := time.Now().UTC().Add(-time.Minute).Format(sim.ObservedAtLayout)
	post := func(secret, address, summary string) {
		t.Helper()
		body := fmt.Appendf(nil, `{"event":"alert.created","severity":"critical","address":%q,"source":"combolist","summary":%q,`+
			`"delta":{"new_source_dbs":["db"],"newly_exposed_fields":["password"]},"observed_at":%q}`, address, summary, observed)
		resp, err := http.DefaultClient.Do(signedRequest(t, "http://"+hookAddr+"/webhook", secret, body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("webhook for %s (%s): %d", address, summary, resp.StatusCode)
		}
	}
	post(corpSecret, "alice@corp.example", "corp's own")
	post(labsSecret, "zoe@labs.example", "labs' own")
	post(labsSecret, "alice@corp.example", "labs signs for corp")

	alerts := func(address string) string {
		return fmt.Sprintf(`breach_alerts_total{address=%q,severity="critical",source="combolist"}`, address)
	}
	var metrics string
	testkit.Eventually(t, "the webhooks counted", func() bool {
		_, metrics = testkit.Get(t, "http://"+webAddr+"/metrics")
		return sampleValue(metrics, `breach_webhook_alerts_untracked_total{reason="other_account"}`) == 1
	})
	for series, want := range map[string]float64{
		alerts("alice@corp.example"): 1, // corp's alert; labs' for alice is not counted
		alerts("zoe@labs.example"):   1,
		alerts("carol@corp.example"): 0,
	} {
		if got := sampleValue(metrics, series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	// Run until both keys have spent one whole window of the stand-in (the
	// second of three) and every address has been read. The stand-in's
	// minutes are real ones: that takes one to two minutes.
	read := func() bool {
		seen := map[string]bool{}
		for _, r := range api.Requests() {
			seen[r.Email] = true
		}
		for _, addresses := range accountAddresses {
			for _, a := range addresses {
				if !seen[a] {
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		corp, _ := api.Windows(testkit.APIToken)
		labs, _ := api.Windows(labsToken)
		if len(corp) >= 3 && len(labs) >= 3 && read() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 3 minutes: corp's windows %+v, labs' %+v, every address read: %v", corp, labs, read())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Errorf("exit after SIGTERM: %v", err)
	}

	for name, token := range map[string]string{"corp": testkit.APIToken, "labs": labsToken} {
		windows, _ := api.Windows(token)
		t.Logf("%s's windows: %+v", name, windows)
		for _, w := range windows {
			if w.Requests > accountsBudget || w.RateLimited > 0 {
				t.Errorf("%s's window at %s: %d requests, %d answered 429; budget %d a minute", name, w.Start.Format(time.TimeOnly), w.Requests, w.RateLimited, accountsBudget)
			}
		}
		// The first window may be part of a minute; the whole one after it
		// shows the key sending at its pace, not idling (one fewer when
		// timer delays push the fifth request past the minute's end).
		if len(windows) < 3 || windows[1].Requests < accountsBudget-1 {
			t.Errorf("%s's first whole window: %+v, want about the budget %d", name, windows, accountsBudget)
		}
	}
	accountOf := map[string]int{}
	for i, name := range []string{"corp", "labs"} { // the stand-in's account indexes
		for _, a := range accountAddresses[name] {
			accountOf[a] = i
		}
	}
	for _, r := range api.Requests() {
		if r.Account < 0 || r.Faulted {
			t.Errorf("request %s %q with an unknown key or refused", r.Path, r.Email)
		}
		if r.Email != "" && r.Account != accountOf[r.Email] {
			t.Errorf("%s read with the key of account %d, want %d", r.Email, r.Account, accountOf[r.Email])
		}
	}
}

// --config.check reports every problem of the accounts at once, each with
// its file and line, and exits non-zero.
func TestConfigCheckReportsAccountProblems(t *testing.T) {
	bin := binary(t, "builds the binary")
	dir := t.TempDir()
	cfg := filepath.Join(dir, "breach_exporter.yml")
	testkit.WriteFile(t, filepath.Join(dir, "t"), testkit.APIToken+"\n")
	testkit.WriteFile(t, cfg, `accounts:
  - name: corp
    api: {base_url: "http://127.0.0.1:1/api/v1", token_file: t, requests_per_minute: 61}
    addresses: [a@x.org]
  - name: Labs
    api: {base_url: "http://127.0.0.1:1/api/v1", token_file: missing.token}
    addresses: [A@x.org]
  - name: corp
    api: {base_url: "http://127.0.0.1:1/api/v1", token_file: t}
`)
	out, err := exec.Command(bin, "--config.file", cfg, "--config.check").CombinedOutput()
	if err == nil {
		t.Fatalf("--config.check accepted the config:\n%s", out)
	}
	for _, want := range []string{
		cfg + ":3: accounts[0].api.requests_per_minute",
		cfg + ":5: accounts[1].name",
		cfg + ":6: accounts[1].api.token_file",
		cfg + ":7: accounts[1].addresses[0]",
		cfg + ":8: accounts[2].name",
		cfg + ":9: accounts[2].api.token_file", // the same token as corp
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--config.check output lacks %q:\n%s", want, out)
		}
	}
}
