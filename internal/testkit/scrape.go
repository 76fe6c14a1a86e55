// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"cmp"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ScrapeText serves one GET /metrics through h, as Prometheus asks for it,
// and returns the exposition.
func ScrapeText(t testing.TB, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", "application/openmetrics-text;version=1.0.0;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.1")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// ParseText parses an exposition in the text format into metric families,
// sorted by name.
func ParseText(t testing.TB, text string) []*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing the exposition: %v", err)
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out
}

// ScrapeGatherer is a Gatherer over h's exposition, scraped at each Gather,
// for testutil's comparisons.
func ScrapeGatherer(t testing.TB, h http.Handler) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		return ParseText(t, ScrapeText(t, h)), nil
	})
}

// Scrape indexes the samples of one scrape of h as Samples does.
func Scrape(t testing.TB, h http.Handler) map[string]float64 {
	t.Helper()
	return Flatten(ParseText(t, ScrapeText(t, h)))
}
