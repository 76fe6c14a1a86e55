// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// served is a replica with its /metrics on a loopback listener, as the
// others reach it.
type served struct {
	*replica
	url     string
	server  *http.Server
	proxied atomic.Int64 // scrapes another replica passed here
	// credentials counts passed scrapes that carried Prometheus'
	// Authorization: the URL they went to came from the store.
	credentials atomic.Int64
}

func (s *storeSetup) servedReplica(t *testing.T, name string) *served {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sr := &served{url: "http://" + ln.Addr().String() + "/metrics"}
	sr.replica = &replica{running: startExporter(t, Options{
		ConfigFile:       filepath.Join(s.dir, "config.yml"),
		Webhook:          true,
		StoragePath:      filepath.Join(s.dir, name),
		SnapshotInterval: time.Second,
		AdvertiseURL:     sr.url,
	})}
	h := sr.exp.MetricsHandler(sr.reg)
	sr.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(proxiedHeader) != "" {
			sr.proxied.Add(1)
			if r.Header.Get("Authorization") != "" {
				sr.credentials.Add(1)
			}
		}
		h.ServeHTTP(w, r)
	})}
	go func() { _ = sr.server.Serve(ln) }()
	t.Cleanup(func() { sr.server.Close() })
	return sr
}

// get scrapes the replica over HTTP with the scope given ("" for none),
// with a scrape timeout of timeout; it returns the status and the samples.
func (sr *served) get(t *testing.T, scope string, timeout time.Duration) (int, map[string]float64) {
	t.Helper()
	url := sr.url
	if scope != "" {
		url += "?scope=" + scope
	}
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(scrapeTimeoutHeader, strings.TrimSuffix(timeout.String(), "s"))
	req.SetBasicAuth("prometheus", "secret") // as a scrape with web auth; never passed on
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, testkit.Flatten(testkit.ParseText(t, string(body)))
}

// cluster scrapes scope=cluster, which must answer 200.
func (sr *served) cluster(t *testing.T) map[string]float64 {
	t.Helper()
	code, m := sr.get(t, "cluster", 5*time.Second)
	if code != http.StatusOK {
		t.Fatalf("scope=cluster answered %d", code)
	}
	return m
}

// kill stops the replica as a SIGKILL would: no lease given back, its
// listener gone.
func (sr *served) kill() {
	sr.server.Close()
	sr.crash()
}

// holder is the replica the store's lease names, nil when none.
func (s *storeSetup) holder(t *testing.T, rs ...*served) *served {
	t.Helper()
	v, _ := s.redis.Get(context.Background(), "breach_exporter:serving").Result()
	for _, r := range rs {
		if strings.HasSuffix(v, "\n"+r.url) {
			return r
		}
	}
	return nil
}

// Three replicas: scope=cluster is answered with one replica's state
// whichever is scraped (the others pass the scrape to it), scope=replica
// with each one's own health and nothing of the cluster's, a scope it does
// not know with 400. The serving replica killed, the others answer
// scope=cluster all the same, and a counter Prometheus read never goes
// back; a replica behind what was served answers 503 rather than a lower
// count.
func TestOneReplicaServesTheClusterScope(t *testing.T) {
	s := newStoreSetup(t)
	rs := []*served{s.servedReplica(t, "one"), s.servedReplica(t, "two"), s.servedReplica(t, "three")}
	for _, r := range rs {
		s.verified(t, r.replica)
		testkit.Eventually(t, "synced", func() bool { return r.synced(t) })
	}
	var serving *served
	testkit.Eventually(t, "one replica holds the lease", func() bool { serving = s.holder(t, rs...); return serving != nil })
	alert(t, rs[0].replica, "a@example.com")
	alerts := alertsOf("a@example.com")
	testkit.Eventually(t, "the alert counted on every replica", func() bool {
		return rs[0].scrape(t)[alerts] == 1 && rs[1].scrape(t)[alerts] == 1 && rs[2].scrape(t)[alerts] == 1
	})

	for _, r := range rs {
		m := r.cluster(t)
		if m[alerts] != 1 || m[testkit.Series("breach_address_state", "account", "default", "address", "a@example.com", "state", "verified")] != 1 {
			t.Errorf("scope=cluster of a replica lacks the cluster's series: alerts %v", m[alerts])
		}
		if _, ok := m[testkit.Series("breach_exporter_store_synced")]; ok {
			t.Error("scope=cluster serves a replica's own health")
		}
		code, own := r.get(t, "replica", 5*time.Second)
		if _, ok := own[testkit.Series("breach_exporter_store_synced")]; code != 200 || !ok {
			t.Errorf("scope=replica answered %d without breach_exporter_store_synced", code)
		}
		if _, ok := own[alerts]; ok {
			t.Error("scope=replica serves the cluster's series")
		}
		if code, _ := r.get(t, "everything", 5*time.Second); code != http.StatusBadRequest {
			t.Errorf("an unknown scope answered %d, want 400", code)
		}
	}
	if got := serving.proxied.Load(); got != 2 {
		t.Errorf("the serving replica answered %d scrapes the others passed on, want 2 (one each)", got)
	}
	if got := serving.credentials.Load(); got != 0 {
		t.Errorf("%d passed scrapes carried Prometheus' credentials to a URL read from the store, want none", got)
	}
	for _, r := range rs {
		if r != serving && r.proxied.Load() != 0 {
			t.Error("a replica that does not serve was passed a scrape")
		}
	}

	// A replica behind what was served answers 503, not a lower count.
	var other *served
	for _, r := range rs {
		if r != serving {
			other = r
		}
	}
	served, err := s.redis.Get(context.Background(), "breach_exporter:served").Result()
	if err != nil {
		t.Fatalf("no stream ID recorded as served: %v", err)
	}
	serving.kill()
	if err := s.redis.Set(context.Background(), "breach_exporter:served", "99999999999999-0", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if code, _ := other.get(t, "cluster", time.Second); code != http.StatusServiceUnavailable {
		t.Errorf("a replica behind the stream ID served answered %d, want 503", code)
	}
	if err := s.redis.Set(context.Background(), "breach_exporter:served", served, 0).Err(); err != nil {
		t.Fatal(err)
	}

	// With the serving replica killed, every scrape is answered, with the
	// count it had; another takes the lease once it ran out.
	for _, r := range rs {
		if r == serving {
			continue
		}
		if m := r.cluster(t); m[alerts] < 1 {
			t.Errorf("after the serving replica was killed, scope=cluster serves %v alerts, fewer than the 1 served before", m[alerts])
		}
	}
	testkit.Eventually(t, "another replica holds the lease", func() bool {
		h := s.holder(t, rs...)
		return h != nil && h != serving
	})
}

// A replica that stops cleanly gives the lease back: the next scrape finds
// another serving at once, not when the lease runs out.
func TestStoppedReplicaGivesTheLeaseBack(t *testing.T) {
	s := newStoreSetup(t)
	one, two := s.servedReplica(t, "one"), s.servedReplica(t, "two")
	for _, r := range []*served{one, two} {
		testkit.Eventually(t, "synced", func() bool { return r.synced(t) })
	}
	var serving *served
	testkit.Eventually(t, "one replica holds the lease", func() bool { serving = s.holder(t, one, two); return serving != nil })
	if err := serving.stop(); err != nil {
		t.Fatal(err)
	}
	if h := s.holder(t, one, two); h != nil {
		t.Fatal("the stopped replica still holds the lease")
	}
	other := one
	if serving == one {
		other = two
	}
	other.cluster(t)
	if h := s.holder(t, one, two); h != other {
		t.Fatal("the replica scraped next does not hold the lease")
	}
}
