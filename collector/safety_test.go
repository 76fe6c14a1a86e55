// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// A registry family with the name of one of the collector's, whether the
// collector writes lines for it or not, fails the scrape with 500 naming
// it, instead of serving two families of one name.
func TestGatheredFamilyWithTheCollectorsNameFailsTheScrape(t *testing.T) {
	f := newFixture(breach.LabelEmail, true, breach.Address{Email: "alice@example.com"})
	for _, name := range []string{families[0].name, families[len(families)-1].name} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "a_first", Help: "h"}))
		reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "h"}))
		rec := httptest.NewRecorder()
		NewHandler(f.c, reg, log.NewNopLogger()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), name) {
			t.Errorf("gathered %s: %d %q, want 500 naming it", name, rec.Code, rec.Body.String())
		}
	}
	// A name that only starts like the collector's is served, merged with
	// the collector's families in name order.
	other := families[0].name + "_other"
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: other, Help: "h"}))
	rec := httptest.NewRecorder()
	NewHandler(f.c, reg, log.NewNopLogger()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("a registry without a shared name: %d %q", rec.Code, rec.Body.String())
	}
	var order []string
	for _, mf := range testkit.ParseText(t, rec.Body.String()) {
		order = append(order, mf.GetName())
	}
	if !slices.Contains(order, other) || !slices.IsSorted(order) {
		t.Errorf("families served in the order %v, want %s among them, all in name order", order, other)
	}
}

// FuzzRenderingIsExpfmts: for any label values, help text and value, the
// hand-written text lines are byte for byte what expfmt's text encoder
// writes for the same series with its labels in the same order: UTF-8,
// quotes, backslashes, newlines and invalid UTF-8 included.
func FuzzRenderingIsExpfmts(f *testing.F) {
	f.Add("alice@example.com", "archive", "Help.", 1.0)
	f.Add(`quote " inside`, `back\slash`, "help with \\ and \n newline", 0.0)
	f.Add("new\nline", "\\n literally", `"quoted" help`, -1.0)
	f.Add("ünïcödé 漢字 🙂", "tab\there", "ü", 1795168800.25)
	f.Add("invalid \xff\xfe utf-8", "\xc3", "help \xff", math.NaN())
	f.Add("", "\r\n", "", math.Inf(1))
	f.Add(`\`, `"`, `\`, math.Inf(-1))
	f.Add("sha256:0123456789abcdef", "}", "{", 1e-300)
	f.Add(strings.Repeat("x", 300), "a,b=c", "#", math.Copysign(0, -1))

	f.Fuzz(func(t *testing.T, address, source, help string, v float64) {
		const name = "breach_fuzz"
		labels := []label{{"address", address}, {"source", source}}
		ours := string(familyHeader(name, help, "gauge")) +
			string(appendSeries(nil, name, v, labels...)) +
			string(appendAddressSeries(nil, name, v, labels[0], labels[1]))

		series := &dto.Metric{Gauge: &dto.Gauge{Value: &v}}
		for _, l := range labels {
			series.Label = append(series.Label, &dto.LabelPair{Name: &l.name, Value: &l.value})
		}
		familyName := name
		mf := &dto.MetricFamily{Name: &familyName, Help: &help, Type: dto.MetricType_GAUGE.Enum(),
			Metric: []*dto.Metric{series, series}}
		var b strings.Builder
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatalf("expfmt: %v", err)
		}
		if ours != b.String() {
			t.Errorf("rendered differs from expfmt:\n--- ours\n%q\n--- expfmt\n%q", ours, b.String())
		}
	})
}
