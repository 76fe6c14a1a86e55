// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/persist"
)

// The user's cost: a real Prometheus (Debian's prometheus, on loopback,
// with a temporary TSDB) scrapes the built exporter binary holding full
// state for every address and one alert each, once with the default
// families and once with every detail family on, in the same run. Both
// exporters are also scraped against the strongest client_golang
// alternative: promhttp over metric families built once and handed out by
// a Gatherer at every scrape.

// Goal: the default costs a Prometheus at most this share of the RSS that
// every detail family costs.
const goalPrometheusRSSRatio = 0.4

// UserCostOptions size MeasureUserCost.
type UserCostOptions struct {
	Exporter  string // the built breach_exporter binary (BuildExporter)
	Bench     string // a binary that hands CachedChildCommand to ServeCachedChild
	Addresses int
	// Scrapes is how many scrapes Prometheus makes of each exporter, and
	// how many this process times of each exporter and baseline.
	Scrapes int
	// ScrapeInterval is Prometheus' scrape_interval (and timeout).
	ScrapeInterval time.Duration
	// Replicas, above 1, adds the default scraped from that many
	// processes serving the same state, as that many replicas do.
	Replicas int
}

// UserCostVariant is one configuration of the exporter: what Prometheus
// pays for it and what one scrape of it costs against the cached families.
type UserCostVariant struct {
	Detail bool `json:"every_detail_family"`
	// Replicas is how many processes Prometheus scraped (one job, a
	// target each); 0 is one. With several, Exporter and Cached are not
	// measured.
	Replicas int `json:"replicas,omitempty"`
	// OneCopy: Prometheus scraped each replica for its own health
	// (scope=replica) and the cluster's series once (scope=cluster, from
	// the first), as docs/alerts.md says to scrape replicas.
	OneCopy          bool    `json:"one_copy,omitempty"`
	SeriesPerAddress float64 `json:"series_per_address"`
	// Exporter is the built binary, Cached promhttp over the same
	// families cached between scrapes, both scraped by this process.
	Exporter ProcessScrape `json:"exporter"`
	Cached   ProcessScrape `json:"cached_families"`
	// What Prometheus reports after Scrapes scrapes: its VmRSS, its
	// prometheus_tsdb_head_series, and scrape_duration_seconds (fetching
	// and ingesting one scrape) of the first scrape, which creates the
	// series, and the median of the others.
	PrometheusRSSBytes       int64   `json:"prometheus_rss_bytes"`
	PrometheusHeapBytes      float64 `json:"prometheus_heap_inuse_bytes"`
	PrometheusHeadSeries     float64 `json:"prometheus_head_series"`
	PrometheusFirstSeconds   float64 `json:"prometheus_first_scrape_seconds"`
	PrometheusScrapeSeconds  float64 `json:"prometheus_scrape_seconds"`
	PrometheusScrapesCounted int     `json:"prometheus_scrapes"`
}

// UserCostResult is both variants at one address count.
type UserCostResult struct {
	Addresses         int             `json:"addresses"`
	PrometheusVersion string          `json:"prometheus_version"`
	Default           UserCostVariant `json:"default"`
	Detail            UserCostVariant `json:"every_detail_family"`
	// Replicated is the default served by UserCostOptions.Replicas
	// processes, each scraped for everything; OneCopy the same processes
	// scraped as docs/alerts.md says. nil when not measured.
	Replicated *UserCostVariant `json:"replicated,omitempty"`
	OneCopy    *UserCostVariant `json:"one_copy,omitempty"`
}

