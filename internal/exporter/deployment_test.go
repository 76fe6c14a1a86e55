// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// postSigned posts body to r's receiver signed with secret.
func (r *replica) postSigned(t *testing.T, secret, body string) int {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "/webhook", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(sim.SignatureHeader, sim.Sign([]byte(secret), []byte(body)))
	rec := httptest.NewRecorder()
	r.exp.WebhookHandler().ServeHTTP(rec, req)
	return rec.Code
}

// A store emptied (FLUSHALL) under a running deployment A, and claimed at
// once by a second deployment B with the same key_prefix (its own API,
// key, secret and name), which takes alerts at once: the identity A checks
// every 5 s is B's before A notices. Neither merges into the other: A's
// replica applies none of B's stream entries and writes nothing more (the
// store refuses its writes, and it locks itself out, saying so); B loads
// no checkpoint of A's and counts only its own alerts.
func TestDeploymentsDoNotMergeAfterTheStoreIsEmptied(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two deployments' exporters against a real redis-server")
	}
	store := testkit.StartRedis(t)
	apiA := testkit.NewStandIn(t, clockwork.NewRealClock())
	apiB := testkit.NewStandIn(t, clockwork.NewRealClock(), func(o *sim.Options) { o.Token = "svc_ak_beta" })
	apiA.AnswerOthers(combolist(1))
	apiB.AnswerOthers(combolist(1))
	dirA, dirB := t.TempDir(), t.TempDir()
	tail := "store:\n  url: " + store.URL() + "\n  deployment: %s\nrefresh:\n  interval: 1h\n  me_interval: 1h\naddresses: [a@example.com]\n"
	writeConfig(t, dirA, apiA.BaseURL(), fmt.Sprintf(tail, "alpha"))
	writeConfig(t, dirB, apiB.BaseURL(), fmt.Sprintf(tail, "beta"))
	testkit.WriteFile(t, filepath.Join(dirB, "token"), "svc_ak_beta")
	const secretA, secretB = "exporter-hook-secret", "beta-hook-secret"
	testkit.WriteFile(t, filepath.Join(dirB, "secret"), secretB)

	c := redis.NewClient(&redis.Options{Addr: store.Addr(), DB: store.DB(), Protocol: 2})
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	alerts := alertsOf("a@example.com")
	a := startReplica(t, dirA, filepath.Join(dirA, "data"))
	const nA, nB = 3, 5
	for i := range nA {
		if code := a.postSigned(t, secretA, alertNumbered("a@example.com", i)); code != 204 {
			t.Fatalf("A's alert %d answered %d", i, code)
		}
	}
	testkit.Eventually(t, "A's alerts counted and A synced", func() bool { return a.scrape(t)[alerts] == nA && a.synced(t) })
	testkit.Eventually(t, "A's checkpoint in the store", func() bool {
		n, err := c.Exists(ctx, "breach_exporter:checkpoint").Result()
		return err == nil && n == 1
	})

	// The store emptied and B's identity in it in one step: B claims it
	// before any write of A's.
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushDB(ctx)
		p.Set(ctx, "breach_exporter:deployment", "beta", 0)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b := startReplica(t, dirB, filepath.Join(dirB, "data"))
	for i := range nB {
		if code := b.postSigned(t, secretB, alertNumbered("a@example.com", 10+i)); code != 204 {
			t.Fatalf("B's alert %d answered %d", i, code)
		}
	}
	// An alert to A now: A keeps it (journal, backlog), B never sees it.
	if code := a.postSigned(t, secretA, alertNumbered("a@example.com", nA)); code != 204 {
		t.Fatalf("A's alert after B's start answered %d", code)
	}

	testkit.Eventually(t, "A locked out of B's store", func() bool {
		return strings.Contains(a.logs.String(), "holds another deployment") && a.scrape(t)[testkit.Series("breach_exporter_store_up")] == 0
	})
	testkit.Eventually(t, "B synced with B's alerts counted", func() bool { return b.synced(t) && b.scrape(t)[alerts] >= nB })

	if got := a.scrape(t)[alerts]; got != nA {
		t.Errorf("A counts %v alerts, want its own %d: it applied B's", got, nA)
	}
	if got := b.scrape(t)[alerts]; got != nB {
		t.Errorf("B counts %v alerts, want its own %d: it took A's (checkpoint or stream)", got, nB)
	}
	for _, msg := range []string{"Starting from the store's checkpoint", "Loaded the store's checkpoint"} {
		if strings.Contains(b.logs.String(), msg) {
			t.Errorf("B loaded a checkpoint (%q), and there was none of B's:\n%s", msg, b.logs)
		}
		if strings.Contains(a.logs.String(), msg) {
			t.Errorf("A loaded a checkpoint (%q) after it started:\n%s", msg, a.logs)
		}
	}
	if got := a.scrape(t)[testkit.Series("breach_exporter_store_forward_backlog")]; got != 1 {
		t.Errorf("A holds %v alerts for the store, want its last one (the store is B's)", got)
	}
	if got := a.scrape(t)[testkit.Series("breach_exporter_store_foreign_total", "what", "write")]; got < 1 {
		t.Errorf("A counts %v writes refused as another deployment's, want at least 1", got)
	}
}
