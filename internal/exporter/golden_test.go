// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bytes"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/prometheus/exporter-toolkit/web"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/ackweb"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/golden"
	"github.com/breach-exporter/breach_exporter/internal/listen"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

var update = flag.Bool("update", false, "rewrite testdata/golden/*.prom with what /metrics serves now")

// goldenVariants are the golden expositions: testdata/golden/<name>.prom is
// what /metrics serves with the config testdata/golden/<name>.yml (and, as
// acks.yml beside it, <name>.acks.yml where there is one; as lists/, the
// address files of <name>.lists/) after state ran. A new config switch gets a row (and a .yml); then
//
//	go test ./internal/exporter -run TestGolden -update
//
// writes its .prom, to be read and committed with the change.
var goldenVariants = []struct {
	name    string
	webhook bool // --webhook.listen-address is set
	state   func(t *testing.T, e *Exporter)
}{
	{name: "default", state: fixedState},
	{name: "receiver", webhook: true, state: fixedState},
	{name: "detail", webhook: true, state: fixedState},
	{name: "acknowledged", state: fixedState},
	{name: "alias", state: fixedState},
	{name: "hash", state: fixedState},
	{name: "files", state: fixedState},
	{name: "store", state: fixedState},
}

var (
	goldenNow = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	scanned   = time.Date(2026, 11, 20, 10, 0, 0, 250e6, time.UTC)
	changed   = time.Date(2026, 11, 19, 8, 30, 0, 0, time.UTC)
)

// fixedState is one address in each state the API can leave it in, the
// account and the rate-limit headers, a snapshot written, and with the
// receiver on, alerts of each outcome that has series.
func fixedState(t *testing.T, e *Exporter) {
	w := e.watchlist
	w.SetAccount(breach.DefaultAccount, "pro", true)
	w.SetRateLimit(breach.DefaultAccount, breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 0, HasRemaining: true, Reset: goldenNow.Add(30 * time.Second)})
	w.SetCycle(breach.DefaultAccount, 15*time.Minute)
	// alice: a repeated feed, database and field, and a feed and field the
	// spec does not know; each is served once and none fails the scrape.
	w.Answered(breach.Key("alice@example.com"), breach.Verified, []breach.SourceState{
		{Source: "archive", BreachCount: 3, SourceDBs: []string{"LinkedIn 2012", "combo-7", "LinkedIn 2012"},
			FieldsExposed: []string{"password", "hash", "password"}, HasPlaintextPassword: true,
			LastScannedAt: scanned, LastChangedAt: changed},
		{Source: "quarantine", BreachCount: 1, FieldsExposed: []string{"voiceprint"}, LastScannedAt: scanned, LastChangedAt: changed},
		{Source: "archive", BreachCount: 99, LastScannedAt: scanned, LastChangedAt: changed},
	}, goldenNow)
	one := []breach.SourceState{{Source: "combolist", BreachCount: 1, SourceDBs: []string{"combo-1"},
		FieldsExposed: []string{"password"}, LastScannedAt: scanned, LastChangedAt: changed}}
	// bob: unverified after a verified read drops the feed series.
	w.Answered(breach.Key("bob@example.com"), breach.Verified, one, changed)
	w.Answered(breach.Key("bob@example.com"), breach.Unverified, nil, goldenNow)
	w.Answered(breach.Key("carol@example.com"), breach.NotMonitored, nil, goldenNow)
	// dave is never read: pending.
	// erin: a failed read after a good one keeps the values.
	w.Answered(breach.Key("erin@example.com"), breach.Verified, one, changed)
	w.Failed(breach.Key("erin@example.com"))

	if e.hook != nil {
		post := func(body string, want int) {
			t.Helper()
			rec := httptest.NewRecorder()
			e.hook.ServeHTTP(rec, signed(body))
			if rec.Code != want {
				t.Fatalf("alert answered %d, want %d: %s", rec.Code, want, body)
			}
		}
		critical := `{"event":"alert.created","severity":"critical","address":"bob@example.com","source":"index","summary":"s",
			"delta":{"new_source_dbs":["a","b"],"newly_exposed_fields":["password","dob"],"has_new_plaintext":true},"observed_at":"2026-11-22T06:00:00Z"}`
		post(critical, http.StatusNoContent)
		post(critical, http.StatusNoContent) // a duplicate
		// A severity the spec does not know, and an address first seen here.
		post(`{"event":"alert.created","severity":"urgent","address":"bob@example.com","source":"quarantine","summary":"s",
			"delta":{},"observed_at":"2026-11-22T05:59:00Z"}`, http.StatusNoContent)
		post(`{"event":"alert.created","severity":"warning","address":"found@example.org","source":"archive","summary":"s",
			"delta":{"new_source_dbs":["c"]},"observed_at":"2026-11-22T05:00:00Z"}`, http.StatusNoContent)
		forged := signed(critical)
		forged.Header.Set("X-Service-Signature", "sha256="+strings.Repeat("0", 64))
		rec := httptest.NewRecorder()
		e.hook.ServeHTTP(rec, forged)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("a bad signature answered %d", rec.Code)
		}
	}
	if err := e.Save(); err != nil {
		t.Fatal(err)
	}
}

