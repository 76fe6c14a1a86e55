// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The exporter as deployed: the built binary, receiver on, full state for
// every address restored from a snapshot, one signed alert per address,
// scraped over HTTP with Prometheus' headers and gzip.

// ExporterPackage is the main package MeasureDeployed runs.
const ExporterPackage = "github.com/breach-exporter/breach_exporter"

// Each address's one alert: a critical alert on one feed with one new
// database, two newly exposed fields and a new plaintext password.
var deployedAlertFields = []string{"hash", "password"}

// DeployedSeriesPerAddress is what the exporter serves per address by
// default with the receiver on, full feed data and one critical alert: the
// state, last refresh, two news counters and address_info, per feed the breach count,
// plaintext flag and last change, and breach_alerts_total for critical
// alerts of every feed (the alert moves one of them).
var DeployedSeriesPerAddress = 5 + 3*len(breach.KnownSources) + len(breach.KnownSources)

// The two processes compared.
const (
	ImplExporter = "exporter" // the built breach_exporter binary
	ImplPromhttp = "promhttp" // baseline: the same series in client_golang vectors
)

// ProcessScrape is one process scraped over HTTP on loopback.
type ProcessScrape struct {
	Impl string `json:"impl"`
	// Series is the sample lines of one scrape; AddressSeries those with
	// an address label.
	Series        int `json:"series"`
	AddressSeries int `json:"address_series"`
	// The first scrape after the state changed (every address's block is
	// rendered again), then the median of the steady ones after it.
	FirstSeconds    float64 `json:"first_scrape_seconds"`
	FirstCPUSeconds float64 `json:"first_scrape_cpu_seconds"`
	Scrapes         int     `json:"steady_scrapes"`
	Seconds         float64 `json:"seconds_per_scrape"`
	// CPUSeconds is the process's utime+stime per steady scrape
	// (/proc/<pid>/stat, 10 ms ticks, so over all steady scrapes).
	CPUSeconds float64 `json:"cpu_seconds_per_scrape"`
	WireBytes  int     `json:"wire_bytes"` // gzip, as sent
	Bytes      int     `json:"bytes"`      // uncompressed
	// RSSBytes is VmRSS after the scrapes; PeakRSSBytes VmHWM. The
	// baseline's peak is reset after it built its vectors, so it leaves
	// out parsing the exposition it was handed.
	RSSBytes     int64 `json:"rss_bytes"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
}

// DeployedResult is one address count: the exporter, its baseline, and
// the exporter's start-up and snapshot.
type DeployedResult struct {
	Addresses int           `json:"addresses"`
	Ours      ProcessScrape `json:"ours"`
	Baseline  ProcessScrape `json:"baseline"`
	// StartSeconds is exec to the end of the first /metrics answer (200,
	// holding the restored values); ListeningSeconds exec to /-/healthy
	// answering (the snapshot is read before the listeners open). The
	// difference is the first scrape, which renders every address's block.
	StartSeconds     float64 `json:"start_seconds"`
	ListeningSeconds float64 `json:"listening_seconds"`
	// StartSamples are every start's StartSeconds; the figures above are
	// the fastest of them.
	StartSamples []float64 `json:"start_samples"`
	// Restored is breach_exporter_state_restored_addresses.
	Restored int `json:"restored_addresses"`
	// AlertsAccepted is breach_webhook_requests_total{outcome="accepted"}
	// after one alert per address; AlertSeconds how long posting them took.
	AlertsAccepted int     `json:"alerts_accepted"`
	AlertsCounted  int     `json:"alerts_counted"` // sum of breach_alerts_total
	AlertSeconds   float64 `json:"alert_seconds"`
	// The snapshot: SIGTERM to exit (listeners shut down, then the last
	// snapshot written and synced), the file it left, and
	// persist.Folder.Save (encode and write) of the same state in this process.
	ShutdownSeconds    float64 `json:"shutdown_seconds"`
	SnapshotBytes      int64   `json:"snapshot_bytes"`
	EncodeWriteSeconds float64 `json:"encode_write_seconds"`
}

// DeployedOptions size one MeasureDeployed.
type DeployedOptions struct {
	// Exporter is the built breach_exporter binary (BuildExporter).
	Exporter string
	// Bench is a binary that hands BaselineChildCommand to
	// ServeBaselineChild (cmd/breach_bench): the baseline runs in it.
	Bench     string
	Addresses int
	// Scrapes is how many scrapes of each process are timed: the first,
	// then Scrapes-1 steady ones.
	Scrapes int
	// Starts is how many times the binary is started to time start-up.
	Starts int
}

// BuildExporter builds the exporter binary into dir with the go tool. It is
// built inside the exporter's own module (the folder bench/go.mod's replace
// names): with the root go.mod's versions, as a user's build links it, and
// with the go.sum that covers main's imports, which the bench's does not.
func BuildExporter(dir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("no go tool on PATH to build the exporter: %w", err)
	}
	moduleDir, err := exec.Command(goTool, "list", "-m", "-f", "{{.Dir}}", ExporterPackage).Output()
	if err != nil {
		return "", fmt.Errorf("finding the module %s: %w", ExporterPackage, err)
	}
	bin, err := filepath.Abs(filepath.Join(dir, "breach_exporter"))
	if err != nil {
		return "", err
	}
	cmd := exec.Command(goTool, "build", "-trimpath", "-o", bin, ".")
	cmd.Dir = strings.TrimSpace(string(moduleDir))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", ExporterPackage, err, out)
	}
	return bin, nil
}

// MeasureDeployed runs the exporter binary over a restored state of
// o.Addresses addresses, moves every address's alert counters, scrapes it,
// then hands its exposition to a baseline process and scrapes that.
func MeasureDeployed(o DeployedOptions) (DeployedResult, error) {
	n := o.Addresses
	res := DeployedResult{Addresses: n}
	if n < 1 || o.Scrapes < 2 {
		return res, errors.New("deployed: at least 1 address and 2 scrapes")
	}
	rs, err := newRestoredSetup("breach-bench-deployed-", n, 0, false, "")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(rs.dir)
	dir, storage, creds, emails, refreshed := rs.dir, rs.storage, rs.creds, rs.emails, rs.refreshed
	res.EncodeWriteSeconds = rs.encodeWrite.Seconds()

	client := newScrapeClient()
	defer client.CloseIdleConnections()
	// Start-up is timed over several starts on the same snapshot (killed,
	// so none writes one), the fastest kept: other load only adds time.
	// The last start goes on to be measured.
	var p *exporterProcess
	for run := range max(o.Starts, 1) {
		if p != nil {
			p.kill()
		}
		if p, err = startExporterProcess(o.Exporter, dir, storage); err != nil {
			return res, err
		}
		defer p.kill()
		listening, start, err := p.waitRestored(client, emails, refreshed)
		if err != nil {
			return p.fail(res, err)
		}
		res.StartSamples = append(res.StartSamples, start)
		if run == 0 || start < res.StartSeconds {
			res.StartSeconds = start
		}
		if run == 0 || listening < res.ListeningSeconds {
			res.ListeningSeconds = listening
		}
	}
	fail := func(err error) (DeployedResult, error) { return p.fail(res, err) }
	cmd, exited, metricsURL, hook := p.cmd, p.exited, "http://"+p.web+"/metrics", p.hook

	// Move every address's alert counters: one signed alert each.
	alerts, err := deployedAlerts(emails, creds.secret)
	if err != nil {
		return fail(err)
	}
	took, err := sendAll("http://"+hook+"/webhook", alerts, 4)
	if err != nil {
		return fail(fmt.Errorf("posting alerts: %w", err))
	}
	res.AlertSeconds = took.Seconds()

	res.Ours, err = measureProcess(client, ImplExporter, cmd.Process.Pid, metricsURL, o.Scrapes)
	if err != nil {
		return fail(err)
	}
	plain, err := scrapeOnce(client, metricsURL, false)
	if err != nil {
		return fail(err)
	}
	exposition := plain.body
	if err := checkRestored(exposition, emails, refreshed); err != nil {
		return fail(err)
	}
	res.Restored = int(sumSamples(exposition, "breach_exporter_state_restored_addresses", ""))
	res.AlertsAccepted = int(sumSamples(exposition, "breach_webhook_requests_total", `outcome="accepted"`))
	res.AlertsCounted = int(sumSamples(exposition, "breach_alerts_total", ""))
	if res.Restored != n || res.AlertsAccepted != n || res.AlertsCounted != n {
		return fail(fmt.Errorf("%d addresses restored, %d alerts accepted and %d counted, want %d each",
			res.Restored, res.AlertsAccepted, res.AlertsCounted, n))
	}
	if err := checkPerAddress(exposition, emails, DeployedSeriesPerAddress); err != nil {
		return fail(err)
	}

	// SIGTERM: the listeners shut down, then the last snapshot is written
	// (the alerts changed the duplicate memory).
	before, _ := os.Stat(filepath.Join(storage, persist.FileName))
	term := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fail(err)
	}
	<-exited
	err = p.waitErr
	p.stopped = true
	res.ShutdownSeconds = time.Since(term).Seconds()
	if err != nil {
		return fail(fmt.Errorf("exit after SIGTERM: %w", err))
	}
	after, err := os.Stat(filepath.Join(storage, persist.FileName))
	if err != nil {
		return fail(err)
	}
	if before != nil && os.SameFile(before, after) {
		return fail(errors.New("no snapshot written at shutdown"))
	}
	res.SnapshotBytes = after.Size()

	if res.Baseline, err = measureBaseline(client, o.Bench, dir, exposition, o.Scrapes); err != nil {
		return res, err
	}
	if res.Baseline.AddressSeries != res.Ours.AddressSeries {
		return res, fmt.Errorf("the baseline serves %d series with an address label, the exporter %d", res.Baseline.AddressSeries, res.Ours.AddressSeries)
	}
	return res, nil
}

// restoredSetup is a temporary folder holding what the built binary starts
// from: its config (receiver on, the API at a loopback port nobody listens
// on, so the state comes from the snapshot and the scheduler's failed reads
// leave it alone), token, secret, and a snapshot of full state for every
// address, written as the exporter writes it.
type restoredSetup struct {
	dir, storage string
	creds        credentials
	emails       []string
	refreshed    time.Time     // address i was refreshed at refreshed + i ms
	encodeWrite  time.Duration // persist.Folder.Save of the snapshot: encode and write
}

// newRestoredSetup writes it for n addresses (in the config, or in
// addressFiles address files when that is not 0), with more appended to
// the config file; the caller removes dir.
func newRestoredSetup(prefix string, n, addressFiles int, ownerLabels bool, more string) (*restoredSetup, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	rs := &restoredSetup{dir: dir, storage: filepath.Join(dir, "data"), creds: newCredentials(), emails: make([]string, n)}
	fail := func(err error) (*restoredSetup, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	for i := range rs.emails {
		rs.emails[i] = fmt.Sprintf("user%06d@example.com", i)
	}
	closed, err := freeLoopbackAddress()
	if err != nil {
		return fail(err)
	}
	setup := exporterSetup{baseURL: "http://" + closed + "/api/v1", emails: rs.emails, requestsPerMinute: 55, addressFiles: addressFiles, ownerLabels: ownerLabels}
	if err := writeExporterFiles(dir, setup, rs.creds); err != nil {
		return fail(err)
	}
	if more != "" {
		f, err := os.OpenFile(filepath.Join(dir, "config.yml"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return fail(err)
		}
		_, err = f.WriteString(more)
		if err = errors.Join(err, f.Close()); err != nil {
			return fail(err)
		}
	}

	rs.refreshed = time.Now().UTC().Add(-time.Hour).Truncate(time.Millisecond)
	saved := watchlist.Saved{Accounts: []watchlist.SavedAccount{{Name: breach.DefaultAccount, Plan: "pro"}}, Entries: make([]watchlist.SavedEntry, n)}
	for i, e := range rs.emails {
		at := rs.refreshed.Add(time.Duration(i) * time.Millisecond)
		saved.Entries[i] = watchlist.SavedEntry{Address: breach.Address{Email: e}, State: breach.Verified,
			Sources: sourcesFor(i), LastRefresh: at, LastAttempt: at}
	}
	// The state folder as the exporter opens it; closed (unlocked) before
	// the exporter starts on it.
	folder, err := persist.Open(rs.storage, prometheus.NewRegistry(), log.NewNopLogger())
	if err != nil {
		return fail(err)
	}
	start := time.Now()
	err = folder.Save(persist.State{Watchlist: saved}, time.Now())
	rs.encodeWrite = time.Since(start)
	if err == nil {
		err = folder.Close()
	} else {
		folder.Close()
	}
	if err != nil {
		return fail(fmt.Errorf("writing the snapshot: %w", err))
	}
	return rs, nil
}

// exporterProcess is the exporter binary running on loopback ports.
type exporterProcess struct {
	cmd       *exec.Cmd
	exited    chan struct{} // closed once waitErr is set
	waitErr   error
	stopped   bool
	logs      *bytes.Buffer
	web, hook string // listen addresses
	started   time.Time
}

// startExporterProcess starts the binary over the config and snapshot in
// dir, on one core.
func startExporterProcess(bin, dir, storage string) (*exporterProcess, error) {
	return startExporter(bin, dir, storage, "1h", true)
}

// startExporter is startExporterProcess with the snapshot interval, on one
// core or on every core of the machine.
func startExporter(bin, dir, storage, snapshotInterval string, oneCore bool) (*exporterProcess, error) {
	web, err := freeLoopbackAddress()
	if err != nil {
		return nil, err
	}
	hook, err := freeLoopbackAddress()
	if err != nil {
		return nil, err
	}
	p := &exporterProcess{exited: make(chan struct{}), logs: &bytes.Buffer{}, web: web, hook: hook}
	p.cmd = exec.Command(bin, "--config.file", filepath.Join(dir, "config.yml"),
		"--storage.path", storage, "--storage.snapshot-interval", snapshotInterval,
		"--web.listen-address", web, "--webhook.listen-address", hook, "--log.level", "warn")
	p.cmd.Env = os.Environ()
	if oneCore {
		p.cmd.Env = append(p.cmd.Env, "GOMAXPROCS=1")
	}
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	p.started = time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// kill stops the process at once, unless it has exited already.
func (p *exporterProcess) kill() {
	if !p.stopped {
		p.stopped = true
		p.cmd.Process.Kill()
		<-p.exited
	}
}

func (p *exporterProcess) fail(res DeployedResult, err error) (DeployedResult, error) {
	return res, p.failed(err)
}

// failed stops the process and adds its log to err.
func (p *exporterProcess) failed(err error) error {
	p.kill()
	return fmt.Errorf("%w\nexporter log:\n%s", err, p.logs.Bytes())
}

// waitRestored times exec to /-/healthy answering and to the end of the
// first /metrics answer, which must hold the restored values.
func (p *exporterProcess) waitRestored(client *http.Client, emails []string, refreshed time.Time) (listening, start float64, err error) {
	if err := waitServing(client, "http://"+p.web+"/-/healthy", p.exited); err != nil {
		return 0, 0, err
	}
	listening = time.Since(p.started).Seconds()
	first, err := scrapeOnce(client, "http://"+p.web+"/metrics", true)
	if err != nil {
		return 0, 0, err
	}
	start = time.Since(p.started).Seconds()
	if err := checkRestored(first.body, emails, refreshed); err != nil {
		return 0, 0, fmt.Errorf("first scrape: %w", err)
	}
	return listening, start, nil
}

// deployedAlerts is one signed alert.created per address, feeds in turn.
func deployedAlerts(emails []string, secret []byte) ([]signedAlert, error) {
	observed := time.Now().UTC().Add(-time.Minute).Format(sim.ObservedAtLayout)
	out := make([]signedAlert, len(emails))
	for i, e := range emails {
		source := breach.KnownSources[i%len(breach.KnownSources)]
		body, err := json.Marshal(sim.Alert{
			Event:    breach.EventAlertCreated,
			Severity: breach.Critical,
			Address:  e,
			Source:   source,
			Summary:  source + ": 1 new breach database",
			Delta: sim.Delta{PreviousCount: 2, NewCount: 3, NewSourceDBs: []string{source + "-2026-02"},
				NewlyExposedFields: deployedAlertFields, HasNewPlaintext: true},
			ObservedAt:   observed,
			DashboardURL: "https://breach-monitor.example/dashboard/addresses/" + e,
		})
		if err != nil {
			return nil, err
		}
		out[i] = signedAlert{body: body, signature: sim.Sign(secret, body)}
	}
	return out, nil
}

// measureProcess times scrapes of url, served by process pid: the first
// one alone, then the median of the others.
func measureProcess(client *http.Client, impl string, pid int, url string, scrapes int) (ProcessScrape, error) {
	res := ProcessScrape{Impl: impl, Scrapes: scrapes - 1}
	cpu0, err := processCPU(pid)
	if err != nil {
		return res, err
	}
	first, err := scrapeOnce(client, url, true)
	if err != nil {
		return res, err
	}
	cpu1, err := processCPU(pid)
	if err != nil {
		return res, err
	}
	res.FirstSeconds, res.FirstCPUSeconds = first.seconds, (cpu1 - cpu0).Seconds()
	res.WireBytes, res.Bytes = first.wire, len(first.body)
	res.Series, res.AddressSeries = countSeries(first.body)

	walls := make([]time.Duration, 0, scrapes-1)
	for range scrapes - 1 {
		s, err := scrapeOnce(client, url, true)
		if err != nil {
			return res, err
		}
		walls = append(walls, time.Duration(s.seconds*float64(time.Second)))
	}
	cpu2, err := processCPU(pid)
	if err != nil {
		return res, err
	}
	res.Seconds = median(walls).Seconds()
	res.CPUSeconds = (cpu2 - cpu1).Seconds() / float64(scrapes-1)
	res.RSSBytes, res.PeakRSSBytes = processRSS(pid)
	return res, nil
}

type scraped struct {
	seconds float64
	wire    int    // bytes received
	body    []byte // uncompressed
}

// newScrapeClient does not decompress by itself: the wire bytes are the
// gzip ones, and decompressing is outside the timing.
func newScrapeClient() *http.Client {
	return &http.Client{Transport: &http.Transport{DisableCompression: true}, Timeout: 2 * time.Minute}
}

// scrapeOnce asks as Prometheus does; the time runs to the body's last byte.
func scrapeOnce(client *http.Client, url string, gz bool) (scraped, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return scraped{}, err
	}
	req.Header.Set("Accept", prometheusAccept)
	if gz {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return scraped{}, err
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := scraped{seconds: time.Since(start).Seconds(), wire: len(raw), body: raw}
	if err != nil {
		return s, err
	}
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET %s: %s: %.300s", url, resp.Status, raw)
	}
	if gz != (resp.Header.Get("Content-Encoding") == "gzip") {
		return s, fmt.Errorf("GET %s: Content-Encoding %q with gzip %v", url, resp.Header.Get("Content-Encoding"), gz)
	}
	if gz {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return s, err
		}
		if s.body, err = io.ReadAll(zr); err != nil {
			return s, err
		}
	}
	return s, nil
}

// waitServing polls url until it answers 200, or the process exits.
func waitServing(client *http.Client, url string, exited <-chan struct{}) error {
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := client.Get(url)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return errors.New("the process exited before serving")
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer 200 within a minute", url)
		}
	}
}

// countSeries counts sample lines, and those with an address label.
func countSeries(exposition []byte) (series, withAddress int) {
	for line := range bytes.Lines(exposition) {
		if len(line) == 0 || line[0] == '#' || line[0] == '\n' {
			continue
		}
		series++
		if bytes.Contains(line, []byte(`address="`)) {
			withAddress++
		}
	}
	return series, withAddress
}