// MeasureUserCost runs both variants, the default first.
func MeasureUserCost(o UserCostOptions) (UserCostResult, error) {
	res := UserCostResult{Addresses: o.Addresses}
	if o.Addresses < 1 || o.Scrapes < 3 || o.ScrapeInterval <= 0 {
		return res, errors.New("user cost: at least 1 address, 3 scrapes and a scrape interval")
	}
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		return res, fmt.Errorf("user cost needs Prometheus on PATH (Debian's prometheus package): %w", err)
	}
	if out, err := exec.Command(promBin, "--version").CombinedOutput(); err == nil {
		res.PrometheusVersion, _, _ = strings.Cut(string(out), "\n")
	}
	for _, detail := range []bool{false, true} {
		v, err := measureVariant(o, promBin, detail, 1, false)
		if err != nil {
			return res, fmt.Errorf("every detail family %v: %w", detail, err)
		}
		if detail {
			res.Detail = v
		} else {
			res.Default = v
		}
	}
	if o.Replicas > 1 {
		for _, oneCopy := range []bool{false, true} {
			v, err := measureVariant(o, promBin, false, o.Replicas, oneCopy)
			if err != nil {
				return res, fmt.Errorf("%d replicas (one copy %v): %w", o.Replicas, oneCopy, err)
			}
			if oneCopy {
				res.OneCopy = &v
			} else {
				res.Replicated = &v
			}
		}
	}
	return res, nil
}

// measureVariant runs replicas processes over the same state; with more
// than one, only what Prometheus pays is measured. The replicas here share
// no store: each restores the same snapshot and takes the same alerts,
// so each serves the series every replica of a deployment serves, and with
// oneCopy Prometheus scrapes them as it would replicas sharing a store
// (what a scope=cluster scrape passes between replicas costs Prometheus
// nothing).
func measureVariant(o UserCostOptions, promBin string, detail bool, replicas int, oneCopy bool) (UserCostVariant, error) {
	v := UserCostVariant{Detail: detail, OneCopy: oneCopy}
	if replicas > 1 {
		v.Replicas = replicas
	}
	n := o.Addresses
	more := ""
	if detail {
		more = "metrics:\n  detail_families: [" + strings.Join(config.DetailFamilies, ", ") + "]\n"
	}
	rs, err := newRestoredSetup("breach-bench-usercost-", n, 0, false, more)
	if err != nil {
		return v, err
	}
	defer os.RemoveAll(rs.dir)
	dir, emails := rs.dir, rs.emails

	client := newScrapeClient()
	defer client.CloseIdleConnections()
	snapshot, err := os.ReadFile(filepath.Join(rs.storage, persist.FileName))
	if err != nil {
		return v, err
	}
	alerts, err := deployedAlerts(emails, rs.creds.secret)
	if err != nil {
		return v, err
	}
	var procs []*exporterProcess
	var targets []string
	defer func() {
		for _, p := range procs {
			p.kill()
		}
	}()
	for i := range replicas {
		storage := rs.storage
		if i > 0 {
			// A state folder of its own, holding the same snapshot.
			storage = fmt.Sprintf("%s-%d", rs.storage, i)
			if err := os.Mkdir(storage, 0o700); err != nil {
				return v, err
			}
			if err := os.WriteFile(filepath.Join(storage, persist.FileName), snapshot, 0o600); err != nil {
				return v, err
			}
		}
		p, err := startExporterProcess(o.Exporter, dir, storage)
		if err != nil {
			return v, err
		}
		procs = append(procs, p)
		if _, _, err := p.waitRestored(client, emails, rs.refreshed); err != nil {
			return v, p.failed(err)
		}
		if _, err := sendAll("http://"+p.hook+"/webhook", alerts, 4); err != nil {
			return v, p.failed(fmt.Errorf("posting alerts: %w", err))
		}
		targets = append(targets, p.web)
	}
	p := procs[0]
	fail := func(err error) (UserCostVariant, error) { return v, p.failed(err) }
	if replicas > 1 {
		if err := scrapeWithPrometheus(&v, promBin, dir, targets, o); err != nil {
			return fail(err)
		}
		return v, nil
	}
	metricsURL := "http://" + p.web + "/metrics"
	if v.Exporter, err = measureProcess(client, ImplExporter, p.cmd.Process.Pid, metricsURL, o.Scrapes); err != nil {
		return fail(err)
	}
	v.SeriesPerAddress = float64(v.Exporter.AddressSeries) / float64(n)
	plain, err := scrapeOnce(client, metricsURL, false)
	if err != nil {
		return fail(err)
	}
	if v.Cached, err = measureChild(client, o.Bench, CachedChildCommand, ImplCached, dir, plain.body, o.Scrapes); err != nil {
		return fail(err)
	}
	if err := scrapeWithPrometheus(&v, promBin, dir, targets, o); err != nil {
		return fail(err)
	}
	return v, nil
}