// goldenExposition builds the exporter as main does, from the variant's
// config, without running it (the API is never called), applies the state
// and scrapes /metrics. Left out: the Go runtime and process families
// (client_golang's, not ours). Normalised: what depends on the toolchain
// and the real clock (build_info's Go labels, the snapshot's write time).
// storeURL in a variant's config stands for a redis-server the test starts.
const storeURL = "redis://STORE"

// directoryURL in a variant's config stands for an HTTP source of
// addresses the test serves: <name>.http.json, answered at every path.
const directoryURL = "http://DIRECTORY"

func goldenExposition(t *testing.T, name string, webhook bool, state func(*testing.T, *Exporter)) string {
	t.Helper()
	dir := t.TempDir()
	cfg, err := os.ReadFile(filepath.Join("testdata", "golden", name+".yml"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(cfg), storeURL) {
		// A variant with a store gets a real one on loopback.
		cfg = []byte(strings.ReplaceAll(string(cfg), storeURL, testkit.StartRedis(t).URL()))
	}
	if strings.Contains(string(cfg), directoryURL) {
		cfg = []byte(strings.ReplaceAll(string(cfg), directoryURL, serveDirectory(t, name)))
	}
	testkit.WriteFile(t, filepath.Join(dir, "config.yml"), string(cfg))
	// A variant's acknowledgements file, where it has one.
	if acks, err := os.ReadFile(filepath.Join("testdata", "golden", name+".acks.yml")); err == nil {
		testkit.WriteFile(t, filepath.Join(dir, "acks.yml"), string(acks))
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	// A variant's address files, where it has them.
	if lists, err := os.ReadDir(filepath.Join("testdata", "golden", name+".lists")); err == nil {
		if err := os.Mkdir(filepath.Join(dir, "lists"), 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range lists {
			data, err := os.ReadFile(filepath.Join("testdata", "golden", name+".lists", f.Name()))
			if err != nil {
				t.Fatal(err)
			}
			testkit.WriteFile(t, filepath.Join(dir, "lists", f.Name()), string(data))
		}
	} else if !os.IsNotExist(err) {
		t.Fatal(err)
	}
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken)
	testkit.WriteFile(t, filepath.Join(dir, "secret"), "exporter-hook-secret")
	reg := prometheus.NewRegistry()
	openListeners(t, reg, webhook)
	e, err := New(Options{
		ConfigFile:       filepath.Join(dir, "config.yml"),
		Logger:           log.NewNopLogger(),
		Registerer:       reg,
		Clock:            clockwork.NewFakeClockAt(goldenNow),
		Webhook:          webhook,
		StoragePath:      filepath.Join(dir, "data"),
		SnapshotInterval: time.Minute,
		MaxRequests:      collector.DefaultMaxRequests,
	})
	if err != nil {
		t.Fatal(err)
	}
	// Close stops the journal's writer and releases the folder's lock.
	t.Cleanup(func() { e.Close() })
	serveAcknowledgements(t, reg, e)
	state(t, e)
	// The address files' label holds the temporary directory's path; an
	// HTTP source's, the test server's port.
	text := strings.ReplaceAll(testkit.ScrapeText(t, e.MetricsHandler(reg)), dir, "/etc/breach_exporter")
	return normalise(directoryPort.ReplaceAllString(text, directoryURL))
}

// serveDirectory serves the variant's <name>.http.json on loopback and
// returns its URL.
func serveDirectory(t *testing.T, name string) string {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "golden", name+".http.json"))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write(body) }))
	t.Cleanup(srv.Close)
	return srv.URL
}

