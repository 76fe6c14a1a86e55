package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// The test binary is the baseline process of TestMeasureDeployed.
	if len(os.Args) > 1 && os.Args[1] == BaselineChildCommand {
		if err := ServeBaselineChild(os.Args[2:], os.Stdout, os.Stdin); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// The baseline is only a baseline if it serves exactly our series.
func TestGaugeVecBaselineRendersTheSameExposition(t *testing.T) {
	const n = 25
	ours, err := Render(ImplCollector, n)
	if err != nil {
		t.Fatal(err)
	}
	baseline, err := Render(ImplGaugeVec, n)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ours, baseline) {
		t.Fatalf("expositions differ:\nours:\n%.2000s\nbaseline:\n%.2000s", ours, baseline)
	}
	samples := 0
	for _, line := range strings.Split(string(ours), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			samples++
		}
	}
	if want := n*SeriesPerAddress + globalSeries; samples != want {
		t.Errorf("%d samples, want %d: every field and database series of every feed", samples, want)
	}
}

func TestMeasureScrape(t *testing.T) {
	for _, impl := range []string{ImplCollector, ImplGaugeVec} {
		res, err := MeasureScrape(impl, 40, 2)
		if err != nil {
			t.Fatal(err)
		}
		if res.Series != 40*SeriesPerAddress+globalSeries {
			t.Errorf("%s: %d series", impl, res.Series)
		}
		if res.SecondsPerScrape <= 0 || res.BytesPerScrape <= 0 || res.AllocBytesPerScrape <= 0 || res.StateBytesPerAddress <= 0 {
			t.Errorf("%s: a figure is not positive: %+v", impl, res)
		}
	}
	if _, err := MeasureScrape("nope", 1, 1); err == nil {
		t.Error("an unknown implementation was accepted")
	}
}

func TestServeScrapeChildWritesOneResult(t *testing.T) {
	var out bytes.Buffer
	if err := ServeScrapeChild([]string{ImplCollector, "3", "1"}, &out); err != nil {
		t.Fatal(err)
	}
	var res ScrapeResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	if res.Impl != ImplCollector || res.Addresses != 3 || res.Scrapes != 1 {
		t.Errorf("result %+v", res)
	}
	if err := ServeScrapeChild([]string{ImplCollector, "x", "1"}, &out); err == nil {
		t.Error("a bad address count was accepted")
	}
}

func TestWebhookCountsEveryAlert(t *testing.T) {
	res, err := MeasureWebhook(WebhookOptions{Clients: 3, Requests: 300, Rounds: 1, Addresses: 5, AllocRuns: 20})
	if err != nil {
		t.Fatal(err)
	}
	if res.Accepted != res.Sent || res.Sent == 0 {
		t.Errorf("accepted %d of %d sent", res.Accepted, res.Sent)
	}
	if res.OursPerSecond <= 0 || res.BaselinePerSecond <= 0 {
		t.Errorf("rates %v and %v", res.OursPerSecond, res.BaselinePerSecond)
	}
	if res.OursServerAllocs < res.BaselineServerAllocs {
		t.Errorf("the real handler allocates less (%v) than the bare one (%v): the count is broken",
			res.OursServerAllocs, res.BaselineServerAllocs)
	}
}

func TestBareHMACHandlerRejectsABadSignature(t *testing.T) {
	secret := []byte("s")
	alerts, err := signedAlerts(1, []string{"a@example.com"}, secret)
	if err != nil {
		t.Fatal(err)
	}
	for sig, want := range map[string]int{alerts[0].signature: http.StatusNoContent, "sha256=00": http.StatusUnauthorized, "": http.StatusUnauthorized} {
		req, _ := http.NewRequest(http.MethodPost, "/", bytes.NewReader(alerts[0].body))
		req.Header.Set("X-Service-Signature", sig)
		w := &statusWriter{header: http.Header{}}
		bareHMACHandler(secret).ServeHTTP(w, req)
		if w.status != want {
			t.Errorf("signature %q: status %d, want %d", sig, w.status, want)
		}
	}
}

