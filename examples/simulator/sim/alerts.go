// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// Alert is the body of an alert.created webhook (spec section 6), as the
// service writes it. The exporter's receiver reads the same body into its
// own webhook.Alert; the two are kept apart on purpose: this one is the
// sender's reading of the spec (observed_at as the spec's text, counts as
// the spec's integers), that one the receiver's, so a misreading on either
// side shows up as a failed delivery in the tests instead of being shared.
// The bench sends this type too. The enums it carries live in
// internal/breach.
type Alert struct {
	Event        string `json:"event"`
	Severity     string `json:"severity"`
	Address      string `json:"address"`
	Source       string `json:"source"`
	Summary      string `json:"summary"`
	Delta        Delta  `json:"delta"`
	ObservedAt   string `json:"observed_at"`
	DashboardURL string `json:"dashboard_url"`
}

// Delta is what changed in one feed of one address since the prior sweep.
// Counts are distinct source databases, as the spec defines them.
type Delta struct {
	PreviousCount      int      `json:"previous_count"`
	NewCount           int      `json:"new_count"`
	NewSourceDBs       []string `json:"new_source_dbs"`
	NewlyExposedFields []string `json:"newly_exposed_fields"`
	HasNewPlaintext    bool     `json:"has_new_plaintext"`
	IsFirstScan        bool     `json:"is_first_scan"`
}

// ObservedAtLayout is the spec's shape for observed_at: whole seconds, UTC.
const ObservedAtLayout = "2006-01-02T15:04:05Z"

// AlertKey identifies a stream of alerts the way an alert counter would.
type AlertKey struct {
	Address  string
	Source   string
	Severity string
}

// Key returns the alert's counter key.
func (a Alert) Key() AlertKey {
	return AlertKey{Address: a.Address, Source: a.Source, Severity: a.Severity}
}

// deltaBetween derives the delta from the two states alone, so it is correct
// whatever combination of mutations produced the change.
func deltaBetween(before, after *feed) Delta {
	return Delta{
		PreviousCount:      len(before.records),
		NewCount:           len(after.records),
		NewSourceDBs:       newDBsSince(before, after),
		NewlyExposedFields: newFieldsSince(before, after),
		HasNewPlaintext:    after.plaintext && !before.plaintext,
		IsFirstScan:        after.scanned && !before.scanned,
	}
}

// SeverityOf applies the simulator's severity rule: critical when a
// plaintext password or the password field is newly exposed, warning for
// new databases, info otherwise.
func SeverityOf(d Delta) string {
	switch {
	case d.HasNewPlaintext || slices.Contains(d.NewlyExposedFields, fieldPassword):
		return breach.Critical
	case len(d.NewSourceDBs) > 0:
		return breach.Warning
	default:
		return breach.Info
	}
}

func summaryOf(source string, d Delta) string {
	var parts []string
	switch n := len(d.NewSourceDBs); {
	case d.IsFirstScan:
		parts = append(parts, fmt.Sprintf("first scan found %d breach database(s)", d.NewCount))
	case n > 0:
		parts = append(parts, fmt.Sprintf("%d new breach database(s)", n))
	}
	if len(d.NewlyExposedFields) > 0 {
		parts = append(parts, "newly exposed: "+strings.Join(d.NewlyExposedFields, ", "))
	}
	if d.HasNewPlaintext {
		parts = append(parts, "plaintext password exposed, rotate credentials now")
	}
	if len(parts) == 0 {
		parts = append(parts, "new breach records")
	}
	return source + ": " + strings.Join(parts, "; ")
}

func (s *Simulator) newAlert(email string, before, after *feed, at time.Time) Alert {
	d := deltaBetween(before, after)
	return Alert{
		Event:        breach.EventAlertCreated,
		Severity:     SeverityOf(d),
		Address:      email,
		Source:       after.source,
		Summary:      summaryOf(after.source, d),
		Delta:        d,
		ObservedAt:   at.UTC().Format(ObservedAtLayout),
		DashboardURL: s.dashboardBase + "/addresses/" + url.PathEscape(email),
	}
}
