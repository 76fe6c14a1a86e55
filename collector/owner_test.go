// SPDX-License-Identifier: Apache-2.0

package collector

import (
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func owned(email string, labels map[string]string) breach.Address {
	return breach.Address{Email: email, Labels: breach.OwnerLabels(labels)}
}

// infoLines are the breach_address_info lines of a scrape.
func infoLines(t *testing.T, f *fixture) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(testkit.ScrapeText(t, f.h)) {
		if strings.HasPrefix(line, "breach_address_info{") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// One series per address carries its owner labels, in name order after
// address and account; an address without any has the series still (an
// unowned address pages too: the rules' join needs its info series).
func TestAddressInfoCarriesTheOwnerLabels(t *testing.T) {
	f := newFixture(breach.LabelEmail, false,
		owned("a@example.com", map[string]string{"team": "payments", "owner": "jdoe"}),
		owned("b@example.com", nil))
	got := infoLines(t, f)
	want := []string{
		`breach_address_info{address="a@example.com",account="default",owner="jdoe",team="payments"} 1`,
		`breach_address_info{address="b@example.com",account="default"} 1`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("info series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// A change of owner moves the info series and leaves the data
	// series as they were.
	before := strings.ReplaceAll(testkit.ScrapeText(t, f.h), "jdoe", "asmith")
	f.reg.Sync(nil, []breach.Address{
		owned("a@example.com", map[string]string{"team": "payments", "owner": "asmith"}),
		owned("b@example.com", nil)}, breach.LabelEmail, 1000)
	if after := testkit.ScrapeText(t, f.h); after != before {
		t.Errorf("after a change of owner, the scrape differs in more than the owner:\n%s\nwant:\n%s", after, before)
	}

	// metrics.address_info: false takes it off.
	off := false
	f.config.Store(&config.Bundle{Config: &config.Config{API: config.APIConfig{RequestsPerMinute: 55},
		Metrics: config.MetricsConfig{AddressInfo: &off}}})
	if got := infoLines(t, f); len(got) != 0 {
		t.Errorf("address_info off: %v", got)
	}
}

// An owner label whose value is an email address is labelled as the
// address label is: no clear address outside labels.address email.
func TestOwnerValueThatIsAnAddressFollowsTheLabelMode(t *testing.T) {
	const owner = "Jane.Doe@example.com"
	for _, mode := range []breach.LabelMode{breach.LabelHash, breach.LabelAlias, breach.LabelEmail} {
		f := newFixture(mode, false, breach.Address{Email: "a@example.com", Alias: "a",
			Labels: breach.OwnerLabels(map[string]string{"owner": owner, "team": "payments"})})
		got := infoLines(t, f)
		if len(got) != 1 {
			t.Fatalf("%s: %d info series, want 1: %v", mode, len(got), got)
		}
		shown := strings.Contains(got[0], `owner="`+owner+`"`)
		hashed := strings.Contains(got[0], `owner="`+breach.HashLabel(owner)+`"`)
		if shown != (mode == breach.LabelEmail) || hashed == (mode == breach.LabelEmail) {
			t.Errorf("%s: %s", mode, got[0])
		}
		if !strings.Contains(got[0], `team="payments"`) {
			t.Errorf("%s: team lost: %s", mode, got[0])
		}
	}
}
