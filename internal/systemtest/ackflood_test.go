// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/breach-exporter/breach_exporter/internal/ackweb"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Bounds of the acknowledgement flood: 1,000 writes a second for 30 s
// against the page's API, while Prometheus's scrapes and the service's
// webhooks go on beside it.
const (
	ackFloodRate     = 1000 // writes a second
	ackFloodDuration = 30 * time.Second
	ackFloodWorkers  = 100 // connections the flood keeps open
	// A scrape and a signed webhook every sideInterval while it lasts.
	sideInterval = 100 * time.Millisecond
	// maxScrapeP99 is the bound on the scrapes' p99 under the flood.
	maxScrapeP99 = time.Second
)

// floodKind is what one write of the flood carries: the right login, a
// wrong password, or none.
func floodKind(i int) string {
	switch i % 10 {
	case 0:
		return "wrong password"
	case 1:
		return "no login"
	default:
		return "login"
	}
}

// TestAcknowledgementFloodAgainstTheBinary builds breach_exporter with
// --web.enable-acknowledgements and basic auth, and sends 1,000 POSTs a
// second for 30 s to /api/v1/acknowledgements: one in ten with a wrong
// password, one in ten without a login, the rest logged in. Every write
// gets an answer; the exporter-toolkit refuses the first two kinds (401);
// of the logged-in ones the page takes no more than its rate limit lets
// through (default burst plus rate over the flood) and refuses the rest
// with 429, each counted. Meanwhile a scrape of /metrics every 100 ms
// keeps a p99 under a second, and a signed webhook every 100 ms on the
// webhook listener is answered 204, every one.
func TestAcknowledgementFloodAgainstTheBinary(t *testing.T) {
	bin := binary(t, "builds the binary and floods it for 30 s")
	dir := t.TempDir()
	login := url.UserPassword("oncall", rand.Text())
	password, _ := login.Password()
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	testkit.WriteFile(t, webConfig, "basic_auth_users:\n  "+login.Username()+": "+string(hash)+"\n")
	const secret = "ack-flood-secret"
	cfg := receiverConfig(t, newStandIn(t), secret, "")
	webAddr, hookAddr := testkit.FreeAddress(t), testkit.FreeAddress(t)
	child := startProcess(t, bin, "--config.file", cfg, "--web.listen-address", webAddr, "--webhook.listen-address", hookAddr,
		"--web.config.file", webConfig, "--web.enable-acknowledgements", "--storage.path", filepath.Join(dir, "data"))
	web := func(path string, user *url.Userinfo) string {
		return (&url.URL{Scheme: "http", Host: webAddr, Path: path, User: user}).String()
	}
	metricsURL := web("/metrics", login)
	servesMetrics(t, metricsURL)

	wrong := url.UserPassword(login.Username(), "wrong-"+password)
	users := map[string]*url.Userinfo{"login": login, "wrong password": wrong, "no login": nil}
	body := []byte(`{"address":"alice@example.com","source":"archive","by":"flood","comment":"flood"}`)

	var (
		mu       sync.Mutex
		statuses = map[string]map[int]int{} // kind → status → count
		failed   atomic.Int64               // writes without an answer
		jobs     = make(chan int, ackFloodRate)
		workers  sync.WaitGroup
	)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: ackFloodWorkers}}
	for range ackFloodWorkers {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range jobs {
				kind := floodKind(i)
				req, _ := http.NewRequest(http.MethodPost, web(ackweb.APIPath, users[kind]), bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				resp.Body.Close()
				mu.Lock()
				if statuses[kind] == nil {
					statuses[kind] = map[int]int{}
				}
				statuses[kind][resp.StatusCode]++
				mu.Unlock()
			}
		}()
	}

	// Beside the flood: the scrapes and the webhooks, until it ends.
	hooks := make([]*http.Request, 0, ackFloodDuration/sideInterval+1)
	for i := range cap(hooks) {
		hook := []byte(fmt.Sprintf(`{"event":"alert.created","severity":"info","address":"alice@example.com","source":"archive",`+
			`"summary":"flood side %d","delta":{"previous_count":2,"new_count":2,"new_source_dbs":[],"newly_exposed_fields":[],`+
			`"has_new_plaintext":false,"is_first_scan":false},"observed_at":"%s"}`, i, time.Now().UTC().Format(time.RFC3339)))
		hooks = append(hooks, signedRequest(t, "http://"+hookAddr+"/webhook", secret, hook))
	}
	var (
		scrapeTimes                        []time.Duration
		badScrapes, hookSent, hookAnswered int // of the goroutines of every; read after side.Wait
		side                               sync.WaitGroup
		flooding                           = make(chan struct{})
	)
	// every runs f every sideInterval until the flood ends (or f says
	// it is done).
	every := func(f func() bool) {
		side.Add(1)
		go func() {
			defer side.Done()
			tick := time.NewTicker(sideInterval)
			defer tick.Stop()
			for {
				select {
				case <-flooding:
					return
				case <-tick.C:
				}
				if !f() {
					return
				}
			}
		}()
	}
	sideClient := &http.Client{Timeout: 5 * time.Second}
	every(func() bool {
		begun := time.Now()
		resp, err := sideClient.Get(metricsURL)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		scrapeTimes = append(scrapeTimes, time.Since(begun))
		if err != nil {
			badScrapes++
		}
		return true
	})
	hookClient := &http.Client{Timeout: 2 * time.Second}
	every(func() bool {
		resp, err := hookClient.Do(hooks[hookSent])
		hookSent++
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNoContent {
				hookAnswered++
			}
		}
		return hookSent < len(hooks)
	})

	// The flood: every 10 ms, the writes due by then; a write that finds
	// every worker busy and the queue full is not sent, and counted.
	start := time.Now()
	sent, unsent := 0, 0
	tick := time.NewTicker(10 * time.Millisecond)
	for {
		elapsed := time.Since(start)
		due := min(int(elapsed.Seconds()*ackFloodRate), int(ackFloodDuration.Seconds()*ackFloodRate))
		for n := sent + unsent; n < due; n++ {
			select {
			case jobs <- n:
				sent++
			default:
				unsent++
			}
		}
		if elapsed >= ackFloodDuration {
			break
		}
		<-tick.C
	}
	tick.Stop()
	close(jobs)
	workers.Wait()
	took := time.Since(start)
	close(flooding)
	side.Wait()

	_, metrics := testkit.Get(t, metricsURL)
	rateLimited := sampleValue(metrics, `breach_exporter_acknowledgement_writes_refused_total{reason="rate_limit"}`)
	accepted := sampleValue(metrics, `breach_exporter_acknowledgement_changes_total{action="acknowledge"}`)
	got := func(kind string, status int) int { return statuses[kind][status] }
	loggedIn := 0
	for _, n := range statuses["login"] {
		loggedIn += n
	}
	slices.Sort(scrapeTimes)
	p99 := scrapeTimes[int(math.Ceil(0.99*float64(len(scrapeTimes))))-1]
	t.Logf("flood: %d writes sent in %s (%d not sent: every worker busy), %d without an answer; answers %v; "+
		"counted: %v accepted, %v refused by the rate limit; scrapes: %d, %d failed, p50 %s, p99 %s, max %s; webhooks: %d of %d answered 204",
		sent, took.Round(time.Millisecond), unsent, failed.Load(), statuses, accepted, rateLimited,
		len(scrapeTimes), badScrapes, scrapeTimes[len(scrapeTimes)/2], p99, scrapeTimes[len(scrapeTimes)-1], hookAnswered, hookSent)

	// The flood was the flood: at least 95% of its writes went out.
	if want := int(0.95 * ackFloodRate * ackFloodDuration.Seconds()); sent < want {
		t.Errorf("only %d writes sent, want at least %d: the test's client could not keep the rate", sent, want)
	}
	if failed.Load() > 0 {
		t.Errorf("%d writes got no answer", failed.Load())
	}
	// The toolkit refuses the writes without the right login.
	for _, kind := range []string{"wrong password", "no login"} {
		total := 0
		for _, n := range statuses[kind] {
			total += n
		}
		if got(kind, http.StatusUnauthorized) != total || total == 0 {
			t.Errorf("writes with %s: answers %v, want all 401", kind, statuses[kind])
		}
	}
	// The logged-in ones: what the rate limit lets through, the rest 429,
	// each counted; an acknowledgement is an audit line.
	limit := ackweb.DefaultWriteBurst + int(math.Ceil(ackweb.DefaultWriteRate*took.Seconds()))
	if created := got("login", http.StatusCreated); created == 0 || created > limit || float64(created) != accepted {
		t.Errorf("%d logged-in writes accepted (counted %v), want between 1 and %d (burst + rate × %s)", created, accepted, limit, took.Round(time.Second))
	}
	if limited := got("login", http.StatusTooManyRequests); limited+got("login", http.StatusCreated) != loggedIn || float64(limited) != rateLimited {
		t.Errorf("logged-in answers %v, rate_limit counted %v: want 201 or 429 only, every 429 counted", statuses["login"], rateLimited)
	}
	if audits := strings.Count(child.logs.String(), "Acknowledgement changed on the page"); audits != got("login", http.StatusCreated) {
		t.Errorf("%d audit lines for %d acknowledgements", audits, got("login", http.StatusCreated))
	}
	if badScrapes > 0 || p99 >= maxScrapeP99 {
		t.Errorf("scrapes during the flood: %d of %d failed, p99 %s; want none failed and a p99 under %s", badScrapes, len(scrapeTimes), p99, maxScrapeP99)
	}
	if int(hookAnswered) != hookSent || hookSent < len(hooks)*9/10 {
		t.Errorf("webhooks during the flood: %d of %d answered 204 (%d prepared)", hookAnswered, hookSent, len(hooks))
	}
}
