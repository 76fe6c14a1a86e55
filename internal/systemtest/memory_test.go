// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The worst case the defaults allow, as measured by TestMemoryOfTheWorstCase.
const (
	worstConfigured    = 100
	worstDiscovered    = 1_000   // webhook.max_discovered_addresses
	worstAlerts        = 100_000 // webhook.dedup_max_entries: every accepted body remembered
	worstDatabases     = 25      // per feed: a heavily breached address
	worstHookHeld      = 240     // of --webhook.max-connections' 256: the sender uses the rest
	worstHookClients   = 15      // × --webhook.max-connections-per-client (16) = worstHookHeld
	worstWebHeld       = 500     // of --web.max-connections' 512: the scrapes use the rest
	worstSenders       = 4
	worstScrapers      = 4 // Prometheus servers, each scraping every second
	worstScrapeEvery   = time.Second
	worstSnapshotEvery = "2s" // so that snapshots of the full state happen while it is measured
)

// TestMemoryOfTheWorstCase builds breach_exporter, runs it with the
// GOMEMLIMIT shipped in examples/kubernetes and drives it to the largest
// state its defaults allow, then reads its peak RSS (VmHWM), which must
// stay under the memory limit shipped there: 100
// configured and 1,000 discovered addresses restored with full feeds (4
// feeds of 25 databases and all 8 fields), 100,000 distinct signed alerts
// (a full duplicate memory, and every alert series of every address),
// nearly every connection both listeners hold open taken by clients that
// trickle their headers, scrapes with and without gzip, and state
// snapshots of all that.
func TestMemoryOfTheWorstCase(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc and dials from several 127.0.0.0/8 addresses")
	}
	bin := binary(t, "builds the binary, posts 100,000 alerts and holds 740 connections")
	soft, limit := shippedMemoryLimits(t)
	t.Setenv("GOMEMLIMIT", soft)
	dir := t.TempDir()
	storage := filepath.Join(dir, "data")
	const secret = "memory-test-secret"
	testkit.WriteFile(t, filepath.Join(dir, "token"), testkit.APIToken+"\n")
	testkit.WriteFile(t, filepath.Join(dir, "secret"), secret+"\n")
	// The API is a loopback port nobody listens on: the state comes from
	// the snapshot, and failed reads leave it alone.
	addresses := make([]string, worstConfigured+worstDiscovered)
	for i := range addresses {
		addresses[i] = fmt.Sprintf("user%04d@example.com", i)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "api:\n  base_url: http://%s/api/v1\n  token_file: token\naddresses:\n", testkit.FreeAddress(t))
	for _, a := range addresses[:worstConfigured] {
		fmt.Fprintf(&cfg, "  - %s\n", a)
	}
	cfg.WriteString("webhook:\n  secret_files: [secret]\n")
	testkit.WriteFile(t, filepath.Join(dir, "breach_exporter.yml"), cfg.String())
	writeFullState(t, storage, addresses)

	webAddr, hookAddr := testkit.FreeAddress(t), testkit.FreeAddress(t)
	child := startProcess(t, bin, "--config.file", filepath.Join(dir, "breach_exporter.yml"),
		"--web.listen-address", webAddr, "--webhook.listen-address", hookAddr, "--log.level", "warn",
		"--storage.path", storage, "--storage.snapshot-interval", worstSnapshotEvery)
	metricsURL := "http://" + webAddr + "/metrics"
	servesMetrics(t, metricsURL)
	_, m := testkit.Get(t, metricsURL)
	if got := sampleValue(m, "breach_exporter_state_restored_addresses"); got != float64(len(addresses)) {
		t.Fatalf("%v addresses restored, want %d", got, len(addresses))
	}

	stop := make(chan struct{})
	var held sync.WaitGroup
	var dials, closedBy atomic.Int64
	slow := "GET /-/healthy HTTP/1.1\r\nHost: x\r\nX-Slow: "
	// Twice as many clients as the webhook slots they may take, so that a
	// slot freed by a timeout is taken again at once; the web listener's
	// connections cycle by themselves every 10 s (its header timeout).
	for i := range 2 * worstHookHeld {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 2, byte(1+i%worstHookClients))}
		held.Add(1)
		go func() { defer held.Done(); trickle(hookAddr, local, slow, stop, &dials, &closedBy) }()
	}
	for range worstWebHeld {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 3, 1)}
		held.Add(1)
		go func() { defer held.Done(); trickle(webAddr, local, slow, stop, &dials, &closedBy) }()
	}
	defer func() { close(stop); held.Wait() }()
	pollMetrics(t, metricsURL, "the slow clients to hold their connections", func(m string) bool {
		return sampleValue(m, `breach_exporter_listener_open_connections{listener="webhook"}`) >= worstHookHeld &&
			sampleValue(m, `breach_exporter_listener_open_connections{listener="web"}`) >= worstWebHeld*9/10
	})

	// Scrapes all along, with and without gzip, overlapping.
	scraping := make(chan struct{})
	var scrapers sync.WaitGroup
	var scrapes atomic.Int64
	for i := range worstScrapers {
		scrapers.Add(1)
		go func() {
			defer scrapers.Done()
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableCompression: i%2 == 0}}
			defer client.CloseIdleConnections()
			pace := time.NewTicker(worstScrapeEvery)
			defer pace.Stop()
			for {
				select {
				case <-scraping:
					return
				case <-pace.C:
				}
				if resp, err := client.Get(metricsURL); err == nil {
					resp.Body.Close()
					scrapes.Add(1)
				}
			}
		}()
	}

	start := time.Now()
	var next atomic.Int64
	var senders sync.WaitGroup
	var failed atomic.Int64
	for range worstSenders {
		senders.Add(1)
		go func() {
			defer senders.Done()
			client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for i := int(next.Add(1)) - 1; i < worstAlerts; i = int(next.Add(1)) - 1 {
				body := worstAlert(addresses[i%len(addresses)], i)
				resp, err := client.Do(signedRequest(t, "http://"+hookAddr+"/webhook", secret, body))
				if err != nil || resp.StatusCode != http.StatusNoContent {
					failed.Add(1)
				}
				if err == nil {
					resp.Body.Close()
				}
			}
		}()
	}
	senders.Wait()
	sent := time.Since(start)
	// A snapshot of the full state, written after the last alert.
	last := float64(time.Now().Unix())
	pollMetrics(t, metricsURL, "a snapshot after the last alert", func(m string) bool {
		return sampleValue(m, "breach_exporter_state_snapshot_last_success_timestamp_seconds") > last
	})
	close(scraping)
	scrapers.Wait()

	hwm, rss := peakKB(t, child.cmd.Process.Pid)
	_, m = testkit.Get(t, metricsURL)
	accepted := sampleValue(m, `breach_webhook_requests_total{outcome="accepted"}`)
	series := strings.Count(m, "\n") - 2*strings.Count(m, "\n# ")
	t.Logf("worst case: %d addresses, %v alerts accepted in %s (%d failed), %d scrapes, %d series, snapshot %v bytes, %d slow dials; VmHWM %d kB (%.0f MiB), VmRSS %d kB; GOMEMLIMIT %s, memory limit %d MiB",
		len(addresses), accepted, sent.Round(time.Millisecond), failed.Load(), scrapes.Load(), series,
		sampleValue(m, "breach_exporter_state_snapshot_size_bytes"), dials.Load(), hwm, float64(hwm)/1024, rss, soft, limit>>20)
	if accepted != worstAlerts || failed.Load() != 0 {
		t.Errorf("%v alerts accepted, %d failed: the duplicate memory is not full", accepted, failed.Load())
	}
	if got := sampleValue(m, `breach_webhook_alerts_untracked_total{reason="discovery_limit"}`); got != 0 {
		t.Errorf("%v alerts untracked: every address should have been watched", got)
	}
	if int64(hwm)<<10 >= limit {
		t.Errorf("peak RSS %d kB with GOMEMLIMIT %s is not below the shipped memory limit of %d MiB", hwm, soft, limit>>20)
	}
}