func TestBudgetIsUsedWithout429(t *testing.T) {
	for _, rpm := range []int{60, 55} {
		res, err := MeasureBudget(rpm, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if res.Fraction < goalBudgetUse || res.Fraction > 1 {
			t.Errorf("%v", res)
		}
		if res.RateLimited != 0 {
			t.Errorf("%v", res)
		}
	}
}

func TestAlertReachesTheGaugeWithinASecond(t *testing.T) {
	if testing.Short() {
		t.Skip("real time: waits for the first read and for a quiet request spacing")
	}
	res, err := MeasureAlertLatency(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Samples) != 1 || res.MaxSeconds >= goalLatency || res.FloorSeconds <= 0 {
		t.Errorf("%+v", res)
	}
}

func TestFiguresJudgeGoals(t *testing.T) {
	r := &Report{
		Webhook: &WebhookResult{OursPerSecond: 79, BaselinePerSecond: 100, Ratio: 0.79},
		Scrape: []ScrapePair{{
			Addresses: largeScrape,
			Ours:      ScrapeResult{SecondsPerScrape: 0.9},
			Baseline:  ScrapeResult{SecondsPerScrape: 1},
		}},
		Deployed: []DeployedResult{{
			Addresses:       deployedLarge,
			Ours:            ProcessScrape{Seconds: 0.35, PeakRSSBytes: 1100 << 20},
			Baseline:        ProcessScrape{Seconds: 1},
			StartSeconds:    0.5,
			ShutdownSeconds: 1.2,
		}},
		Budget:  []BudgetResult{{RequestsPerMinute: 60, Sent: 96, Allowed: 100, Fraction: 0.96, RateLimited: 1}},
		Latency: &LatencyResult{MedianSeconds: 0.01, MaxSeconds: 1.5, FloorSeconds: 0.001},
	}
	r.Figures = figures(r)
	var missed []string
	for _, f := range r.Missed() {
		missed = append(missed, f.Name)
	}
	want := []string{"webhook accepted alerts",
		"deployed scrape 10000 addr, median (gzip, 1 core)", // 0.35 of the baseline
		"deployed peak RSS (VmHWM) 10000 addr",
		"snapshot write: SIGTERM to exit 10000 addr",
		"429s at 60/min", "alert to gauge, max"}
	if fmt.Sprint(missed) != fmt.Sprint(want) {
		t.Errorf("missed %q, want %q", missed, want)
	}

	var table bytes.Buffer
	if err := r.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "webhook accepted alerts") || !strings.Contains(table.String(), "0.790") {
		t.Errorf("table lacks the webhook ratio:\n%s", table.String())
	}
	path := filepath.Join(t.TempDir(), "results.json")
	if err := r.WriteJSON(path); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Figures) != len(r.Figures) {
		t.Errorf("results.json holds %d figures, want %d", len(back.Figures), len(r.Figures))
	}
}

func BenchmarkScrape(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		for _, impl := range []string{ImplCollector, ImplGaugeVec} {
			b.Run(fmt.Sprintf("%s/%d", impl, n), func(b *testing.B) {
				setup, err := newScrapeSetup(n)
				if err != nil {
					b.Fatal(err)
				}
				h, err := setup.handler(impl)
				if err != nil {
					b.Fatal(err)
				}
				var size int
				b.ReportAllocs()
				for b.Loop() {
					w := &countingWriter{header: http.Header{}}
					h.ServeHTTP(w, scrapeRequest())
					size = w.bytes
				}
				b.ReportMetric(float64(size), "bytes/scrape")
			})
		}
	}
}

// BenchmarkWebhook posts b.N distinct signed alerts over loopback to the
// exporter's receiver and to the bare HMAC server.
func BenchmarkWebhook(b *testing.B) {
	creds := newCredentials()
	emails := benchEmails(100)
	api, err := newSimulatorAPI(creds, emails, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer api.stop()
	for _, ours := range []bool{true, false} {
		name := map[bool]string{true: "ours", false: "bare"}[ours]
		b.Run(name, func(b *testing.B) {
			alerts, err := signedAlerts(b.N, emails, creds.secret)
			if err != nil {
				b.Fatal(err)
			}
			var target webhookTarget
			if ours {
				target, err = startOurReceiver(api.baseURL, emails, creds)
			} else {
				target, err = startBareReceiver(creds.secret)
			}
			if err != nil {
				b.Fatal(err)
			}
			defer target.stop()
			b.ResetTimer()
			elapsed, err := sendAll(target.url, alerts, 8)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "accepted/s")
		})
	}
}

