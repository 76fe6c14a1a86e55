// SPDX-License-Identifier: Apache-2.0

package faulttest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Feeds, fields, plans and members the spec does not list yet are exported
// as they come, next to the known ones, and cost no error.
func TestUnknownSourcesAndFieldsAreExported(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	h := newHarness(t)
	h.api.Misbehave(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == sim.APIPrefix+"/me" {
			io.WriteString(w, `{"id":"u1","email":"owner@example.com","plan":"enterprise","seats":40}`)
			return
		}
		io.WriteString(w, `{"email":"`+r.URL.Query().Get("email")+`","schema_version":3,"next_cursor":null,"sources":[`+
			`{"source":"archive","breach_count":2,"source_dbs":["db-a"],"fields_exposed":["password","ssn"],"confidence":0.9,`+
			`"has_plaintext_password":true,"last_scanned_at":"2031-05-06T07:00:00.000Z","last_changed_at":"2031-05-01T00:00:00.000Z"},`+
			`{"source":"darkweb","breach_count":9,"source_dbs":["forum-x"],"fields_exposed":["ssn","passport"],"region":"eu",`+
			`"has_plaintext_password":false,"last_scanned_at":"2031-05-06T07:00:00.000Z","last_changed_at":"2031-05-03T00:00:00.000Z"}]}`)
	})
	h.start()
	h.advanceUntil("the first round", time.Minute, func() bool {
		return h.value("breach_source_breaches", "address", addresses[1], "source", "darkweb") == 9
	})
	s := h.scrape()

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"breach_account_info", []string{"account", "default", "plan", "enterprise"}, 1},
		{"breach_api_up", []string{"account", "default"}, 1},
		{"breach_source_field_exposed", []string{"address", addresses[0], "source", "archive", "field", "ssn"}, 1},
		{"breach_source_field_exposed", []string{"address", addresses[0], "source", "archive", "field", "password"}, 1},
		{"breach_source_field_exposed", []string{"address", addresses[0], "source", "darkweb", "field", "passport"}, 1},
		{"breach_source_database_info", []string{"address", addresses[0], "source", "darkweb", "database", "forum-x"}, 1},
		{"breach_source_last_changed_timestamp_seconds", []string{"address", addresses[0], "source", "darkweb"}, 1935532800},
	} {
		if got := lookup(s, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Only exposed fields have a series, for an unknown feed too.
	for _, field := range breach.KnownFields {
		if _, ok := s[testkit.Series("breach_source_field_exposed", "address", addresses[1], "field", field, "source", "darkweb")]; ok {
			t.Errorf("darkweb field %s has a series, but is not exposed", field)
		}
	}
	// The fleet counts the unknown feed and field under their own labels.
	if got := lookup(s, "breach_addresses_field_exposed", "field", "passport", "source", "darkweb"); got != float64(len(addresses)) {
		t.Errorf("addresses with the passport exposed in darkweb = %v, want %d", got, len(addresses))
	}
	if all, ok := requestsTotal(s, ""), requestsTotal(s, "200"); all != ok || all == 0 {
		t.Errorf("%v requests of which %v answered 200: unknown members must not cost an error", all, ok)
	}
}

// A scrape is answered from the cache while an API request hangs: the
// stand-in scrapes from inside the hanging request.
func TestScrapeDoesNotWaitForTheAPI(t *testing.T) {
	t.Cleanup(func() { goleak.VerifyNone(t) })
	h := newHarness(t).start()
	h.advanceUntil("the first round", time.Minute, func() bool { return h.healthy(3) })

	type outcome struct {
		code             int
		requestStillOpen bool
	}
	scraped := make(chan outcome, 1)
	metrics := h.exp.MetricsHandler(h.reg)
	h.api.Misbehave(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		select {
		case scraped <- outcome{code: rec.Code, requestStillOpen: r.Context().Err() == nil}:
		default: // only the first request is looked at
		}
		<-r.Context().Done()
	})
	h.advanceUntil("a request to hang", interval, func() bool { return len(scraped) == 1 })
	if got := <-scraped; got.code != http.StatusOK || !got.requestStillOpen {
		t.Errorf("scrape during a hanging request: %d, request still open %v; want 200 while it hangs", got.code, got.requestStillOpen)
	}
}
