// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/alerts"
	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/persist"
)

// The test copy of the rules: the shipped file with every `for:` at
// testFor and every look-back (range windows and offsets) at testLookBack,
// so that each alert fires and resolves within the test. Thresholds are
// kept. The shipped file stays the source: the copy is made from it at
// every run. testLookBack is also what bridges the scrapes an exporter
// restart misses (a few seconds) in BreachCredentialsExposed.
const (
	testFor      = "5s"
	testLookBack = "40s"
)

// A duration may be compound (59m59s999ms: the rules' hour windows are 1ms
// short of an hour, so that Prometheus 2 and 3 agree at the boundary); ms
// before m, or 999ms would read as 999m and a stray s.
var (
	forLine    = regexp.MustCompile(`(?m)^(\s+for:\s*)(\S+)\s*$`)
	rangeWin   = regexp.MustCompile(`\[((?:\d+(?:ms|[smhdwy]))+)\]`)
	offsetWord = regexp.MustCompile(`\boffset\s+((?:\d+(?:ms|[smhdwy]))+)`)
)

func writeTestRules(t *testing.T, src, out string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	fors, windows, offsets := len(forLine.FindAllString(text, -1)), len(rangeWin.FindAllString(text, -1)), len(offsetWord.FindAllString(text, -1))
	if fors == 0 || windows == 0 || offsets == 0 {
		t.Fatalf("%s: %d for:, %d range windows, %d offsets; the test copy expects all three", src, fors, windows, offsets)
	}
	text = forLine.ReplaceAllString(text, "${1}"+testFor)
	text = rangeWin.ReplaceAllString(text, "["+testLookBack+"]")
	text = offsetWord.ReplaceAllString(text, "offset "+testLookBack)
	header := fmt.Sprintf("# TEST COPY made by internal/e2e from %s: every for: is %s and\n"+
		"# every range window and offset %s, so that each alert fires and\n"+
		"# resolves within the test; thresholds are unchanged.\n"+
		"# Do not use it anywhere else.\n", src, testFor, testLookBack)
	if err := os.WriteFile(out, []byte(header+text), 0o600); err != nil {
		t.Fatal(err)
	}
}

// wantAlert is one alert a scenario must raise: its name and the labels
// that identify it besides job (which must be the exporter's) and, for an
// alert about one exporter process (perInstance), instance.
type wantAlert struct {
	name   string
	labels map[string]string
}

// perInstance are the alerts about one exporter process, which carry its
// instance. The others are about the watched addresses, accounts and
// webhooks: the rules aggregate the replica labels away, so they carry no
// instance (and absent(up) has none to carry).
var perInstance = map[string]bool{
	"BreachExporterDown":                 true,
	"BreachExporterConfigReloadFailed":   true,
	"BreachExporterStateSnapshotFailing": true,
	"BreachExporterStateLoadFailed":      true,
	"BreachExporterStoreDown":            true,
	"BreachWebhookAlertsRefused":         true,
	fileFailing:                          true,
	urlFailing:                           true,
}

// needsStore are the alerts only a replicated deployment (a shared store)
// can raise: this stack runs one exporter without a store, so no scenario
// makes them fire. The promtool tests cover them, and TestReplicas
// (replicas_test.go) freezes a real store, shorter than their for:.
var needsStore = map[string]bool{
	"BreachExporterStoreDown": true,
}

func (w wantAlert) String() string {
	return fmt.Sprintf("%s%v", w.name, w.labels)
}

// scenario drives the real exporter into the condition of its alerts and
// out again.
type scenario struct {
	name        string
	want        []wantAlert
	notFiring   []string // alerts that must not fire while the condition holds
	fireTimeout time.Duration
	trigger     func(ctx context.Context) error // nil: the condition holds from the start
	// during runs once every wanted alert fires and was delivered, before
	// clear; its error fails the scenario.
	during func(ctx context.Context) error
	clear  func(ctx context.Context) error // nil: it clears by itself (a look-back passes)
	// awaitResolved holds the group's next scenario until this one has
	// resolved, when its alerts would overlap with the next one's.
	awaitResolved bool
}

// record is what a scenario measured, from its trigger.
type record struct {
	name                       string
	start                      time.Time
	fired, delivered, resolved time.Duration
	cleared                    time.Time
	webhooked                  []wantAlert // notified to the webhook receiver
}

const (
	defaultFireTimeout = 60 * time.Second
	deliveryTimeout    = 30 * time.Second
	resolveTimeout     = 90 * time.Second
)