// scrapeWithPrometheus starts Prometheus over the exporters at targets (one
// job), waits for o.Scrapes scrapes of each and reads what they cost it.
// The scrape durations reported are the first target's.
func scrapeWithPrometheus(v *UserCostVariant, promBin, dir string, targets []string, o UserCostOptions) error {
	web, err := freeLoopbackAddress()
	if err != nil {
		return err
	}
	interval := model.Duration(o.ScrapeInterval).String()
	quoted := make([]string, len(targets))
	for i, t := range targets {
		quoted[i] = strconv.Quote(t)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: %s\n  scrape_timeout: %s\nscrape_configs:\n  - job_name: breach\n    static_configs:\n      - targets: [%s]\n",
		interval, interval, strings.Join(quoted, ", "))
	scraped := len(targets)
	if v.OneCopy {
		// examples/prometheus-replicas.yml's two jobs. The cluster's
		// target is the first replica's address here, where a Service's
		// would be: its instance label tells them apart.
		cfg += "    params: {scope: [replica]}\n  - job_name: breach-cluster\n    params: {scope: [cluster]}\n" +
			"    static_configs:\n      - targets: [" + quoted[0] + "]\n    relabel_configs:\n" +
			"      - {target_label: job, replacement: breach}\n      - {target_label: instance, replacement: breach-cluster}\n"
		scraped++
	}
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return err
	}
	var logs bytes.Buffer
	cmd := exec.Command(promBin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+web, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}()
	client := &http.Client{Timeout: 2 * time.Minute}
	base := "http://" + web
	if err := waitServing(client, base+"/-/ready", exited); err != nil {
		return fmt.Errorf("prometheus: %w\n%s", err, logs.Bytes())
	}

	// scrape_duration_seconds, one sample per scrape, oldest first. The
	// first scrape creates every series, which takes a loaded machine
	// longer than an interval.
	// A query may time out while Prometheus ingests: it is asked again.
	var durations []float64
	deadline := time.Now().Add(time.Duration(o.Scrapes)*o.ScrapeInterval + 10*time.Minute)
	for {
		var all [][]float64
		all, err = promSeries(client, base, `scrape_duration_seconds{job="breach"}[1h]`)
		if err == nil && len(all) == scraped && slices.IndexFunc(all, func(d []float64) bool { return len(d) < o.Scrapes }) < 0 {
			durations = all[0]
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("prometheus scraped %d times, not %d, by %s (last query: %v); its target: %s\n%s",
				len(durations), o.Scrapes, deadline.Format(time.TimeOnly), err, targetHealth(client, base), logs.Bytes())
		}
		select {
		case <-exited:
			return fmt.Errorf("prometheus exited\n%s", logs.Bytes())
		case <-time.After(o.ScrapeInterval / 4):
		}
	}
	up, err := promSeries(client, base, `up{job="breach"}[1h]`)
	if err != nil || len(up) != scraped || slices.ContainsFunc(up, func(u []float64) bool { return slices.Contains(u, 0) }) {
		return fmt.Errorf("a scrape failed (up %v, %v): raise the scrape interval", up, err)
	}
	v.PrometheusRSSBytes, _ = processRSS(cmd.Process.Pid)
	v.PrometheusScrapesCounted = len(durations)
	v.PrometheusFirstSeconds = durations[0]
	rest := make([]time.Duration, 0, len(durations)-1)
	for _, d := range durations[1:] {
		rest = append(rest, time.Duration(d*float64(time.Second)))
	}
	v.PrometheusScrapeSeconds = median(rest).Seconds()
	own, err := scrapeOnce(client, base+"/metrics", false)
	if err != nil {
		return err
	}
	v.PrometheusHeadSeries = sumSamples(own.body, "prometheus_tsdb_head_series", "")
	v.PrometheusHeapBytes = sumSamples(own.body, "go_memstats_heap_inuse_bytes", "")
	return nil
}

