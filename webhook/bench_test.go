// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// BenchmarkWebhook posts unique signed alerts through the real handler and
// listener over loopback HTTP/1.1 keep-alive connections. Signing and the
// client side are included, as they are in real delivery.
func BenchmarkWebhook(b *testing.B) {
	f := newFixture(b, settings{Addresses: []string{"alice@example.com"}})
	h, err := NewHandler(prometheus.NewRegistry(), Options{
		Config: f.config, Watchlist: f.watchlist, Clock: clockwork.NewRealClock(), Logger: log.NewNopLogger(),
	})
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(NewServer(h, "/webhook").Handler)
	defer ts.Close()
	ts.Client().Transport.(*http.Transport).MaxIdleConnsPerHost = 64
	url := ts.URL + "/webhook"

	var seq atomic.Int64
	prefix := []byte(validAlert[:len(validAlert)-1] + `,"n":`)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		body := make([]byte, 0, len(prefix)+24)
		for pb.Next() {
			// A unique member keeps every body out of the dedup memory.
			body = append(strconv.AppendInt(append(body[:0], prefix...), seq.Add(1), 10), '}')
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(SignatureHeader, sim.Sign(testSecret, body))
			resp, err := ts.Client().Do(req)
			if err != nil {
				b.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
	})
	b.StopTimer()

	accepted := testutil.ToFloat64(h.metrics.requests[outcomeAccepted])
	counted := f.alertCount("alice@example.com", "combolist", "critical")
	if accepted != float64(b.N) || counted != float64(b.N) {
		b.Fatalf("accepted %v, counted %v, of %d requests", accepted, counted, b.N)
	}
	b.ReportMetric(accepted/b.Elapsed().Seconds(), "accepted/s")
}