// everyAlertFiresAndResolves runs one scenario per condition: each alert of
// the rules file must fire from the exporter's series, reach Alertmanager
// (and the test's webhook receiver where the example routes it to one)
// with its labels, and resolve once the condition clears.
func (s *stack) everyAlertFiresAndResolves(ctx context.Context, t *testing.T) {
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	severity := map[string]string{}
	for _, r := range rules {
		if r.Alert != "" {
			severity[r.Alert] = r.Labels["severity"]
		}
	}
	covered := map[string]bool{}
	phases := s.scenarios(t)
	for _, phase := range phases {
		for _, group := range phase {
			for _, sc := range group {
				for _, w := range sc.want {
					if severity[w.name] == "" {
						t.Fatalf("scenario %s wants %s, which is no alert of the rules file", sc.name, w.name)
					}
					covered[w.name] = true
				}
			}
		}
	}
	for name := range severity {
		if !covered[name] && !needsStore[name] {
			t.Errorf("no scenario makes %s fire", name)
		}
	}

	var (
		mu      sync.Mutex
		records []*record
		errs    []string
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		errs = append(errs, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// The groups of a phase run at once; the scenarios of a group one
	// after another, each starting once the previous one's condition is
	// cleared (its resolution is awaited alongside).
	for i, phase := range phases {
		phaseStart := time.Now()
		var resolving sync.WaitGroup
		var groups sync.WaitGroup
		for _, group := range phase {
			groups.Add(1)
			go func() {
				defer groups.Done()
				for _, sc := range group {
					rec, err := s.fire(ctx, sc, severity)
					if err != nil {
						fail("%s: %v", sc.name, err)
					} else if sc.during != nil {
						if err := sc.during(ctx); err != nil {
							fail("%s: %v", sc.name, err)
						}
					}
					if sc.clear != nil {
						if err := sc.clear(ctx); err != nil {
							fail("%s: clearing the condition: %v", sc.name, err)
						}
					}
					rec.cleared = time.Now()
					mu.Lock()
					records = append(records, rec)
					mu.Unlock()
					resolving.Add(1)
					done := make(chan struct{})
					go func() {
						defer resolving.Done()
						defer close(done)
						if err := s.resolve(ctx, sc, rec); err != nil {
							fail("%s: %v", sc.name, err)
						}
					}()
					if sc.awaitResolved {
						<-done
					}
				}
			}()
		}
		groups.Wait()
		resolving.Wait()
		if len(errs) > 0 {
			for _, e := range errs {
				t.Error(e)
			}
			s.logFiredAlerts(ctx, t)
			t.Fatalf("phase %d failed; later phases not run", i+1)
		}
		// What each phase costs the run (the owners' is the last).
		t.Logf("phase %d took %.1fs", i+1, time.Since(phaseStart).Seconds())
	}

	t.Logf("%-28s %8s %10s %9s  (seconds from the trigger; resolved from the clear)", "scenario", "fired", "delivered", "resolved")
	for _, r := range records {
		t.Logf("%-28s %8.1f %10.1f %9.1f", r.name, r.fired.Seconds(), r.delivered.Seconds(), r.resolved.Seconds())
	}
}

// logFiredAlerts logs every alert that fired in the last 10 minutes, with
// the seconds it fired for, and what Alertmanager holds now: an alert
// firing beside another can inhibit it, and Alertmanager sends no
// resolution for an alert inhibited when it resolves.
func (s *stack) logFiredAlerts(ctx context.Context, t *testing.T) {
	t.Helper()
	fired, err := s.prom.queryRange(ctx, `ALERTS{alertstate="firing"}`, 10*time.Minute, time.Second)
	if err != nil {
		t.Logf("fired alerts: %v", err)
	}
	for _, f := range fired {
		t.Logf("fired in the last 10 minutes: %v for %ds", f.Labels, len(f.Values))
	}
	held, err := s.am.alerts(ctx)
	if err != nil {
		t.Logf("Alertmanager's alerts: %v", err)
	}
	for _, a := range held {
		t.Logf("Alertmanager holds: %v, %s", a.Labels, a.Status.State)
	}
	// Where a notification was lost: Prometheus's sends to Alertmanager,
	// Alertmanager's intake, and its sends to the receivers.
	for _, src := range []struct{ name, url string }{
		{"prometheus", s.prom.base + "/metrics"},
		{"alertmanager", s.am.base + "/metrics"},
	} {
		body, err := getBody(ctx, src.url)
		if err != nil {
			t.Logf("%s metrics: %v", src.name, err)
			continue
		}
		for _, line := range strings.Split(string(body), "\n") {
			for _, name := range []string{"prometheus_notifications_", "alertmanager_alerts_received_total", "alertmanager_alerts_invalid_total", "alertmanager_notifications_total", "alertmanager_notifications_failed_total", "alertmanager_alerts{"} {
				if strings.HasPrefix(line, name) {
					t.Logf("%s: %s", src.name, line)
				}
			}
		}
	}
}

// fire triggers sc and waits until every wanted alert fires in Prometheus
// and has reached Alertmanager with its labels.
func (s *stack) fire(ctx context.Context, sc scenario, severity map[string]string) (*record, error) {
	rec := &record{name: sc.name, start: time.Now()}
	if sc.trigger != nil {
		if err := sc.trigger(ctx); err != nil {
			return rec, fmt.Errorf("trigger: %v", err)
		}
	}
	timeout := sc.fireTimeout
	if timeout == 0 {
		timeout = defaultFireTimeout
	}
	err := s.poll(ctx, timeout, func(ctx context.Context) error {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return err
		}
		for _, name := range sc.notFiring {
			for _, a := range active {
				if a.Labels["alertname"] == name && a.State == "firing" {
					return permanent{fmt.Errorf("%s fires too: %v", name, a.Labels)}
				}
			}
		}
		for _, w := range sc.want {
			if !slices.ContainsFunc(active, func(a activeAlert) bool { return a.State == "firing" && s.matches(w, a.Labels) }) {
				return fmt.Errorf("%s not firing yet", w)
			}
		}
		return nil
	})
	if err != nil {
		return rec, fmt.Errorf("firing: %v", err)
	}
	rec.fired = time.Since(rec.start)

	err = s.poll(ctx, deliveryTimeout, func(ctx context.Context) error {
		received, err := s.am.alerts(ctx)
		if err != nil {
			return err
		}
		notified, _ := s.receiver.notifications()
		for _, w := range sc.want {
			i := slices.IndexFunc(received, func(a amAlert) bool { return s.matches(w, a.Labels) })
			if i < 0 {
				return fmt.Errorf("Alertmanager has no %s yet", w)
			}
			if got := received[i].Labels["severity"]; got != severity[w.name] {
				return permanent{fmt.Errorf("%s reached Alertmanager with severity %q, want %q", w, got, severity[w.name])}
			}
			// The example routes info to mail only; inhibited alerts are
			// not notified. Every other one reaches the webhook receiver.
			if severity[w.name] == "info" || received[i].Status.State != "active" {
				continue
			}
			if !slices.ContainsFunc(firing(notified, w.name), func(d delivery) bool { return s.matches(w, d.labels) }) {
				return fmt.Errorf("the webhook receiver has no firing %s yet", w)
			}
		}
		return nil
	})
	if err == nil {
		received, _ := s.am.alerts(ctx)
		for _, w := range sc.want {
			if i := slices.IndexFunc(received, func(a amAlert) bool { return s.matches(w, a.Labels) }); i >= 0 &&
				severity[w.name] != "info" && received[i].Status.State == "active" {
				rec.webhooked = append(rec.webhooked, w)
			}
		}
	}
	if err != nil {
		return rec, fmt.Errorf("delivery: %v", err)
	}
	rec.delivered = time.Since(rec.start)
	return rec, nil
}

// resolve waits until no wanted alert is pending or firing any more, and
// until the webhook receiver has the resolution of those it was notified.
func (s *stack) resolve(ctx context.Context, sc scenario, rec *record) error {
	err := s.poll(ctx, resolveTimeout, func(ctx context.Context) error {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return err
		}
		for _, w := range sc.want {
			if slices.ContainsFunc(active, func(a activeAlert) bool { return s.matches(w, a.Labels) }) {
				return fmt.Errorf("%s still active", w)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("resolving: %v", err)
	}
	rec.resolved = time.Since(rec.cleared)
	return s.poll(ctx, deliveryTimeout, func(context.Context) error {
		notified, _ := s.receiver.notifications()
		for _, w := range rec.webhooked {
			if !slices.ContainsFunc(withStatus(notified, w.name, "resolved"), func(d delivery) bool { return s.matches(w, d.labels) }) {
				return fmt.Errorf("the webhook receiver has no resolved %s yet", w)
			}
		}
		return nil
	})
}

// matches reports whether labels are w's alert from this exporter.
func (s *stack) matches(w wantAlert, labels map[string]string) bool {
	if labels["alertname"] != w.name || labels["job"] != jobName {
		return false
	}
	if perInstance[w.name] {
		if labels["instance"] != s.webAddr {
			return false
		}
	} else if _, ok := labels["instance"]; ok {
		return false
	}
	for k, v := range w.labels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// poll calls check until it returns nil, and returns an error when the
// timeout passes, check fails permanently, or a process has died. Unlike
// eventually it does not fail the test, so goroutines may use it.
func (s *stack) poll(ctx context.Context, timeout time.Duration, check func(context.Context) error) error {
	return s.pollEvery(ctx, pollInterval, timeout, check)
}

// pollEvery is poll looking every interval.
func (s *stack) pollEvery(ctx context.Context, interval, timeout time.Duration, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	var last error
	for {
		if err := s.procsExited(); err != nil {
			return err
		}
		err := check(ctx)
		if err == nil {
			return nil
		}
		if p := (permanent{}); errors.As(err, &p) {
			return p.error
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not within %s: %v", timeout, last)
		case <-ticker.C:
		}
	}
}

// scenarios lists the phases: the groups of a phase run at once, the
// scenarios of a group in order.
func (s *stack) scenarios(t *testing.T) [][][]scenario {
	const source = "index"
	subject := func(name string, labels map[string]string) wantAlert {
		l := map[string]string{"address": subjectAddress, "source": source}
		for k, v := range labels {
			l[k] = v
		}
		return wantAlert{name: name, labels: l}
	}
	exposure := scenario{
		name: "exposure (subject)",
		want: []wantAlert{
			// One alert for the plaintext password and the critical
			// webhook of the same address and feed.
			subject("BreachCredentialsExposed", nil),
			// Per address, on the default families: the exporter counts
			// the new database and the two sensitive fields (password,
			// phone) between two answers.
			{name: "BreachNewDatabase", labels: map[string]string{"address": subjectAddress}},
			{name: "BreachSensitiveFieldExposed", labels: map[string]string{"address": subjectAddress}},
		},
		trigger: func(ctx context.Context) error {
			// The exporter counts news against the address's previous
			// answer: its first one (the set-up feed) must be in, and
			// Prometheus must hold the counters at 0 before they move.
			err := s.poll(ctx, 2*time.Minute, func(ctx context.Context) error {
				got, err := s.prom.query(ctx, fmt.Sprintf(`breach_source_breaches{job=%q, address=%q, source=%q} and on (address) (breach_address_new_databases_total{job=%q} offset 5s == 0)`,
					jobName, subjectAddress, source, jobName))
				if err == nil && len(got) == 0 {
					err = fmt.Errorf("%s not read yet", subjectAddress)
				}
				return err
			})
			if err != nil {
				return err
			}
			// A sweep finds a new database with a plaintext password and
			// the phone number: the simulator sends a critical alert.
			return s.adminPost(ctx, "/admin/feed", subjectFeed(source, true), http.StatusOK)
		},
		// The password is rotated and the feed stops reporting it; the
		// new database, fields and webhook age out of the look-back.
		clear: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/feed", subjectFeed(source, false), http.StatusOK)
		},
	}
	addresses := scenario{
		name: "unverified, not monitored",
		want: []wantAlert{
			{name: "BreachAddressUnverified", labels: map[string]string{"address": "newhire@example.com", "state": "unverified"}},
			{name: "BreachAddressNotMonitored", labels: map[string]string{"address": "departed@example.net", "state": "not_monitored"}},
		},
		// The demo config has both from the start; the owner verifies
		// one and adds the other to the account.
		clear: func(ctx context.Context) error {
			if err := s.adminPost(ctx, "/admin/address", map[string]string{"email": "newhire@example.com", "state": "verified"}, http.StatusNoContent); err != nil {
				return err
			}
			return s.adminPost(ctx, "/admin/address", map[string]string{"email": "departed@example.net", "state": "verified"}, http.StatusNoContent)
		},
	}
	var goodConfig []byte
	reload := scenario{
		name: "failed reload",
		want: []wantAlert{{name: "BreachExporterConfigReloadFailed"}},
		trigger: func(ctx context.Context) error {
			var err error
			if goodConfig, err = os.ReadFile(s.exporterFile); err != nil {
				return err
			}
			bad := append(bytes.Clone(goodConfig), "\nnot_a_key: true\n"...)
			if err := os.WriteFile(s.exporterFile, bad, 0o600); err != nil {
				return err
			}
			return s.reloadExporter(ctx, http.StatusInternalServerError)
		},
		clear: func(ctx context.Context) error {
			if err := os.WriteFile(s.exporterFile, goodConfig, 0o600); err != nil {
				return err
			}
			return s.reloadExporter(ctx, http.StatusOK)
		},
	}
	signatures := scenario{
		name: "invalid signatures",
		want: []wantAlert{{name: "BreachWebhookInvalidSignatures"}},
		trigger: func(ctx context.Context) error {
			for i := range 3 {
				body := fmt.Sprintf(`{"event":"alert.created","severity":"critical","address":%q,"source":"index","observed_at":"2026-01-01T00:00:00Z","delta":{},"n":%d}`, subjectAddress, i)
				if err := s.postWebhook(ctx, body, "wrong-secret", http.StatusUnauthorized); err != nil {
					return err
				}
			}
			return nil
		},
	}
	const staleAddress = "frank@example.com"
	stale := scenario{
		name:        "stale data (one address)",
		want:        []wantAlert{{name: "BreachDataStale", labels: map[string]string{"address": staleAddress}}},
		fireTimeout: 2 * time.Minute, // three rounds of about 15s, then for:
		trigger: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "server_error", "email": staleAddress}, http.StatusNoContent)
		},
		clear: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "", "email": staleAddress}, http.StatusNoContent)
		},
	}

	plan := scenario{
		name: "plan without webhooks",
		want: []wantAlert{{name: "BreachWebhookPlanWithoutDelivery", labels: map[string]string{"plan": "free"}}},
		trigger: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/plan", map[string]string{"plan": "free"}, http.StatusNoContent)
		},
		clear: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/plan", map[string]string{"plan": "pro"}, http.StatusNoContent)
		},
	}
	rateLimited := scenario{
		name:      "429s",
		want:      []wantAlert{{name: "BreachAPIRateLimited"}},
		notFiring: []string{"BreachAPIUnreachable"}, // a 429 says nothing about the API being down
		trigger: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "rate_limited"}, http.StatusNoContent)
		},
		clear: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/fault", map[string]string{"kind": ""}, http.StatusNoContent)
		},
	}
	const rotated = "svc_ak_e2e_rotated_0123456789"
	token := scenario{
		name:        "token revoked, rotated",
		want:        []wantAlert{{name: "BreachAPITokenRejected"}},
		notFiring:   []string{"BreachAPIUnreachable"},
		fireTimeout: 90 * time.Second,
		// The token is rotated in the dashboard: the exporter's one is
		// revoked at once.
		trigger: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/token", map[string]string{"token": rotated}, http.StatusNoContent)
		},
		// The operator writes the new token to the token file; the
		// exporter re-reads it after a 401.
		clear: func(context.Context) error {
			return os.WriteFile(s.exporter.tokenFile, []byte(rotated+"\n"), 0o600)
		},
	}
	// Before the token scenario: within the look-back of a 401, a down API
	// is taken for a rejected token, as the rules intend.
	apiDown := scenario{
		name:          "API down (connections closed)",
		want:          []wantAlert{{name: "BreachAPIUnreachable"}},
		notFiring:     []string{"BreachAPITokenRejected"},
		awaitResolved: true, // the 429 scenario checks that this alert stays silent
		trigger: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "close"}, http.StatusNoContent)
		},
		clear: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/fault", map[string]string{"kind": ""}, http.StatusNoContent)
		},
	}

	var goodPrometheus []byte
	targetMissing := scenario{
		name: "target missing",
		want: []wantAlert{{name: "BreachExporterTargetMissing"}},
		// The scrape configuration loses the exporter's target.
		trigger: func(context.Context) error {
			var err error
			if goodPrometheus, err = os.ReadFile(s.prometheusFile); err != nil {
				return err
			}
			// The target's list, however the YAML encoder indents it.
			target := regexp.MustCompile(`(?m)^(\s*-?\s*)targets:\n\s*- ` + regexp.QuoteMeta(s.webAddr) + `\n`)
			lost := target.ReplaceAll(goodPrometheus, []byte("${1}targets: []\n"))
			if bytes.Equal(lost, goodPrometheus) {
				return fmt.Errorf("no target %s in %s", s.webAddr, s.prometheusFile)
			}
			if err := os.WriteFile(s.prometheusFile, lost, 0o600); err != nil {
				return err
			}
			return s.process("prometheus").cmd.Process.Signal(syscall.SIGHUP)
		},
		clear: func(context.Context) error {
			if err := os.WriteFile(s.prometheusFile, goodPrometheus, 0o600); err != nil {
				return err
			}
			return s.process("prometheus").cmd.Process.Signal(syscall.SIGHUP)
		},
	}
	exporterDown := scenario{
		name: "exporter down",
		want: []wantAlert{{name: "BreachExporterDown"}},
		trigger: func(context.Context) error {
			return s.runningExporter().stopNow()
		},
		clear: func(ctx context.Context) error {
			return s.tryStartExporter(ctx, t, "exporter-restarted")
		},
		awaitResolved: true, // the next scenario stops the exporter again
	}

	// The state folder is moved away: every write fails, until the path
	// names the folder again. The exporter writes only into the folder it
	// opened and locked at start, and counts a write as done only while
	// --storage.path still names that folder; a signed alert cannot be
	// journaled meanwhile, so it is refused with 503. (A folder removed
	// and made anew is another folder: writes resume only after a
	// restart, which would reset what the other scenarios of the phase
	// watch, so the test moves it and puts it back.)
	moved := s.storageDir() + ".moved"
	snapshotFailing := scenario{
		name: "storage failing",
		want: []wantAlert{{name: "BreachExporterStateSnapshotFailing"}, {name: "BreachWebhookAlertsRefused"}},
		trigger: func(ctx context.Context) error {
			if err := os.Rename(s.storageDir(), moved); err != nil {
				return err
			}
			secret, err := os.ReadFile(s.exporter.secretFile)
			if err != nil {
				return err
			}
			body := fmt.Sprintf(`{"event":"alert.created","severity":"info","address":%q,"source":"index","observed_at":%q,`+
				`"delta":{"previous_count":1,"new_count":1,"new_source_dbs":[],"newly_exposed_fields":[],"has_new_plaintext":false,"is_first_scan":false}}`,
				subjectAddress, time.Now().UTC().Format(time.RFC3339))
			return s.postWebhook(ctx, body, strings.TrimSpace(string(secret)), http.StatusServiceUnavailable)
		},
		clear: func(context.Context) error {
			return os.Rename(moved, s.storageDir())
		},
	}

	// A plaintext password alert fires, the exporter restarts, and the
	// snapshot carries the state: the alert never resolves
	// (restartKeepsAlert). Then its lifecycle: acknowledged, it resolves;
	// a restart does not bring it back; a change of the feed does
	// (acknowledgedLifecycle).
	plaintext := subject("BreachCredentialsExposed", nil)
	restart := scenario{
		name: "restart keeps the state",
		want: []wantAlert{plaintext},
		trigger: func(ctx context.Context) error {
			return s.adminPost(ctx, "/admin/feed", subjectFeed(source, true), http.StatusOK)
		},
		during: func(ctx context.Context) error {
			// The alert fires on the critical webhook alone: the state
			// must hold the plaintext password read from the API before
			// the restart, which then lets the API fail for the address.
			if err := s.poll(ctx, deliveryTimeout, s.plaintextRead(plaintext)); err != nil {
				return err
			}
			if err := s.restartKeepsAlert(ctx, t, plaintext); err != nil {
				return err
			}
			return s.acknowledgedLifecycle(ctx, t, plaintext)
		},
		clear: func(ctx context.Context) error {
			if err := s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "", "email": subjectAddress}, http.StatusNoContent); err != nil {
				return err
			}
			return s.adminPost(ctx, "/admin/feed", subjectFeed(source, false), http.StatusOK)
		},
	}

	restart.awaitResolved = true // the next one pages for the same exposure
	onePage := s.onePagePerExposure(t, source)

	// The exporter stops (writing its snapshot), the file is damaged, and
	// the exporter starts again: it moves the file aside and starts empty.
	damaged := scenario{
		name: "damaged snapshot at start",
		want: []wantAlert{{name: "BreachExporterStateLoadFailed"}},
		trigger: func(ctx context.Context) error {
			if err := s.runningExporter().stopNow(); err != nil {
				return err
			}
			file := filepath.Join(s.storageDir(), persist.FileName)
			data, err := os.ReadFile(file)
			if err != nil {
				return fmt.Errorf("the stopped exporter left no snapshot: %v", err)
			}
			data[len(data)/2] ^= 0xff
			if err := os.WriteFile(file, data, 0o600); err != nil {
				return err
			}
			if err := s.tryStartExporter(ctx, t, "exporter-damaged-snapshot"); err != nil {
				return err
			}
			if _, err := os.Stat(file + ".corrupt"); err != nil {
				return fmt.Errorf("the damaged snapshot was not moved aside: %v", err)
			}
			return nil
		},
	}

	return [][][]scenario{
		// The storage fails after the exposure: while it does, the exporter
		// refuses the signed alert the exposure scenario waits for.
		{{exposure, snapshotFailing}, {addresses}, {reload}, {signatures}, {stale}, {s.addressFileFailing(t)}},
		{{plan, apiDown, rateLimited, token}},
		{{restart, onePage}},
		// Alone: Prometheus reloads its configuration, and while its
		// notifier finds Alertmanager again it drops what it sends
		// (prometheus_notifications_dropped_total), to send it again
		// only after --rules.alert.resend-delay (1m): an alert of
		// another scenario firing then misses its delivery timeout.
		{{targetMissing}},
		{{exporterDown, damaged}},
		// Last: the owners' scenarios give every address a team, which
		// routes every address alert to the team receiver from then on.
		{s.ownersScenarios(t)},
	}
}

