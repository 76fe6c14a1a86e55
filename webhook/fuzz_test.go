// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// FuzzHandler: no request panics the handler, every request has exactly
// one outcome, and a request that is not correctly signed changes no alert
// series and is answered before the parser (405, 413 or 401).
func FuzzHandler(f *testing.F) {
	valid := []byte(validAlert)
	goodSig := sim.Sign(testSecret, valid)
	f.Add("POST", "application/json", "", valid, true)
	f.Add("POST", "application/json", goodSig, valid, false)
	f.Add("POST", "application/json", strings.ToUpper(goodSig), valid, false)
	f.Add("POST", "application/json", sim.Sign([]byte("wrong"), valid), valid, false)
	f.Add("POST", "application/json", "", []byte(`{"event":"alert.resolved"}`), true)
	f.Add("POST", "application/json", "", []byte(`{"event":`), true)
	f.Add("POST", "text/plain", "", valid, true)
	f.Add("GET", "", "", []byte{}, false)
	f.Add("POST", "application/json", "", bytes.Repeat([]byte("a"), fuzzMaxBody+1), true)

	f.Fuzz(func(t *testing.T, method, contentType, signature string, body []byte, signIt bool) {
		fx := newFixture(t, settings{
			MaxBodyBytes: fuzzMaxBody,
			Addresses:    []string{"alice@example.com"},
		})
		if signIt {
			signature = sim.Sign(testSecret, body)
		}
		req := &http.Request{
			Method:        method,
			URL:           &url.URL{Path: "/webhook"},
			Proto:         "HTTP/1.1",
			ProtoMajor:    1,
			ProtoMinor:    1,
			Header:        http.Header{"Content-Type": {contentType}, SignatureHeader: {signature}},
			Body:          io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)),
			RemoteAddr:    "192.0.2.1:4321",
		}
		before := alertExposition(t, fx)

		rec := httptest.NewRecorder()
		fx.h.ServeHTTP(rec, req)

		if got := fx.outcomeSum(); got != 1 {
			t.Fatalf("outcomes sum to %v, want 1", got)
		}
		if signature == sim.Sign(testSecret, body) {
			if rec.Code == http.StatusUnauthorized {
				t.Fatal("correctly signed request answered 401")
			}
			return
		}
		switch rec.Code {
		case http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge, http.StatusUnauthorized:
		default:
			t.Fatalf("badly signed request answered %d", rec.Code)
		}
		if after := alertExposition(t, fx); after != before {
			t.Fatalf("badly signed request changed the alert series:\n%s\n---\n%s", before, after)
		}
		if q := fx.queued(); len(q) != 0 || fx.watchlist.Len() != 1 {
			t.Fatalf("badly signed request queued %v for a re-read or changed the watched addresses (%d)", q, fx.watchlist.Len())
		}
	})
}

// A small cap so the fuzzer reaches too_large.
const fuzzMaxBody = 512

// alertExposition renders every alert series as text.
func alertExposition(t *testing.T, fx *fixture) string {
	t.Helper()
	families, err := fx.gatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range families {
		if strings.HasPrefix(mf.GetName(), "breach_alert") {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	if b.Len() == 0 {
		t.Fatal("no alert series: the configured address should have zeroed ones")
	}
	return b.String()
}