// targetHealth is what Prometheus says of its one target, for errors.
func targetHealth(client *http.Client, base string) string {
	resp, err := client.Get(base + "/api/v1/targets")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return string(body)
}

// promSeries runs a range-vector query and returns the values of each of
// its series, oldest first.
func promSeries(client *http.Client, base, query string) ([][]float64, error) {
	resp, err := client.Get(base + "/api/v1/query?query=" + url.QueryEscape(query))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Values [][2]any `json:"values"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return nil, err
	}
	if answer.Status != "success" {
		return nil, fmt.Errorf("%s: %s", query, answer.Error)
	}
	out := make([][]float64, len(answer.Data.Result))
	for i, series := range answer.Data.Result {
		for _, pair := range series.Values {
			s, _ := pair[1].(string)
			f, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: value %v", query, pair[1])
			}
			out[i] = append(out[i], f)
		}
	}
	return out, nil
}

// ImplCached is the baseline of the cached families.
const ImplCached = "promhttp cached families"

// CachedChildCommand is the first argument that makes cmd/breach_bench
// serve the cached-families baseline (ServeCachedChild).
const CachedChildCommand = "cached-child"

// ServeCachedChild is the strongest client_golang way to serve the same
// series: the exposition in args[0] parsed once into metric families, which
// a Gatherer hands to promhttp at every scrape with nothing rebuilt, next
// to the Go and process collectors every client_golang exporter has. It
// prints "serving <url>" and serves until stdin closes.
func ServeCachedChild(args []string, stdout io.Writer, stdin io.Reader) error {
	if len(args) != 1 {
		return fmt.Errorf("%s wants: exposition-file", CachedChildCommand)
	}
	exposition, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		return err
	}
	var cached []*dto.MetricFamily
	for name, mf := range parsed {
		if strings.HasPrefix(name, "breach_") {
			cached = append(cached, mf)
		}
	}
	slices.SortFunc(cached, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	families := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return cached, nil })
	return serveChild(prometheus.Gatherers{families, reg}, stdout, stdin)
}

// serveChild serves g with promhttp's defaults on loopback, prints
// "serving <url>" and serves until stdin closes. What the child built to
// get there (parsing the exposition; the caller's variables holding it are
// dead by then, which is all the collector needs) is freed first and left
// out of its peak RSS: what stays is what it serves from.
func serveChild(g prometheus.Gatherer, stdout io.Writer, stdin io.Reader) error {
	runtime.GC()
	debug.FreeOSMemory()
	os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM; best effort

	h := promhttp.HandlerFor(g, promhttp.HandlerOpts{})
	url, stop, err := serveLoopback(&http.Server{Handler: h})
	if err != nil {
		return err
	}
	defer stop()
	if _, err := fmt.Fprintf(stdout, "serving %s/metrics\n", url); err != nil {
		return err
	}
	io.Copy(io.Discard, stdin)
	return nil
}

// userCostFigures compare the default with every detail family on, and
// each exporter's scrape with promhttp over the cached families.
func userCostFigures(u *UserCostResult) []Figure {
	if u == nil {
		return nil
	}
	d, all := u.Default, u.Detail
	n := fmt.Sprintf("%d addr", u.Addresses)
	everything := "every detail family"
	rss := newFigure("user cost: Prometheus RSS "+n, "MiB", mib(d.PrometheusRSSBytes), mib(all.PrometheusRSSBytes), everything)
	rss = rss.withGoal(fmt.Sprintf("ratio <= %.1f", goalPrometheusRSSRatio), rss.Ratio > 0 && rss.Ratio <= goalPrometheusRSSRatio)
	fs := []Figure{
		newFigure("user cost: series per address "+n, "series", d.SeriesPerAddress, all.SeriesPerAddress, everything),
		newFigure("user cost: Prometheus head series "+n, "series", d.PrometheusHeadSeries, all.PrometheusHeadSeries, everything),
		rss,
		newFigure("user cost: Prometheus heap in use "+n, "MiB", d.PrometheusHeapBytes/(1<<20), all.PrometheusHeapBytes/(1<<20), everything),
		newFigure("user cost: Prometheus first scrape+ingest "+n, "s", d.PrometheusFirstSeconds, all.PrometheusFirstSeconds, everything),
		newFigure("user cost: Prometheus scrape+ingest, median "+n, "s", d.PrometheusScrapeSeconds, all.PrometheusScrapeSeconds, everything),
	}
	if r := u.Replicated; r != nil {
		alone := "1 replica"
		m := fmt.Sprintf("%s, %d replicas scraped", n, r.Replicas)
		fs = append(fs,
			newFigure("user cost: Prometheus head series "+m, "series", r.PrometheusHeadSeries, d.PrometheusHeadSeries, alone),
			newFigure("user cost: Prometheus RSS "+m, "MiB", mib(r.PrometheusRSSBytes), mib(d.PrometheusRSSBytes), alone),
			newFigure("user cost: Prometheus heap in use "+m, "MiB", r.PrometheusHeapBytes/(1<<20), d.PrometheusHeapBytes/(1<<20), alone),
		)
	}
	if c := u.OneCopy; c != nil {
		fs = append(fs, oneCopyFigures(c, d)...)
	}
	for _, v := range []UserCostVariant{d, all} {
		which := "default"
		if v.Detail {
			which = everything
		}
		fs = append(fs,
			newFigure(fmt.Sprintf("scrape %s, %s, median (gzip, 1 core)", n, which), "s", v.Exporter.Seconds, v.Cached.Seconds, ImplCached),
			newFigure(fmt.Sprintf("CPU per scrape %s, %s", n, which), "s", v.Exporter.CPUSeconds, v.Cached.CPUSeconds, ImplCached),
			newFigure(fmt.Sprintf("RSS (VmRSS) %s, %s", n, which), "MiB", mib(v.Exporter.RSSBytes), mib(v.Cached.RSSBytes), ImplCached),
		)
	}
	return fs
}

// Goal: N replicas scraped as docs/alerts.md says cost a Prometheus at
// most this much of what one replica costs, in head series and in RSS.
const goalOneCopyRatio = 1.1

// oneCopyFigures compare N replicas scraped for one copy of the cluster's
// series with one replica (alone).
func oneCopyFigures(c *UserCostVariant, alone UserCostVariant) []Figure {
	goal := fmt.Sprintf("ratio <= %.1f", goalOneCopyRatio)
	name := fmt.Sprintf("user's Prometheus: %d replicas vs 1, ", c.Replicas)
	series := newFigure(name+"head series", "series", c.PrometheusHeadSeries, alone.PrometheusHeadSeries, "1 replica")
	rss := newFigure(name+"RSS", "MiB", mib(c.PrometheusRSSBytes), mib(alone.PrometheusRSSBytes), "1 replica")
	return []Figure{
		series.withGoal(goal, series.Ratio > 0 && series.Ratio <= goalOneCopyRatio),
		rss.withGoal(goal, rss.Ratio > 0 && rss.Ratio <= goalOneCopyRatio),
	}
}