// sumSamples adds the values of the samples of family name whose line
// contains match ("" for all).
func sumSamples(exposition []byte, name, match string) float64 {
	sum := 0.0
	for line := range bytes.Lines(exposition) {
		s := string(bytes.TrimSpace(line))
		rest, ok := strings.CutPrefix(s, name)
		if !ok || (rest != "" && rest[0] != '{' && rest[0] != ' ') || !strings.Contains(rest, match) {
			continue
		}
		v, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// checkRestored looks for values that only the snapshot can have given:
// the first, middle and last address's state, feed counts and refresh time.
func checkRestored(exposition []byte, emails []string, refreshed time.Time) error {
	for _, i := range []int{0, len(emails) / 2, len(emails) - 1} {
		e := emails[i]
		want := []string{fmt.Sprintf(`breach_address_state{address=%q,account="default",state="verified"} 1`, e),
			fmt.Sprintf(`breach_address_last_refresh_timestamp_seconds{address=%q} %s`, e,
				strconv.FormatFloat(float64(refreshed.Add(time.Duration(i)*time.Millisecond).UnixMilli())/1000, 'g', -1, 64))}
		for _, s := range sourcesFor(i) {
			want = append(want, fmt.Sprintf(`breach_source_breaches{address=%q,source=%q} %d`, e, s.Source, s.BreachCount))
		}
		for _, w := range want {
			if !bytes.Contains(exposition, []byte(w+"\n")) {
				return fmt.Errorf("restored value missing: %s", w)
			}
		}
	}
	return nil
}

// checkPerAddress checks that every address has exactly perAddress series.
func checkPerAddress(exposition []byte, emails []string, perAddress int) error {
	counts := make(map[string]int, len(emails))
	for line := range bytes.Lines(exposition) {
		_, rest, ok := bytes.Cut(line, []byte(`{address="`))
		if !ok || line[0] == '#' {
			continue
		}
		addr, _, _ := bytes.Cut(rest, []byte(`"`))
		counts[string(addr)]++
	}
	if len(counts) != len(emails) {
		return fmt.Errorf("%d addresses have series, want %d", len(counts), len(emails))
	}
	for _, e := range emails {
		if counts[e] != perAddress {
			return fmt.Errorf("%s has %d series, want %d", e, counts[e], perAddress)
		}
	}
	return nil
}

// processCPU is utime+stime of pid from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses.
	fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	const ticksPerSecond = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / ticksPerSecond, nil
}

// processRSS is VmRSS and VmHWM of pid, 0 where unknown.
func processRSS(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	kb := func(rest string) int64 {
		v, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
		return v << 10
	}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			rss = kb(rest)
		} else if rest, ok := strings.CutPrefix(s.Text(), "VmHWM:"); ok {
			hwm = kb(rest)
		}
	}
	return rss, hwm
}

func freeLoopbackAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// BaselineChildCommand is the first argument that makes cmd/breach_bench
// serve a baseline (ServeBaselineChild).
const BaselineChildCommand = "baseline-child"

// measureBaseline starts the baseline process over exposition, on one
// core, and scrapes it as the exporter was scraped.
func measureBaseline(client *http.Client, exe, dir string, exposition []byte, scrapes int) (ProcessScrape, error) {
	return measureChild(client, exe, BaselineChildCommand, ImplPromhttp, dir, exposition, scrapes)
}

// measureChild starts exe's child command over exposition, on one core,
// and scrapes what it serves as impl.
func measureChild(client *http.Client, exe, command, impl, dir string, exposition []byte, scrapes int) (ProcessScrape, error) {
	file := filepath.Join(dir, "exposition.txt")
	if err := os.WriteFile(file, exposition, 0o600); err != nil {
		return ProcessScrape{}, err
	}
	cmd := exec.Command(exe, command, file)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return ProcessScrape{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return ProcessScrape{}, err
	}
	if err := cmd.Start(); err != nil {
		return ProcessScrape{}, err
	}
	defer func() {
		stdin.Close() // the child serves until its stdin closes
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return ProcessScrape{}, fmt.Errorf("%s: %w: %s", command, err, stderr.Bytes())
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "serving ")
	if !ok {
		return ProcessScrape{}, fmt.Errorf("%s said %q", command, line)
	}
	return measureProcess(client, impl, cmd.Process.Pid, url, scrapes)
}

// ServeBaselineChild is the baseline process: the breach_* gauges and
// counters of the exposition in args[0] held in client_golang vectors, with
// the Go and process collectors any client_golang exporter has, behind
// promhttp's defaults. It prints "serving <url>" and serves until stdin
// closes.
func ServeBaselineChild(args []string, stdout io.Writer, stdin io.Reader) error {
	if len(args) != 1 {
		return fmt.Errorf("%s wants: exposition-file", BaselineChildCommand)
	}
	exposition, err := os.ReadFile(args[0])
	if err != nil {
		return err
	}
	reg, err := baselineRegistry(exposition, func(name string) bool { return strings.HasPrefix(name, "breach_") })
	if err != nil {
		return err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return serveChild(reg, stdout, stdin)
}
