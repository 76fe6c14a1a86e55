// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(testkit.ShareRedis(m)) }

// combolist is the one feed the stand-in serves for every address.
func combolist(count int64) sim.Answer {
	at := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	return sim.Verified(breach.SourceState{Source: "combolist", BreachCount: count, SourceDBs: []string{"x"},
		FieldsExposed: []string{"password"}, HasPlaintextPassword: true, LastScannedAt: at, LastChangedAt: at})
}

// running is one life of an exporter: built by startExporter, running
// until stop, which then closes it (the last snapshot), as main does at
// shutdown. Every test that runs an exporter starts it here.
type running struct {
	exp  *Exporter
	reg  *prometheus.Registry
	logs *testkit.SyncBuffer // what it logged, in logfmt

	stopRun  func()
	stopped  bool
	closeErr error
	// closeMayFail: the test takes the state folder away, so the last
	// snapshot failing is the test's to check, not a failure.
	closeMayFail bool
}

// startExporter builds an exporter with o (its Registerer and Logger are
// the harness's) and runs it until stop, or the test's end.
func startExporter(t *testing.T, o Options) *running {
	t.Helper()
	r, err := tryStartExporter(t, o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// tryStartExporter is startExporter for a start that may fail.
func tryStartExporter(t *testing.T, o Options) (*running, error) {
	t.Helper()
	r := &running{reg: prometheus.NewRegistry(), logs: &testkit.SyncBuffer{}}
	o.Registerer, o.Logger = r.reg, log.NewLogfmtLogger(r.logs)
	var err error
	if r.exp, err = New(o); err != nil {
		return nil, err
	}
	r.stopRun = testkit.Go(t, r.exp.Run)
	t.Cleanup(func() {
		if err := r.stop(); err != nil && !r.closeMayFail {
			t.Errorf("last snapshot: %v", err)
		}
	})
	return r, nil
}

// crash stops Run and lets go of the exporter's files without the last
// snapshot, as a SIGKILL would; stop then does nothing.
func (r *running) crash() {
	if !r.stopped {
		r.stopped = true
		r.stopRun()
		r.exp.release()
	}
}

// stop stops Run and closes the exporter, once; it returns Close's error.
func (r *running) stop() error {
	if !r.stopped {
		r.stopped = true
		r.stopRun()
		r.closeErr = r.exp.Close()
	}
	return r.closeErr
}

// fixture is an exporter with the receiver on, without persistence,
// against the API stand-in.
type fixture struct {
	*running
	t     *testing.T
	clock *clockwork.FakeClock
	api   *testkit.StandIn
	dir   string
}

func newFixture(t *testing.T, configTail string) *fixture {
	return newFixtureWith(t, configTail, nil)
}

// newFixtureWith runs an exporter against the API stand-in, which answers
// every address verified with combolist(1) unless setup says otherwise.
func newFixtureWith(t *testing.T, configTail string, setup func(*testkit.StandIn)) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: clockwork.NewFakeClock(), dir: t.TempDir()}
	f.api = testkit.NewStandIn(t, f.clock)
	f.api.AnswerOthers(combolist(1))
	if setup != nil {
		setup(f.api)
	}
	writeConfig(t, f.dir, f.api.BaseURL(), configTail)
	f.running = startExporter(t, Options{
		ConfigFile: filepath.Join(f.dir, "config.yml"),
		UserAgent:  "breach_exporter/test",
		Clock:      f.clock,
		Webhook:    true,
	})
	return f
}

// writeConfig writes the token, the webhook secret and a config for an API
// at baseURL, followed by tail, into dir.
func writeConfig(t *testing.T, dir, baseURL, tail string) {
	t.Helper()
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken)
	testkit.WriteFile(t, filepath.Join(dir, "secret"), "exporter-hook-secret")
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), fmt.Sprintf(`api:
  base_url: %s
  token_file: token
  requests_per_minute: 60
webhook:
  secret_files: [secret]
`, baseURL)+tail)
}

func (f *fixture) postAlert(address string) int {
	body := []byte(fmt.Sprintf(`{"event":"alert.created","severity":"critical","address":%q,"source":"combolist",
		"summary":"new plaintext password","delta":{"previous_count":1,"new_count":2,"new_source_dbs":["y"],
		"newly_exposed_fields":["password"],"has_new_plaintext":true,"is_first_scan":false},
		"observed_at":%q,"dashboard_url":"https://service.example/a"}`, address, f.clock.Now().UTC().Format("2006-01-02T15:04:05Z")))
	rec := httptest.NewRecorder()
	f.exp.WebhookHandler().ServeHTTP(rec, signed(string(body)))
	return rec.Code
}