// subjectFeed is the subject's feed with a new database, the password and
// the phone exposed, with or without the plaintext password.
func subjectFeed(source string, plaintext bool) map[string]any {
	return map[string]any{
		"email": subjectAddress, "source": source,
		"databases": []string{"e2e-base-2019", "e2e-new-2026"},
		"fields":    []string{"username", "password", "phone"},
		"plaintext": plaintext,
	}
}

// restartKeepsAlert checks that w, firing and notified, survives a restart
// of the exporter: SIGTERM, Prometheus sees the target down, start again
// with the API failing for the address (so its series can only come from
// the snapshot), the series is served again, and through it all the alert
// stays firing in Prometheus without a break (same activeAt) and the
// webhook receiver gets no resolved notification for it. The watch lasts
// past the test copy's look-back from the stop, so without the state the
// alert would have resolved.
func (s *stack) restartKeepsAlert(ctx context.Context, t *testing.T, w wantAlert) error {
	firingAlert := func(ctx context.Context) (activeAlert, error) {
		active, err := s.prom.alerts(ctx)
		if err != nil {
			return activeAlert{}, err
		}
		i := slices.IndexFunc(active, func(a activeAlert) bool { return s.matches(w, a.Labels) })
		if i < 0 {
			return activeAlert{}, fmt.Errorf("%s is not active", w)
		}
		if active[i].State != "firing" {
			return active[i], fmt.Errorf("%s is %s", w, active[i].State)
		}
		return active[i], nil
	}
	before, err := firingAlert(ctx)
	if err != nil {
		return fmt.Errorf("before the restart: %v", err)
	}
	notified, _ := s.receiver.notifications()
	if !slices.ContainsFunc(firing(notified, w.name), func(d delivery) bool { return s.matches(w, d.labels) }) {
		return fmt.Errorf("before the restart: the webhook receiver has no firing %s", w)
	}
	mark := len(notified)

	// From now on the API fails for the address: after the restart its
	// series can only come from the snapshot.
	if err := s.adminPost(ctx, "/admin/fault", map[string]string{"kind": "server_error", "email": w.labels["address"]}, http.StatusNoContent); err != nil {
		return err
	}

	// Watch the alert until the end: firing at every look, never reset.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan error, 1)
	looks := 0
	go func() {
		ticker := time.NewTicker(pollInterval)
		defer ticker.Stop()
		for {
			a, err := firingAlert(watchCtx)
			switch {
			case watchCtx.Err() != nil:
				watched <- nil
				return
			case err != nil:
				watched <- fmt.Errorf("%d looks into the restart: %v", looks, err)
				return
			case !a.ActiveAt.Equal(before.ActiveAt):
				watched <- fmt.Errorf("%s resolved and fired again: active since %s, before the restart since %s", w, a.ActiveAt, before.ActiveAt)
				return
			}
			looks++
			select {
			case <-watchCtx.Done():
				watched <- nil
				return
			case <-ticker.C:
			}
		}
	}()
	defer stopWatch()

	start := time.Now()
	if err := s.runningExporter().stopNow(); err != nil {
		return err
	}
	stopped := time.Now()
	upIs := func(v int) func(context.Context) error {
		return func(ctx context.Context) error {
			got, err := s.prom.query(ctx, fmt.Sprintf(`up{job=%q, instance=%q} == %d`, jobName, s.webAddr, v))
			if err == nil && len(got) == 0 {
				err = fmt.Errorf("up is not %d yet", v)
			}
			return err
		}
	}
	if err := s.poll(ctx, 15*time.Second, upIs(0)); err != nil {
		return fmt.Errorf("Prometheus never saw the stopped exporter down: %v", err)
	}
	downSeen := time.Now()
	if err := s.tryStartExporter(ctx, t, "exporter-after-restart"); err != nil {
		return err
	}
	started := time.Now()
	// Up again, serving the address's series from a scrape of the new
	// process, and from the snapshot.
	err = s.poll(ctx, 15*time.Second, func(ctx context.Context) error {
		if err := upIs(1)(ctx); err != nil {
			return err
		}
		sel := fmt.Sprintf(`breach_source_plaintext_password{job=%q, instance=%q, address=%q, source=%q}`, jobName, s.webAddr, w.labels["address"], w.labels["source"])
		got, err := s.prom.query(ctx, fmt.Sprintf(`timestamp(%s == 1) > %d`, sel, started.Unix()))
		if err == nil && len(got) == 0 {
			err = fmt.Errorf("no scrape of the restarted exporter serves %s == 1", sel)
		}
		if err != nil {
			return err
		}
		got, err = s.prom.query(ctx, fmt.Sprintf(`breach_exporter_state_restored_addresses{job=%q, instance=%q} > 0`, jobName, s.webAddr))
		if err == nil && len(got) == 0 {
			err = fmt.Errorf("the restarted exporter restored no address")
		}
		return err
	})
	if err != nil {
		stopWatch()
		return fmt.Errorf("after the restart: %v; the alert's watch: %v", err, <-watched)
	}
	back := time.Now()

	// Long enough for a resolution to be evaluated, sent and notified
	// (1s each), and past the look-back from the stop.
	lookBack, _ := time.ParseDuration(testLookBack)
	hold := max(time.Until(back.Add(5*time.Second)), time.Until(stopped.Add(lookBack+3*time.Second)))
	select {
	case err := <-watched:
		if err != nil {
			return err
		}
		return fmt.Errorf("the watch of %s ended early", w)
	case <-time.After(hold):
	case <-ctx.Done():
		return ctx.Err()
	}
	stopWatch()
	if err := <-watched; err != nil {
		return err
	}
	if _, err := firingAlert(ctx); err != nil {
		return fmt.Errorf("after the restart: %v", err)
	}
	notified, _ = s.receiver.notifications()
	if got := withStatus(notified[mark:], w.name, "resolved"); slices.ContainsFunc(got, func(d delivery) bool { return s.matches(w, d.labels) }) {
		return fmt.Errorf("the webhook receiver got a resolved %s across the restart", w)
	}
	t.Logf("restart: stopped in %.1fs, up == 0 seen %.1fs later, started in %.1fs, series back %.1fs later; "+
		"%s firing with the same activeAt at %d looks over %.1fs, no resolved notification",
		stopped.Sub(start).Seconds(), downSeen.Sub(stopped).Seconds(), started.Sub(downSeen).Seconds(), back.Sub(started).Seconds(),
		w, looks, time.Since(start).Seconds())
	return nil
}

