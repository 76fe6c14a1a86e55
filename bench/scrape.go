// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/collector"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The two ways of holding the same series.
const (
	ImplCollector = "collector" // ours: the watchlist read by collector.Renderer at scrape time
	ImplGaugeVec  = "gaugevec"  // baseline: every series kept in client_golang GaugeVecs
)

// Shape of the state: every feed of every address has this many breach
// databases and every known field, so each series the collector can emit
// for an address is present.
const (
	databasesPerFeed = 3
	// SeriesPerAddress, with every detail family on: per feed breaches,
	// databases, one database_info per database, one field_exposed per
	// field, plaintext, last scanned and last changed; per address the
	// state, the last refresh, the two news counters and address_info.
	SeriesPerAddress = 4*(2+databasesPerFeed+8+3) + 5
	// globalSeries: api_up, account_info, the three rate-limit gauges,
	// budget, refresh cycle, the five bounded labels' drop counters, and
	// the fleet aggregates (4 states, 4 feeds four times: breached,
	// plaintext, open and handled, 8 fields x 4 feeds).
	globalSeries = 12 + 4 + 4*4 + 8*4
)

// prometheusAccept is the Accept header Prometheus 3 sends by default
// (without native histograms); both the exporter and the promhttp baseline
// answer in the text format. No Accept-Encoding: the collector-only figure
// is the cost of rendering, not of gzip.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5," +
	"application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3," +
	"text/plain;version=0.0.4;q=0.2,*/*;q=0.1"

