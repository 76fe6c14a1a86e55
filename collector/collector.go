// Package collector turns the registry's per-address state (the API's cached
// answers and the counts of accepted alerts) into Prometheus metrics at
// scrape time. It never calls the breach API: a scrape costs no request
// budget, however many Prometheus servers scrape and however often.
package collector

import (
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/registry"
)

const cached = " Served from the exporter's cache; a scrape never calls the API."

// family is one metric of the collector. Its label names are in the
// exposition's order (alphabetical), which emit follows.
type family struct {
	name, help string
	typ        dto.MetricType
}

func newFamily(name, help string) *family {
	return &family{name: name, help: help, typ: dto.MetricType_GAUGE}
}

func newCounter(name, help string) *family {
	return &family{name: name, help: help, typ: dto.MetricType_COUNTER}
}

var (
	sourceBreaches = newFamily("breach_source_breaches",
		"breach_count reported by the feed for the address."+cached)
	sourceDatabases = newFamily("breach_source_databases",
		"Number of distinct breach databases or combolists the feed lists for the address."+cached)
	sourceDatabaseInfo = newFamily("breach_source_database_info",
		"1 for each breach database or combolist the feed lists for the address."+cached)
	sourceFieldExposed = newFamily("breach_source_field_exposed",
		"1 when the feed found this category of value exposed alongside the address, else 0."+cached)
	sourcePlaintext = newFamily("breach_source_plaintext_password",
		"1 when the feed found a plaintext password for the address, else 0."+cached)
	sourceLastScanned = newFamily("breach_source_last_scanned_timestamp_seconds",
		"When the feed last scanned the address (Unix seconds)."+cached)
	sourceLastChanged = newFamily("breach_source_last_changed_timestamp_seconds",
		"When the feed last saw the address's state change (Unix seconds); a change is what triggers an alert."+cached)
	addressState = newFamily("breach_address_state",
		"1 for the address's current state (pending, verified, unverified, not_monitored), 0 for the others."+cached)
	addressLastRefresh = newFamily("breach_address_last_refresh_timestamp_seconds",
		"Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer."+cached)
	accountInfo = newFamily("breach_account_info",
		"The account's plan as last reported by /me; absent until /me has answered once."+cached)
	apiUp = newFamily("breach_api_up",
		"1 when the last /me call answered 200; 0 after a failed /me or any 401 (token rejected)."+cached)
	rateLimitLimit = newFamily("breach_api_rate_limit_limit",
		"X-RateLimit-Limit of the last API response."+cached)
	rateLimitRemaining = newFamily("breach_api_rate_limit_remaining",
		"X-RateLimit-Remaining of the last API response."+cached)
	rateLimitReset = newFamily("breach_api_rate_limit_reset_timestamp_seconds",
		"X-RateLimit-Reset of the last API response (Unix seconds)."+cached)
	budget = newFamily("breach_api_budget_requests_per_minute",
		"The request budget the exporter allows itself (api.requests_per_minute).")
	refreshCycle = newFamily("breach_refresh_cycle_seconds",
		"How long one full round of all addresses takes at the current budget.")

	// The webhook's per-address series, with the receiver on.
	alerts = newCounter("breach_alerts_total",
		"Accepted alert.created webhooks.")
	alertNewDatabases = newCounter("breach_alert_new_databases_total",
		"Source databases reported as new by accepted alerts (sum of len(delta.new_source_dbs)).")
	alertExposedFields = newCounter("breach_alert_exposed_fields_total",
		"Newly exposed field categories reported by accepted alerts, one per entry of delta.newly_exposed_fields.")
	alertNewPlaintext = newCounter("breach_alert_new_plaintext_passwords_total",
		"Accepted alerts whose delta introduced a new plaintext password.")
	alertLastObserved = newFamily("breach_alert_last_observed_timestamp_seconds",
		"observed_at of the newest accepted alert, as a Unix time.")
)

// Collector exports the state of every watched address.
type Collector struct {
	registry *registry.Registry
	config   *config.Current
	webhook  bool // the receiver is on: export the alert series
}

// New returns a collector over reg; cur gives the budget in force. With
// webhook, every address also has its alert series.
func New(reg *registry.Registry, cur *config.Current, webhook bool) *Collector {
	return &Collector{registry: reg, config: cur, webhook: webhook}
}

// emit sends every series of one snapshot to s, each family's series in the
// order of the exposition.
func (c *Collector) emit(s *familySink) {
	rpm := c.config.Load().Config.API.RequestsPerMinute
	snap := c.registry.Snapshot()
	p := pairs{}

	s.begin(16, 0)
	s.add(apiUp, boolValue(snap.Account.Up), nil)
	if snap.Account.Plan != "" {
		s.add(accountInfo, 1, []*dto.LabelPair{p.get("plan", snap.Account.Plan)})
	}
	if rl := snap.RateLimit; snap.HasRateLimit {
		if rl.HasLimit {
			s.add(rateLimitLimit, float64(rl.Limit), nil)
		}
		if rl.HasRemaining {
			s.add(rateLimitRemaining, float64(rl.Remaining), nil)
		}
		if !rl.Reset.IsZero() {
			s.add(rateLimitReset, unixSeconds(rl.Reset), nil)
		}
	}
	s.add(budget, float64(rpm), nil)
	s.add(refreshCycle, snap.Cycle.Seconds(), nil)

	emitAddresses(s, p, snap.Entries, c.webhook)
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(t time.Time) float64 {
	return float64(t.UnixMilli()) / 1000
}