// pollMetrics scrapes url until cond holds of the exposition, for a
// minute at most. Each poll is a scrape of the whole state, so the polls
// are slow: the interval is not synchronisation, cond decides.
func pollMetrics(t *testing.T, url, what string, cond func(exposition string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if _, m := testkit.Get(t, url); cond(m) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// worstAlert is the i-th distinct alert: every source, severity and field
// in turn, so that every address gets every alert series.
func worstAlert(address string, i int) []byte {
	round := i / (worstConfigured + worstDiscovered)
	return fmt.Appendf(nil, `{"event":"alert.created","severity":%q,"address":%q,"source":%q,"summary":"worst case %d",`+
		`"delta":{"new_source_dbs":["a","b","c"],"newly_exposed_fields":["password","hash","username","name","dob","address","phone","ip"],"has_new_plaintext":true},`+
		`"observed_at":%q}`,
		breach.KnownSeverities[round%len(breach.KnownSeverities)], address,
		breach.KnownSources[(round/len(breach.KnownSeverities))%len(breach.KnownSources)], i,
		time.Now().UTC().Format(time.RFC3339))
}

// writeFullState writes the snapshot the binary restores: the configured
// addresses and then the discovered ones, each verified with full feeds.
func writeFullState(t *testing.T, storage string, addresses []string) {
	t.Helper()
	refreshed := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	saved := watchlist.Saved{Accounts: []watchlist.SavedAccount{{Name: breach.DefaultAccount, Plan: "pro"}}}
	for i, a := range addresses {
		var sources []breach.SourceState
		for k, source := range breach.KnownSources {
			dbs := make([]string, worstDatabases)
			for d := range dbs {
				dbs[d] = fmt.Sprintf("%s-breach-corpus-%04d", source, (i*7+k*3+d)%2000)
			}
			sources = append(sources, breach.SourceState{Source: source, BreachCount: int64(worstDatabases),
				SourceDBs: dbs, FieldsExposed: breach.KnownFields, HasPlaintextPassword: true,
				LastScannedAt: refreshed, LastChangedAt: refreshed.Add(-time.Hour)})
		}
		saved.Entries = append(saved.Entries, watchlist.SavedEntry{
			Address: breach.Address{Email: a, Discovered: i >= worstConfigured}, State: breach.Verified,
			Sources: sources, LastRefresh: refreshed, LastAttempt: refreshed})
	}
	folder, err := persist.Open(storage, prometheus.NewRegistry(), log.NewNopLogger())
	if err != nil {
		t.Fatal(err)
	}
	defer folder.Close()
	if err := folder.Save(persist.State{Watchlist: saved}, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// shippedMemoryLimits are the GOMEMLIMIT (as written) and the memory
// limit (in bytes) of examples/kubernetes/deployment.yaml.
func shippedMemoryLimits(t *testing.T) (gomemlimit string, limit int64) {
	t.Helper()
	deployment, err := os.ReadFile("../../examples/kubernetes/deployment.yaml")
	if err != nil {
		t.Fatal(err)
	}
	soft := regexp.MustCompile(`name: GOMEMLIMIT\s+value: "?(\d+MiB)"?`).FindSubmatch(deployment)
	hard := regexp.MustCompile(`limits:\s+cpu: \S+\s+memory: (\d+)Mi\s`).FindSubmatch(deployment)
	if soft == nil || hard == nil {
		t.Fatal("examples/kubernetes/deployment.yaml sets no GOMEMLIMIT in MiB or no memory limit in Mi")
	}
	mib, _ := strconv.ParseInt(string(hard[1]), 10, 64)
	return string(soft[1]), mib << 20
}