// signed is a webhook request for body, signed with writeConfig's secret.
func signed(body string) *http.Request {
	req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sim.SignatureHeader, sim.Sign([]byte("exporter-hook-secret"), []byte(body)))
	return req
}

// An accepted alert re-reads its address at once, not at the next
// 15-minute round: with budget to spare without any wait, and within the
// one-second spacing of 60 requests a minute when a request just went out.
func TestAlertRefreshesWithinASecond(t *testing.T) {
	f := newFixture(t, "addresses: [alice@example.com, bob@example.com]\n")
	testkit.AdvanceUntil(t, f.clock, "the first round", 100*time.Millisecond, func() bool {
		return f.api.Reads("alice@example.com") == 1 && f.api.Reads("bob@example.com") == 1
	})
	// The stand-in counts a read when it answers; the scheduler records the
	// answer and the time of its request after that. Advancing the clock in
	// between would date bob's request a minute later, and the re-read
	// below would wait for a spacing the fake clock never reaches.
	testkit.Eventually(t, "both answers recorded", func() bool {
		samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
		return samples[testkit.Series("breach_address_last_refresh_timestamp_seconds", "address", "alice@example.com")] > 0 &&
			samples[testkit.Series("breach_address_last_refresh_timestamp_seconds", "address", "bob@example.com")] > 0
	})
	testkit.BlockUntilWaiting(t, f.clock)
	f.clock.Advance(time.Minute) // the budget is idle again; the next round is 14 minutes away

	f.api.AnswerOthers(combolist(7))
	if code := f.postAlert("bob@example.com"); code != http.StatusNoContent {
		t.Fatalf("signed alert answered %d", code)
	}
	// The fake clock stands still: the re-read needs no wait at all.
	testkit.Eventually(t, "bob's re-read", func() bool { return f.api.Reads("bob@example.com") == 2 })
	testkit.Eventually(t, "bob's new count in the collector", func() bool {
		return testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[testkit.Series("breach_source_breaches", "address", "bob@example.com", "source", "combolist")] == 7
	})

	if testing.Short() {
		t.Skip("the re-read at the one-second spacing takes about 5 s of real time (ten 100 ms steps of the fake clock, half a second each): the full run checks it")
	}
	// Right after a request the spacing applies: one second, not more.
	// The fake clock moves in steps of 100 ms, and after each the test
	// gives the scheduler up to half a second of real time to send the
	// re-read (the clock has other waiters, so "the scheduler waits on
	// it" cannot be observed). The re-read must come at the spacing, not
	// before, and long before the next round (14 minutes).
	if code := f.postAlert("alice@example.com"); code != http.StatusNoContent {
		t.Fatalf("signed alert answered %d", code)
	}
	reread := func() bool { return f.api.Reads("alice@example.com") == 2 }
	var elapsed time.Duration
	for !reread() && elapsed < 2*time.Second {
		f.clock.Advance(100 * time.Millisecond)
		elapsed += 100 * time.Millisecond
		for deadline := time.Now().Add(500 * time.Millisecond); !reread() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond) // polling, with a deadline
		}
	}
	if !reread() || elapsed < time.Second {
		t.Errorf("alice re-read: %v after %v of fake time, want at the one-second spacing", reread(), elapsed)
	}
}

// An alert for an address not in the config starts polling it when
// discovery is on (the default) and is only counted when it is off.
func TestAlertDiscovery(t *testing.T) {
	for _, discover := range []bool{true, false} {
		t.Run(fmt.Sprint("discover=", discover), func(t *testing.T) {
			f := newFixture(t, fmt.Sprintf("  discover_addresses: %v\naddresses: [alice@example.com]\n", discover))
			testkit.AdvanceUntil(t, f.clock, "the first round", 100*time.Millisecond, func() bool { return f.api.Reads("alice@example.com") == 1 })
			if code := f.postAlert("carol@example.com"); code != http.StatusNoContent {
				t.Fatalf("signed alert answered %d", code)
			}
			if discover {
				testkit.AdvanceUntil(t, f.clock, "carol to be polled", 50*time.Millisecond, func() bool { return f.api.Reads("carol@example.com") == 1 })
			} else {
				f.clock.Advance(time.Minute)
				if n := f.api.Reads("carol@example.com"); n != 0 {
					t.Errorf("carol was polled %d times with discovery off", n)
				}
			}
			samples := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))
			if discover {
				if got := samples[testkit.Series("breach_alerts_total", "address", "carol@example.com", "severity", "critical", "source", "combolist")]; got != 1 {
					t.Errorf("breach_alerts_total for carol = %v, want 1", got)
				}
				return
			}
			// Not watched and not discoverable: counted, without her label.
			if got := samples[testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")]; got != 1 {
				t.Errorf("breach_webhook_alerts_untracked_total{reason=discovery_off} = %v, want 1", got)
			}
			if held := seriesWithLabel(t, testkit.ScrapeGatherer(t, f.exp.MetricsHandler(f.reg)), "carol@example.com"); len(held) != 0 {
				t.Errorf("carol's label is on %d series with discovery off, e.g. %v", len(held), held[:min(5, len(held))])
			}
		})
	}
}