// setUpSubject puts subjectAddress on the simulated account, verified, with
// one feed already read, before the exporter starts.
func (s *stack) setUpSubject(ctx context.Context, t *testing.T) {
	t.Helper()
	if err := s.adminPost(ctx, "/admin/address", map[string]string{"email": subjectAddress, "state": "verified"}, http.StatusNoContent); err != nil {
		t.Fatal(err)
	}
	if err := s.adminPost(ctx, "/admin/feed", map[string]any{
		"email": subjectAddress, "source": "index",
		"databases": []string{"e2e-base-2019"}, "fields": []string{"username"},
	}, http.StatusOK); err != nil {
		t.Fatal(err)
	}
}

// adminPost sends a control to the simulator.
func (s *stack) adminPost(ctx context.Context, path string, body any, want int) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	return post(ctx, s.admin+path, data, nil, want)
}

// reloadExporter POSTs /-/reload and checks the answer.
func (s *stack) reloadExporter(ctx context.Context, want int) error {
	return post(ctx, "http://"+s.webAddr+"/-/reload", nil, nil, want)
}

// postWebhook posts body to the exporter's webhook listener, signed with secret.
func (s *stack) postWebhook(ctx context.Context, body, secret string, want int) error {
	return post(ctx, "http://"+s.hookAddr+"/webhook", []byte(body), map[string]string{
		"Content-Type":      "application/json",
		sim.SignatureHeader: sim.Sign([]byte(secret), []byte(body)),
	}, want)
}

func post(ctx context.Context, url string, body []byte, headers map[string]string, want int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if body != nil && headers == nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %s %s, want %d", url, resp.Status, strings.TrimSpace(string(answer)), want)
	}
	return nil
}