// serveAcknowledgements builds the acknowledgement page as main does, with
// --web.external-url set, so that its series are served as in production.
func serveAcknowledgements(t *testing.T, reg *prometheus.Registry, e *Exporter) {
	t.Helper()
	page, err := ackweb.PageURL("https://breach.example.com/")
	if err == nil {
		err = ackweb.RegisterURL(reg, page)
	}
	if err == nil {
		_, err = ackweb.New(ackweb.Options{Watchlist: e.Watchlist(), Config: e.Config(), Store: e, Registerer: reg})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// openListeners opens main's listeners on loopback, with their connection
// limits, so that their series are served as they are in production.
func openListeners(t *testing.T, reg *prometheus.Registry, webhook bool) {
	t.Helper()
	m, err := listen.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	// As main opens them, with the flags' defaults.
	addrs := []string{"127.0.0.1:0"}
	ls, err := listen.Open(&web.FlagConfig{WebListenAddresses: &addrs}, listen.Limit{Name: "web", MaxConnections: 512, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	if webhook {
		l, err := listen.TCP("127.0.0.1:0", listen.Limit{Name: "webhook", MaxConnections: 256, PerClient: 16, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
	}
	for _, l := range ls {
		l.Close()
	}
}

var (
	directoryPort = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	goLabels      = regexp.MustCompile(`(goarch|goos|goversion|tags)="[^"]*"`)
	snapshotTook  = regexp.MustCompile(`(?m)^(breach_exporter_state_snapshot_duration_seconds) .*$`)
)

func normalise(text string) string {
	var out []string
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(line, "breach_exporter_build_info{") {
			line = goLabels.ReplaceAllString(line, `$1="(build)"`)
		}
		out = append(out, line)
	}
	return snapshotTook.ReplaceAllString(strings.Join(out, ""), "$1 0.001")
}

// TestGolden compares /metrics with the golden files, byte for byte; -update
// rewrites them.
func TestGolden(t *testing.T) {
	for _, v := range goldenVariants {
		t.Run(v.name, func(t *testing.T) {
			got := goldenExposition(t, v.name, v.webhook, v.state)
			path := filepath.Join("testdata", "golden", v.name+".prom")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestGolden -update writes it)", err)
			}
			if got != string(want) {
				t.Errorf("/metrics differs from %s (go test -run TestGolden -update rewrites it):\n%s", path, lineDiff(string(want), got))
			}
			for _, p := range lint(t, got) {
				t.Errorf("%s: lint: %s: %s", path, p.Metric, p.Text)
			}
		})
	}
}

// lineDiff lists the lines only one side has, in order.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range wl {
		if !slices.Contains(gl, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range gl {
		if !slices.Contains(wl, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}

func lint(t *testing.T, text string) []promlint.Problem {
	t.Helper()
	problems, err := promlint.New(bytes.NewReader([]byte(text))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	return problems
}

// promtool's own check of every golden file. It needs promtool; with
// BREACH_REQUIRE_PROMTOOL set (make test sets it) a missing promtool fails.
func TestGoldenPassesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("BREACH_REQUIRE_PROMTOOL") != "" {
			t.Fatal("promtool is required (make test installs Debian's prometheus package)")
		}
		t.Skip("promtool not installed")
	}
	for _, v := range goldenVariants {
		path := filepath.Join("testdata", "golden", v.name+".prom")
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(promtool, "check", "metrics")
		cmd.Stdin = f
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics < %s: %v\n%s", path, err, out)
		}
		f.Close()
	}
}

// The detail families are served only where metrics.detail_families
// switches them on: no golden exposition but detail.prom has one, and
// detail.prom has them all.
func TestGoldenDetailFamilies(t *testing.T) {
	// The rules' and dashboards' tests read the detail families from the
	// golden files, through internal/golden.
	if got := golden.DetailFamilies(); !slices.Equal(got, config.DetailFamilies) {
		t.Errorf("the golden files serve %v only in detail.prom, want config.DetailFamilies %v", got, config.DetailFamilies)
	}
	for _, v := range goldenVariants {
		data, err := os.ReadFile(filepath.Join("testdata", "golden", v.name+".prom"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range config.DetailFamilies {
			if served := strings.Contains(string(data), "\n# TYPE "+name+" "); served != (v.name == "detail") {
				t.Errorf("%s.prom serves %s: %v", v.name, name, served)
			}
		}
	}
}

// The README's metric tables (its "Metrics" section) name exactly the
// families the golden expositions serve, no more and no fewer.
func TestREADMEListsTheGoldenFamilies(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Metrics\n")
	if !ok {
		t.Fatal("README.md has no Metrics section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	listed := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		for _, m := range backticked.FindAllStringSubmatch(first, -1) {
			listed[m[1]] = true
		}
	}
	served := map[string]bool{}
	for _, v := range goldenVariants {
		data, err := os.ReadFile(filepath.Join("testdata", "golden", v.name+".prom"))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range typeLine.FindAllStringSubmatch(string(data), -1) {
			served[m[1]] = true
		}
	}
	for name := range served {
		if !listed[name] {
			t.Errorf("/metrics serves %s; the README's metric tables do not list it", name)
		}
	}
	for name := range listed {
		if !served[name] {
			t.Errorf("the README lists %s; no golden exposition has it", name)
		}
	}
}

var (
	backticked = regexp.MustCompile("`([a-z_:]+)`")
	typeLine   = regexp.MustCompile(`(?m)^# TYPE (\S+) `)
)