// A reload picks up new addresses; a broken file keeps the old config and
// sets the reload gauge to 0.
func TestReload(t *testing.T) {
	f := newFixture(t, "addresses: [alice@example.com]\n")
	cfg := filepath.Join(f.dir, "config.yml")
	original, _ := os.ReadFile(cfg)

	testkit.WriteFile(t, cfg, strings.Replace(string(original), "[alice@example.com]", "[alice@example.com, dave@example.com]", 1))
	if err := f.exp.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	testkit.AdvanceUntil(t, f.clock, "dave to be polled", 100*time.Millisecond, func() bool { return f.api.Reads("dave@example.com") == 1 })

	testkit.WriteFile(t, cfg, string(original)+"oops: true\n")
	err := f.exp.Reload(context.Background())
	if err == nil || !strings.Contains(err.Error(), "oops") {
		t.Fatalf("reload of a broken file: %v, want an error naming the key", err)
	}
	if got := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[testkit.Series("breach_exporter_config_last_reload_successful")]; got != 0 {
		t.Errorf("reload gauge = %v after a failed reload", got)
	}
	if got := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[testkit.Series("breach_address_state", "address", "dave@example.com", "account", breach.DefaultAccount, "state", "verified")]; got != 1 {
		t.Errorf("dave's state after a failed reload = %v, want the old config's 1", got)
	}
}

// Webhooks are configured but the plan gets none: one warning, however
// often /me says so.
func TestPlanWithoutWebhooksWarnsOnce(t *testing.T) {
	f := newFixtureWith(t, "refresh: {me_interval: 1m}\naddresses: [alice@example.com]\n", func(a *testkit.StandIn) { a.SetPlan("personal") })
	const warning = "delivers webhooks only to the pro and business plans"
	testkit.AdvanceUntil(t, f.clock, "three /me calls", time.Second, func() bool { return f.api.MeCalls() >= 3 })
	if n := strings.Count(f.logs.String(), warning); n != 1 {
		t.Errorf("the plan warning was logged %d times, want once", n)
	}
	if got := testkit.Scrape(t, f.exp.MetricsHandler(f.reg))[testkit.Series("breach_account_info", "account", breach.DefaultAccount, "plan", "personal")]; got != 1 {
		t.Errorf(`breach_account_info{plan="personal"} = %v, want 1`, got)
	}
}

// seriesWithLabel lists every series of the whole /metrics output, the
// registry's and the collector's, that has a label whose value is value,
// and fails the test if the exposition text mentions value anywhere else.
func seriesWithLabel(t *testing.T, g prometheus.Gatherer, value string) []string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	var out []string
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == value {
					out = append(out, testkit.Key(mf.GetName(), m.GetLabel()))
					break
				}
			}
		}
	}
	rec := httptest.NewRecorder()
	promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}).
		ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics answered %d: %s", rec.Code, rec.Body)
	}
	if len(out) == 0 && strings.Contains(rec.Body.String(), value) {
		t.Fatalf("/metrics mentions %q outside any label value", value)
	}
	return out
}

