package collector

import (
	"fmt"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// withAcks puts data in force as the acknowledgements file, as a reload does.
func (f *fixture) withAcks(t *testing.T, data string) {
	t.Helper()
	acks, err := acknowledge.Parse([]byte(data), polled)
	if err != nil {
		t.Fatal(err)
	}
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55}}, Acknowledgements: acks})
}

// An acknowledgement handles what its feeds reported up to handled_at: the
// acknowledged feeds get one series each, the fleet counts open and
// handled exposures, and a reload re-renders the addresses' cached lines.
func TestAcknowledgements(t *testing.T) {
	later := changed.Add(48 * time.Hour)
	f := newFixture(breach.LabelEmail, false, testkit.Addresses("a@example.com", "b@example.com")...)
	f.answer("a@example.com", breach.Verified, []breach.SourceState{
		{Source: "combolist", HasPlaintextPassword: true, LastChangedAt: changed},
		{Source: "index", HasPlaintextPassword: true, LastChangedAt: later},
		{Source: "archive", LastChangedAt: changed},
	}, polled)
	f.answer("b@example.com", breach.Verified, []breach.SourceState{
		{Source: "combolist", HasPlaintextPassword: true, LastChangedAt: changed},
	}, polled)
	before, _ := seriesOf(t, f, "b@example.com")
	testkit.Scrape(t, f.h) // the blocks are cached before the reload

	handled := changed.Add(time.Hour)
	f.withAcks(t, fmt.Sprintf("acknowledgements:\n  - address: A@example.com\n    handled_at: %s\n    by: oncall\n    comment: \"rotated, \\\"all\\\" sessions\"\n  - address: nobody@example.com\n    handled_at: %[1]s\n    by: x\n",
		handled.Format(time.RFC3339)))
	samples := testkit.Scrape(t, f.h)
	ack := func(source string) string {
		return testkit.Series("breach_source_acknowledged_timestamp_seconds", "address", "a@example.com", "source", source,
			"by", "oncall", "comment", `rotated, "all" sessions`)
	}
	for _, source := range []string{"archive", "combolist", "index"} {
		if got, ok := samples[ack(source)]; !ok || got != unixSeconds(handled) {
			t.Errorf("%s = %v (present %v), want %v", ack(source), got, ok, unixSeconds(handled))
		}
	}
	if after, byFamily := seriesOf(t, f, "b@example.com"); after != before {
		t.Errorf("b, not acknowledged: %d series, %d before: %v", after, before, byFamily)
	}
	for _, c := range []struct {
		family, source string
		want           float64
	}{
		// a's combolist changed before handled_at; its index after.
		{"breach_addresses_plaintext_password_handled", "combolist", 1},
		{"breach_addresses_plaintext_password_open", "combolist", 1}, // b
		{"breach_addresses_plaintext_password_open", "index", 1},
		{"breach_addresses_plaintext_password_handled", "index", 0},
		{"breach_addresses_plaintext_password_open", "archive", 0},
		{"breach_addresses_plaintext_password_handled", "enriched", 0},
	} {
		key := testkit.Series(c.family, "source", c.source)
		if got, ok := samples[key]; !ok || got != c.want {
			t.Errorf("%s = %v (present %v), want %v", key, got, ok, c.want)
		}
	}

	// A reload without the file drops the series and opens the exposures.
	f.withAcks(t, "")
	samples = testkit.Scrape(t, f.h)
	if _, ok := samples[ack("combolist")]; ok {
		t.Errorf("%s served after the acknowledgement went", ack("combolist"))
	}
	if got := samples[testkit.Series("breach_addresses_plaintext_password_open", "source", "combolist")]; got != 2 {
		t.Errorf("open combolist exposures %v, want 2", got)
	}
}