// ScrapeResult is the cost of scraping one way of holding n addresses.
type ScrapeResult struct {
	Impl       string `json:"impl"`
	Addresses  int    `json:"addresses"`
	Series     int    `json:"series"`
	Scrapes    int    `json:"scrapes"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	// SecondsPerScrape is the median wall time of one scrape.
	SecondsPerScrape float64 `json:"seconds_per_scrape"`
	// CPUSecondsPerScrape is user+system CPU time, GC included, per scrape.
	CPUSecondsPerScrape float64 `json:"cpu_seconds_per_scrape"`
	BytesPerScrape      int     `json:"bytes_per_scrape"`
	AllocBytesPerScrape float64 `json:"alloc_bytes_per_scrape"`
	AllocsPerScrape     float64 `json:"allocs_per_scrape"`
	// StateBytes is the live heap the series' values take between scrapes
	// (the store, or the GaugeVecs), measured after a GC.
	StateBytes           int64   `json:"state_bytes"`
	StateBytesPerAddress float64 `json:"state_bytes_per_address"`
	// PeakRSSBytes is the process's high-water RSS (VmHWM): meaningful when
	// the measurement ran alone in its own process.
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// ScrapePair is both ways measured for one address count.
type ScrapePair struct {
	Addresses int          `json:"addresses"`
	Ours      ScrapeResult `json:"ours"`
	Baseline  ScrapeResult `json:"baseline"`
}

// scrapeSetup is the config of n addresses. The collector's label function
// needs it and a GaugeVec exporter would have one too, so it stays outside
// the measured state.
type scrapeSetup struct {
	cfg *config.Config
}

func newScrapeSetup(n int) (*scrapeSetup, error) {
	var yml strings.Builder
	// Every detail family: the collector-only figures are about rendering
	// every series the collector can emit.
	yml.WriteString("api:\n  base_url: http://127.0.0.1:1/api/v1\n  token_file: token\nmetrics:\n  detail_families: [" +
		strings.Join(config.DetailFamilies, ", ") + "]\naddresses:\n")
	for i := range n {
		fmt.Fprintf(&yml, "  - user%06d@example.com\n", i)
	}
	cfg, err := loadConfig(yml.String())
	if err != nil {
		return nil, err
	}
	return &scrapeSetup{cfg: cfg}, nil
}

// loadConfig loads yml as the exporter does (config.LoadBundle), from a
// folder of its own holding the token its api.token_file names, "token";
// the folder is removed after.
func loadConfig(yml string) (*config.Config, error) {
	dir, err := os.MkdirTemp("", "breach-bench-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "config.yml")
	err = os.WriteFile(filepath.Join(dir, "token"), []byte(newCredentials().token), 0o600)
	if err == nil {
		err = os.WriteFile(path, []byte(yml), 0o600)
	}
	if err != nil {
		return nil, err
	}
	b, err := config.LoadBundle(path, config.LoadOptions{})
	if err != nil {
		return nil, err
	}
	return b.Config, nil
}

// sourcesFor makes address i's /breaches answer with every feed scanned,
// databasesPerFeed databases and every known field, each string allocated
// on its own as the client's decoding allocates them.
func sourcesFor(i int) []breach.SourceState {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var sources []breach.SourceState
	for k, source := range breach.KnownSources {
		dbs := make([]string, databasesPerFeed)
		for d := range dbs {
			// Names repeat across addresses, as real breach corpora do.
			dbs[d] = fmt.Sprintf("%s-corpus-%03d", source, (i*7+k*3+d)%500)
		}
		fields := make([]string, len(breach.KnownFields))
		for f, name := range breach.KnownFields {
			fields[f] = strings.Clone(name)
		}
		sources = append(sources, breach.SourceState{
			Source:               strings.Clone(source),
			BreachCount:          int64(i%97 + k),
			SourceDBs:            dbs,
			FieldsExposed:        fields,
			HasPlaintextPassword: (i+k)%2 == 0,
			LastScannedAt:        base.Add(time.Duration(i*1000+k) * time.Millisecond),
			LastChangedAt:        base.Add(-time.Duration(i+k) * time.Hour),
		})
	}
	return sources
}

// collectorHandler is ours: the watchlist filled as the scheduler fills it,
// and the collector's handler serving it as the exporter does
// (exporter.MetricsHandler). The webhook receiver is off: these are the
// collector's feed series alone.
func (s *scrapeSetup) collectorHandler() http.Handler {
	reg := watchlist.New()
	reg.Sync(nil, s.cfg.Watched(), s.cfg.Labels.Address, 0)
	at := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	for i, a := range s.cfg.Watched() {
		reg.Answered(a.Key(), breach.Verified, sourcesFor(i), at.Add(time.Duration(i)*time.Millisecond))
	}
	reg.SetAccount(breach.DefaultAccount, "pro", true)
	reg.SetRateLimit(breach.DefaultAccount, breach.RateLimit{Limit: 60, HasLimit: true, Remaining: 42, HasRemaining: true, Reset: at})
	reg.SetCycle(breach.DefaultAccount, 15*time.Minute)
	cur := config.NewCurrent(&config.Bundle{Config: s.cfg})
	return collector.NewHandler(collector.NewRenderer(reg, cur, false), prometheus.NewRegistry(), log.NewNopLogger())
}

// baselineFrom is the baseline of an exposition: the very same series held
// in plain client_golang GaugeVecs and CounterVecs, with the same names,
// help texts and labels, served by promhttp; it renders a byte-identical
// exposition.
func baselineFrom(exposition []byte) (http.Handler, error) {
	reg, err := baselineRegistry(exposition, nil)
	if err != nil {
		return nil, err
	}
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
}

// baselineRegistry holds the series of an exposition in GaugeVecs and
// CounterVecs. With keep nil every family must be a gauge or a counter;
// otherwise only the gauge and counter families keep accepts are held.
func baselineRegistry(exposition []byte, keep func(name string) bool) (*prometheus.Registry, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	for _, mf := range families {
		if len(mf.GetMetric()) == 0 {
			continue
		}
		if keep != nil && (!keep(mf.GetName()) ||
			(mf.GetType() != dto.MetricType_COUNTER && mf.GetType() != dto.MetricType_GAUGE)) {
			continue
		}
		var labelNames []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			labelNames = append(labelNames, lp.GetName())
		}
		var set func(value float64, labels ...string)
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: mf.GetName(), Help: mf.GetHelp()}, labelNames)
			err, set = reg.Register(vec), func(v float64, l ...string) { vec.WithLabelValues(l...).Add(v) }
		case dto.MetricType_GAUGE:
			vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: mf.GetName(), Help: mf.GetHelp()}, labelNames)
			err, set = reg.Register(vec), func(v float64, l ...string) { vec.WithLabelValues(l...).Set(v) }
		default:
			return nil, fmt.Errorf("%s: the baseline holds gauges and counters only", mf.GetName())
		}
		if err != nil {
			return nil, err
		}
		values := make([]string, len(labelNames))
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labelNames) {
				return nil, fmt.Errorf("%s: series with different label names", mf.GetName())
			}
			for i, lp := range m.GetLabel() {
				values[i] = lp.GetValue()
			}
			set(m.GetGauge().GetValue()+m.GetCounter().GetValue(), values...)
		}
	}
	return reg, nil
}

func (s *scrapeSetup) handler(impl string) (http.Handler, error) {
	switch impl {
	case ImplCollector:
		return s.collectorHandler(), nil
	case ImplGaugeVec:
		rec := httptest.NewRecorder()
		s.collectorHandler().ServeHTTP(rec, scrapeRequest())
		return baselineFrom(rec.Body.Bytes())
	}
	return nil, fmt.Errorf("unknown implementation %q (want %s or %s)", impl, ImplCollector, ImplGaugeVec)
}

func scrapeRequest() *http.Request {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", prometheusAccept)
	return req
}

// Render returns one scrape's exposition of n addresses held the impl way.
func Render(impl string, n int) ([]byte, error) {
	setup, err := newScrapeSetup(n)
	if err != nil {
		return nil, err
	}
	h, err := setup.handler(impl)
	if err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, scrapeRequest())
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("scrape answered %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Bytes(), nil
}

// checkBaseline makes sure the GaugeVec baseline is a baseline: for n
// addresses it serves exactly the collector's exposition, every series of
// every feed included.
func checkBaseline(n int) error {
	ours, err := Render(ImplCollector, n)
	if err != nil {
		return err
	}
	baseline, err := Render(ImplGaugeVec, n)
	if err != nil {
		return err
	}
	same, err := sameExposition(ours, baseline)
	if err != nil {
		return err
	}
	if !same {
		return fmt.Errorf("the %s baseline serves another exposition than the collector for %d addresses", ImplGaugeVec, n)
	}
	samples := 0
	for line := range bytes.Lines(ours) {
		if len(bytes.TrimSpace(line)) > 0 && line[0] != '#' {
			samples++
		}
	}
	if want := n*SeriesPerAddress + globalSeries; samples != want {
		return fmt.Errorf("%d addresses serve %d samples, want %d", n, samples, want)
	}
	return nil
}

// sameExposition tells whether a and b hold the same families and series
// with the same values. The order of a series' labels is not compared:
// client_golang writes them sorted by name, the collector writes address
// first, and Prometheus reads both alike.
func sameExposition(a, b []byte) (bool, error) {
	canonical := func(text []byte) ([]byte, error) {
		parser := expfmt.NewTextParser(model.UTF8Validation)
		families, err := parser.TextToMetricFamilies(bytes.NewReader(text))
		if err != nil {
			return nil, err
		}
		names := slices.Sorted(maps.Keys(families))
		var out bytes.Buffer
		for _, name := range names {
			mf := families[name]
			for _, m := range mf.GetMetric() {
				slices.SortFunc(m.Label, func(x, y *dto.LabelPair) int { return strings.Compare(x.GetName(), y.GetName()) })
			}
			if _, err := expfmt.MetricFamilyToText(&out, mf); err != nil {
				return nil, err
			}
		}
		return out.Bytes(), nil
	}
	ca, err := canonical(a)
	if err != nil {
		return false, err
	}
	cb, err := canonical(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(ca, cb), nil
}

// MeasureScrape builds n addresses the impl way in this process and times
// reps scrapes after one warm-up scrape.
func MeasureScrape(impl string, n, reps int) (ScrapeResult, error) {
	if n < 1 || reps < 1 {
		return ScrapeResult{}, errors.New("addresses and scrapes must be at least 1")
	}
	res := ScrapeResult{Impl: impl, Addresses: n, Scrapes: reps, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	setup, err := newScrapeSetup(n)
	if err != nil {
		return res, err
	}
	before := liveHeap()
	handler, err := setup.handler(impl)
	if err != nil {
		return res, err
	}
	res.StateBytes = int64(liveHeap()) - int64(before)
	res.StateBytesPerAddress = float64(res.StateBytes) / float64(n)

	warm := &countingWriter{header: http.Header{}, countSamples: true}
	handler.ServeHTTP(warm, scrapeRequest())
	if warm.status != http.StatusOK {
		return res, fmt.Errorf("scrape answered %d", warm.status)
	}
	res.BytesPerScrape, res.Series = warm.bytes, warm.samples

	var memBefore, memAfter runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&memBefore)
	cpuBefore := cpuTime()
	walls := make([]time.Duration, reps)
	for i := range walls {
		w := &countingWriter{header: http.Header{}}
		start := time.Now()
		handler.ServeHTTP(w, scrapeRequest())
		walls[i] = time.Since(start)
		if w.bytes != res.BytesPerScrape {
			return res, fmt.Errorf("scrape %d rendered %d bytes, the warm-up %d", i+1, w.bytes, res.BytesPerScrape)
		}
	}
	cpu := cpuTime() - cpuBefore
	runtime.ReadMemStats(&memAfter)
	runtime.KeepAlive(handler)
	runtime.KeepAlive(setup)

	res.SecondsPerScrape = median(walls).Seconds()
	res.CPUSecondsPerScrape = cpu.Seconds() / float64(reps)
	res.AllocBytesPerScrape = float64(memAfter.TotalAlloc-memBefore.TotalAlloc) / float64(reps)
	res.AllocsPerScrape = float64(memAfter.Mallocs-memBefore.Mallocs) / float64(reps)
	res.PeakRSSBytes = peakRSS()
	return res, nil
}

// countingWriter is a ResponseWriter that keeps only the size, so the
// timing holds rendering alone, as a socket write on loopback would.
type countingWriter struct {
	header http.Header
	status int
	bytes  int

	countSamples bool // count lines that are not comments (warm-up only)
	samples      int
	midLine      bool
}

func (w *countingWriter) Header() http.Header { return w.header }

func (w *countingWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.bytes += len(p)
	if w.countSamples {
		for _, c := range p {
			if !w.midLine && c != '#' {
				w.samples++
			}
			w.midLine = c != '\n'
		}
	}
	return len(p), nil
}

func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC() // the second cycle frees what the first one's finalizers released
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// peakRSS is VmHWM from /proc/self/status, 0 where there is none.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

func median(ds []time.Duration) time.Duration {
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	return sorted[len(sorted)/2]
}

// ScrapeChildCommand is the first argument that makes cmd/breach_bench run
// one MeasureScrape and print its JSON (ServeScrapeChild).
const ScrapeChildCommand = "scrape-child"

// MeasureScrapeIsolated runs MeasureScrape in a fresh process (exe, which
// must hand ScrapeChildCommand to ServeScrapeChild) on one core, so that
// its peak RSS is its own and the timing is single-core.
func MeasureScrapeIsolated(exe, impl string, n, reps int) (ScrapeResult, error) {
	cmd := exec.Command(exe, ScrapeChildCommand, impl, strconv.Itoa(n), strconv.Itoa(reps))
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return ScrapeResult{}, fmt.Errorf("%s %s %d: %w: %s", ScrapeChildCommand, impl, n, err, stderr.String())
	}
	var res ScrapeResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return res, fmt.Errorf("%s %s %d: reading its result: %w", ScrapeChildCommand, impl, n, err)
	}
	return res, nil
}

// ServeScrapeChild is the child's side: args are impl, addresses, scrapes.
func ServeScrapeChild(args []string, w io.Writer) error {
	if len(args) != 3 {
		return fmt.Errorf("%s wants: impl addresses scrapes", ScrapeChildCommand)
	}
	n, err := strconv.Atoi(args[1])
	if err != nil {
		return fmt.Errorf("addresses: %w", err)
	}
	reps, err := strconv.Atoi(args[2])
	if err != nil {
		return fmt.Errorf("scrapes: %w", err)
	}
	res, err := MeasureScrape(args[0], n, reps)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(res)
}