// rewriteConfig replaces old with new in the config file and reloads.
func (f *fixture) rewriteConfig(old, new string) {
	f.t.Helper()
	cfg := filepath.Join(f.dir, "config.yml")
	data, err := os.ReadFile(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	if !strings.Contains(string(data), old) {
		f.t.Fatalf("test bug: %q not in the config", old)
	}
	testkit.WriteFile(f.t, cfg, strings.Replace(string(data), old, new, 1))
	if err := f.exp.Reload(context.Background()); err != nil {
		f.t.Fatalf("reload: %v", err)
	}
}

// After a reload removes an address that has received alerts, no series of
// the whole /metrics output carries its label: not its cached API values,
// not its alert counters.
func TestReloadRemovesEverySeriesOfARemovedAddress(t *testing.T) {
	f := newFixture(t, "addresses: [alice@example.com, bob@example.com]\n")
	for range 3 {
		if code := f.postAlert("bob@example.com"); code != http.StatusNoContent {
			t.Fatalf("signed alert answered %d", code)
		}
		f.clock.Advance(time.Second) // a new observed_at: a new body, not a duplicate
	}
	g := testkit.ScrapeGatherer(t, f.exp.MetricsHandler(f.reg))
	testkit.AdvanceUntil(t, f.clock, "bob's alerts and API values", 100*time.Millisecond, func() bool {
		s := testkit.Samples(t, g)
		return s[testkit.Series("breach_source_breaches", "address", "bob@example.com", "source", "combolist")] == 1 &&
			s[testkit.Series("breach_alerts_total", "address", "bob@example.com", "severity", "critical", "source", "combolist")] == 3
	})
	if held := seriesWithLabel(t, g, "bob@example.com"); len(held) == 0 {
		t.Fatal("test bug: bob has no series before the reload")
	}

	f.rewriteConfig("[alice@example.com, bob@example.com]", "[alice@example.com]")
	if held := seriesWithLabel(t, g, "bob@example.com"); len(held) != 0 {
		t.Fatalf("after bob's removal %d series still carry his label:\n%s", len(held), strings.Join(held, "\n"))
	}
	if got := testkit.Samples(t, g)[testkit.Series("breach_alerts_total", "address", "alice@example.com", "severity", "critical", "source", "combolist")]; got != 0 {
		t.Errorf("alice's zero series = %v after the reload, want 0", got)
	}
}

// After a reload turns discovery off, a discovered address that has
// received alerts and been polled leaves no series behind.
func TestReloadWithoutDiscoveryRemovesEverySeriesOfADiscoveredAddress(t *testing.T) {
	f := newFixture(t, "  discover_addresses: true\naddresses: [alice@example.com]\n")
	if code := f.postAlert("carol@example.com"); code != http.StatusNoContent {
		t.Fatalf("signed alert answered %d", code)
	}
	g := testkit.ScrapeGatherer(t, f.exp.MetricsHandler(f.reg))
	testkit.AdvanceUntil(t, f.clock, "carol to be discovered and polled", 100*time.Millisecond, func() bool {
		return testkit.Samples(t, g)[testkit.Series("breach_source_breaches", "address", "carol@example.com", "source", "combolist")] == 1
	})
	if held := seriesWithLabel(t, g, "carol@example.com"); len(held) == 0 {
		t.Fatal("test bug: carol has no series before the reload")
	}

	f.rewriteConfig("discover_addresses: true", "discover_addresses: false")
	if held := seriesWithLabel(t, g, "carol@example.com"); len(held) != 0 {
		t.Fatalf("after discovery was turned off %d series still carry carol's label:\n%s", len(held), strings.Join(held, "\n"))
	}
	// Her next alert is counted without her label, and she is not polled.
	reads := f.api.Reads("carol@example.com")
	f.clock.Advance(time.Second)
	if code := f.postAlert("carol@example.com"); code != http.StatusNoContent {
		t.Fatalf("signed alert answered %d", code)
	}
	if got := testkit.Samples(t, g)[testkit.Series("breach_webhook_alerts_untracked_total", "reason", "discovery_off")]; got != 1 {
		t.Errorf("untracked{discovery_off} = %v, want 1", got)
	}
	if held := seriesWithLabel(t, g, "carol@example.com"); len(held) != 0 {
		t.Fatalf("an alert after the reload brought back %v", held)
	}
	end := f.clock.Now().Add(time.Minute)
	testkit.AdvanceUntil(t, f.clock, "a minute to pass", time.Second, func() bool { return !f.clock.Now().Before(end) })
	if n := f.api.Reads("carol@example.com"); n != reads {
		t.Errorf("carol was read %d more times after discovery was turned off", n-reads)
	}
}

// A discovered address the API does not monitor (404) was never one of the
// account's: it is dropped at once, with every series, and not polled again.
func TestDiscoveredAddressNotMonitoredIsDropped(t *testing.T) {
	f := newFixtureWith(t, "refresh: {interval: 1m}\naddresses: [alice@example.com]\n", func(a *testkit.StandIn) {
		a.Answer("erin@example.com", sim.NotMonitored())
	})
	if code := f.postAlert("erin@example.com"); code != http.StatusNoContent {
		t.Fatalf("signed alert answered %d", code)
	}
	g := testkit.ScrapeGatherer(t, f.exp.MetricsHandler(f.reg))
	testkit.AdvanceUntil(t, f.clock, "erin to be polled", 100*time.Millisecond, func() bool { return f.api.Reads("erin@example.com") == 1 })
	testkit.Eventually(t, "erin's series to go", func() bool { return len(seriesWithLabel(t, g, "erin@example.com")) == 0 })
	// A full round later, erin has not been read again.
	testkit.AdvanceUntil(t, f.clock, "alice's second read", time.Second, func() bool { return f.api.Reads("alice@example.com") >= 2 })
	if n := f.api.Reads("erin@example.com"); n != 1 {
		t.Errorf("erin was read %d times, want once", n)
	}
}