// BenchmarkReceiverInProcess serves distinct signed alerts straight to the
// handlers, without sockets: the bare HMAC handler, and the receiver of an
// exporter whose scheduler runs (every accepted alert asks it to re-read
// the address), for a small and a large address list.
func BenchmarkReceiverInProcess(b *testing.B) {
	for _, n := range []int{100, 10000} {
		creds := newCredentials()
		emails := benchEmails(n)
		b.Run(fmt.Sprintf("bare/%d", n), func(b *testing.B) {
			benchmarkHandler(b, bareHMACHandler(creds.secret), emails, creds)
		})
		b.Run(fmt.Sprintf("exporter/%d", n), func(b *testing.B) {
			api, err := newSimulatorAPI(creds, emails, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer api.stop()
			target, err := startOurReceiver(api.baseURL, emails, creds)
			if err != nil {
				b.Fatal(err)
			}
			defer target.stop()
			benchmarkHandler(b, target.handler, emails, creds)
		})
	}
}

func benchmarkHandler(b *testing.B, h http.Handler, emails []string, creds credentials) {
	alerts, err := signedAlerts(b.N, emails, creds.secret)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*http.Request, len(alerts))
	for i, a := range alerts {
		if reqs[i], err = http.NewRequest(http.MethodPost, "http://127.0.0.1"+webhookPath, bytes.NewReader(a.body)); err != nil {
			b.Fatal(err)
		}
		reqs[i].Header.Set("Content-Type", "application/json")
		reqs[i].Header.Set("X-Service-Signature", a.signature)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpuBefore := cpuTime()
	for i, req := range reqs {
		w := &statusWriter{header: http.Header{}}
		h.ServeHTTP(w, req)
		if w.status != http.StatusNoContent {
			b.Fatalf("request %d answered %d", i, w.status)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpuBefore).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// The deployed measurement on a few addresses: the built binary restores
// every address, counts every alert and serves exactly the expected series
// per address; the baseline serves the same breach_* series.
func TestMeasureDeployed(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the exporter")
	}
	exporterBin, err := BuildExporter(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	benchBin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	res, exposition, err := measureDeployed(DeployedOptions{Exporter: exporterBin, Bench: benchBin, Addresses: n, Scrapes: 2, Starts: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Restored != n || res.AlertsAccepted != n || res.AlertsCounted != n {
		t.Errorf("restored %d, accepted %d, counted %d; want %d each", res.Restored, res.AlertsAccepted, res.AlertsCounted, n)
	}
	if len(res.StartSamples) != 2 || res.StartSeconds > res.StartSamples[1] || res.ListeningSeconds > res.StartSeconds {
		t.Errorf("start-up: fastest %g s (listening %g s) of %v", res.StartSeconds, res.ListeningSeconds, res.StartSamples)
	}
	if want := n * DeployedSeriesPerAddress; res.Ours.AddressSeries != want {
		t.Errorf("%d series with an address label, want %d × %d", res.Ours.AddressSeries, n, DeployedSeriesPerAddress)
	}
	// Every series of the exporter's own per-address and global families
	// (breach_*, outside the Go and process collectors) is accounted for.
	own, global := 0, 0
	for _, line := range strings.Split(string(exposition), "\n") {
		if strings.HasPrefix(line, "breach_") {
			own++
			if !strings.Contains(line, `address="`) {
				global++
			}
		}
	}
	if own != n*DeployedSeriesPerAddress+global || global == 0 {
		t.Errorf("%d breach_* series, want %d per address × %d + %d global", own, DeployedSeriesPerAddress, n, global)
	}
	if res.Baseline.AddressSeries != res.Ours.AddressSeries {
		t.Errorf("the baseline serves %d series with an address label, ours %d", res.Baseline.AddressSeries, res.Ours.AddressSeries)
	}
	if res.Ours.WireBytes >= res.Ours.Bytes || res.Baseline.WireBytes >= res.Baseline.Bytes {
		t.Errorf("not compressed: ours %d of %d bytes, baseline %d of %d", res.Ours.WireBytes, res.Ours.Bytes, res.Baseline.WireBytes, res.Baseline.Bytes)
	}
	if res.SnapshotBytes == 0 || res.Ours.PeakRSSBytes == 0 || res.Baseline.RSSBytes == 0 {
		t.Errorf("snapshot %d bytes, peak RSS %d, baseline RSS %d: all measured", res.SnapshotBytes, res.Ours.PeakRSSBytes, res.Baseline.RSSBytes)
	}
}
