// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"

	"fmt"
	"net"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// replica is one exporter of a replicated test, on the real clock: the
// store keeps time with its own.
type replica struct {
	*running
	dir string // its config's folder, where startTwoReplicas sets one
}

func startReplica(t *testing.T, dir, storage string) *replica {
	t.Helper()
	return startReplicaEvery(t, dir, storage, time.Second)
}

// startReplicaEvery starts a replica that writes its snapshot every
// interval.
func startReplicaEvery(t *testing.T, dir, storage string, interval time.Duration) *replica {
	t.Helper()
	r, _ := startCrashable(t, dir, storage, interval)
	return r
}

func (r *replica) scrape(t *testing.T) map[string]float64 {
	return testkit.Scrape(t, r.exp.MetricsHandler(r.reg))
}

func (r *replica) post(t *testing.T, body string) int {
	rec := httptest.NewRecorder()
	r.exp.WebhookHandler().ServeHTTP(rec, signed(body))
	return rec.Code
}

// shared are the series every replica must serve alike.
func shared(t *testing.T, r *replica) string {
	var out []string
	for series, v := range r.scrape(t) {
		if strings.HasPrefix(series, "breach_address_state") || strings.HasPrefix(series, "breach_source_") ||
			strings.HasPrefix(series, "breach_alerts_total") || strings.HasPrefix(series, "breach_account_") {
			out = append(out, fmt.Sprintf("%s %v", series, v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// Two replicas on one store read each address once between them, serve the
// same state, count an alert delivered to both once, and keep accepting
// alerts while the store is frozen, counting them once it is back.
func TestReplicasShareOneStore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two exporters against a real redis-server for about 15 s")
	}
	store := testkit.StartOwnRedis(t)
	api := testkit.NewStandIn(t, clockwork.NewRealClock())
	api.AnswerOthers(combolist(1))
	dir := t.TempDir()
	addresses := []string{"a@example.com", "b@example.com", "c@example.com", "d@example.com", "e@example.com", "f@example.com"}
	writeConfig(t, dir, api.BaseURL(), fmt.Sprintf("store:\n  url: %s\naddresses: [%s]\n", store.URL(), strings.Join(addresses, ", ")))
	one := startReplica(t, dir, filepath.Join(dir, "one"))
	two := startReplica(t, dir, filepath.Join(dir, "two"))

	verified := func(r *replica) bool {
		s := r.scrape(t)
		for _, a := range addresses {
			if s[testkit.Series("breach_address_state", "account", "default", "address", a, "state", "verified")] != 1 {
				return false
			}
		}
		return true
	}
	testkit.Eventually(t, "both replicas serve every address verified", func() bool { return verified(one) && verified(two) })

	// Each address was read once between the two: the claims.
	for _, a := range addresses {
		if n := api.Reads(a); n != 1 {
			t.Errorf("%s read %d times by the two replicas, want once", a, n)
		}
	}

	// One body to both: counted once, on both.
	body := alertFor("a@example.com")
	if c1, c2 := one.post(t, body), two.post(t, body); c1 != 204 || c2 != 204 {
		t.Fatalf("answers %d and %d, want 204 twice", c1, c2)
	}
	alerts := testkit.Series("breach_alerts_total", "address", "a@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "the alert counted once on both replicas", func() bool {
		return one.scrape(t)[alerts] == 1 && two.scrape(t)[alerts] == 1
	})
	accepted := testkit.Series("breach_webhook_requests_total", "outcome", "accepted")
	duplicate := testkit.Series("breach_webhook_requests_total", "outcome", "duplicate")
	testkit.Eventually(t, "one accepted and one duplicate between the replicas", func() bool {
		s1, s2 := one.scrape(t), two.scrape(t)
		return s1[accepted]+s2[accepted] == 1 && s1[duplicate]+s2[duplicate] == 1
	})

	// The store frozen: the alert is still answered 204, and counted once
	// the store answers again.
	store.Pause()
	if c := two.post(t, alertFor("b@example.com")); c != 204 {
		t.Fatalf("with the store frozen the alert was answered %d, want 204 (journaled)", c)
	}
	up := testkit.Series("breach_exporter_store_up")
	testkit.Eventually(t, "store_up 0 while it is frozen", func() bool { return two.scrape(t)[up] == 0 })
	store.Resume()
	b := testkit.Series("breach_alerts_total", "address", "b@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "the alert accepted during the outage counted once on both", func() bool {
		return one.scrape(t)[b] == 1 && two.scrape(t)[b] == 1 && two.scrape(t)[up] == 1
	})
	testkit.Eventually(t, "the same state on both", func() bool { return shared(t, one) == shared(t, two) })

	// A third replica starts from the store: the whole state at once.
	three := startReplica(t, dir, filepath.Join(dir, "three"))
	if got, want := shared(t, three), shared(t, one); got != want {
		t.Errorf("a replica that starts serves, at its first scrape:\n%s\nwant what the others serve:\n%s", got, want)
	}

	// The budget: never a 429.
	windows, _ := api.Windows(testkit.APIToken)
	for _, w := range windows {
		if w.RateLimited > 0 || w.Requests > 60 {
			t.Errorf("window %s: %d requests, %d answered 429", w.Start, w.Requests, w.RateLimited)
		}
	}
}

// A store that restarted empty gets a checkpoint again within a snapshot
// interval, also when nothing changes meanwhile: a replica that starts
// with an empty folder then still serves the whole state, alert counts
// included, at its first scrape.
func TestCheckpointIsWrittenAgainAfterTheStoreLostIt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs exporters against a real redis-server")
	}
	store := testkit.StartOwnRedis(t)
	api := testkit.NewStandIn(t, clockwork.NewRealClock())
	api.AnswerOthers(combolist(1))
	dir := t.TempDir()
	writeConfig(t, dir, api.BaseURL(), fmt.Sprintf("store:\n  url: %s\nrefresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [a@example.com]\n", store.URL()))
	one := startReplica(t, dir, filepath.Join(dir, "one"))
	if c := one.post(t, alertFor("a@example.com")); c != 204 {
		t.Fatalf("alert answered %d, want 204", c)
	}
	alerts := testkit.Series("breach_alerts_total", "address", "a@example.com", "severity", "critical", "source", "combolist")
	testkit.Eventually(t, "the alert counted", func() bool { return one.scrape(t)[alerts] == 1 })

	c := redis.NewClient(&redis.Options{Addr: store.Addr(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	checkpointed := func() bool {
		n, err := c.Exists(context.Background(), "breach_exporter:checkpoint").Result()
		return err == nil && n == 1
	}
	// Quiet: the address read (which also serves the alert's re-read), and
	// everything checkpointed; nothing more is due for an hour.
	testkit.Eventually(t, "the address read", func() bool {
		return strings.Contains(one.logs.String(), `address=a@example.com msg="API request"`)
	})
	testkit.Eventually(t, "a checkpoint of the whole stream", func() bool {
		id, err := c.HGet(context.Background(), "breach_exporter:checkpoint", "id").Result()
		last, lerr := c.XRevRangeN(context.Background(), "breach_exporter:events", "+", "-", 1).Result()
		return err == nil && lerr == nil && len(last) == 1 && last[0].ID == id
	})
	store.Stop()
	store.Start()
	if checkpointed() {
		t.Fatal("the store kept its keys over a restart")
	}
	testkit.Eventually(t, "a checkpoint in the store again", checkpointed)

	two := startReplica(t, dir, filepath.Join(dir, "two"))
	if got, want := shared(t, two), shared(t, one); got != want {
		t.Errorf("a replica that starts after the store restarted serves:\n%s\nwant what the other serves:\n%s", got, want)
	}
}

// A replica that stops with alerts the store does not hold yet says so:
// they are in its folder only, and lost with it.
func TestStopWithAlertsWaitingForTheStoreLogsThem(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: the store is down
	api := testkit.NewStandIn(t, clockwork.NewRealClock())
	dir := t.TempDir()
	writeConfig(t, dir, api.BaseURL(), fmt.Sprintf("store:\n  url: redis://%s\naddresses: [a@example.com]\n", addr))
	one := startReplica(t, dir, filepath.Join(dir, "one"))
	if c := one.post(t, alertFor("a@example.com")); c != 204 {
		t.Fatalf("alert answered %d, want 204 (journaled)", c)
	}
	one.stop()
	if !strings.Contains(one.logs.String(), `msg="Stopping with alerts accepted here that the store does not hold yet;`) || !strings.Contains(one.logs.String(), "alerts=1") {
		t.Errorf("no warning of the alert waiting for the store at the stop; logs:\n%s", one.logs.String())
	}
}
