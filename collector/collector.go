// Package collector turns the poller's cached state into Prometheus metrics at
// scrape time. It never calls the breach API: a scrape costs no request budget,
// however many Prometheus servers scrape and however often.
package collector

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/breach-exporter/breach_exporter/internal/state"
)

const cached = " Served from the exporter's cache; a scrape never calls the API."

// family is one metric of the collector: its Desc for the registry, and its
// name and help for Gather, which builds the exposition without one.
type family struct {
	desc       *prometheus.Desc
	name, help string
}

func newFamily(name, help string, labels ...string) *family {
	return &family{desc: prometheus.NewDesc(name, help, labels, nil), name: name, help: help}
}

var (
	sourceBreaches = newFamily("breach_source_breaches",
		"breach_count reported by the feed for the address."+cached, "address", "source")
	sourceDatabases = newFamily("breach_source_databases",
		"Number of distinct breach databases or combolists the feed lists for the address."+cached, "address", "source")
	sourceDatabaseInfo = newFamily("breach_source_database_info",
		"1 for each breach database or combolist the feed lists for the address."+cached, "address", "source", "database")
	sourceFieldExposed = newFamily("breach_source_field_exposed",
		"1 when the feed found this category of value exposed alongside the address, else 0."+cached, "address", "source", "field")
	sourcePlaintext = newFamily("breach_source_plaintext_password",
		"1 when the feed found a plaintext password for the address, else 0."+cached, "address", "source")
	sourceLastScanned = newFamily("breach_source_last_scanned_timestamp_seconds",
		"When the feed last scanned the address (Unix seconds)."+cached, "address", "source")
	sourceLastChanged = newFamily("breach_source_last_changed_timestamp_seconds",
		"When the feed last saw the address's state change (Unix seconds); a change is what triggers an alert."+cached, "address", "source")
	addressState = newFamily("breach_address_state",
		"1 for the address's current state (pending, verified, unverified, not_monitored), 0 for the others."+cached, "address", "state")
	addressLastRefresh = newFamily("breach_address_last_refresh_timestamp_seconds",
		"Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer."+cached, "address")
	accountInfo = newFamily("breach_account_info",
		"The account's plan as last reported by /me; absent until /me has answered once."+cached, "plan")
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

	families = []*family{
		sourceBreaches, sourceDatabases, sourceDatabaseInfo, sourceFieldExposed, sourcePlaintext,
		sourceLastScanned, sourceLastChanged, addressState, addressLastRefresh, accountInfo, apiUp,
		rateLimitLimit, rateLimitRemaining, rateLimitReset, budget, refreshCycle,
	}
)

// Collector exports the cached state of every tracked address.
type Collector struct {
	store *state.Store

	mu     sync.RWMutex
	label  func(email string) string
	budget int
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a collector over store. label maps an email to the value of the
// address label (email, alias or hash, per labels.address); budget is the
// configured requests per minute.
func New(store *state.Store, label func(email string) string, budget int) *Collector {
	return &Collector{store: store, label: label, budget: budget}
}

// Update swaps the label mode and budget after a config reload.
func (c *Collector) Update(label func(email string) string, budget int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.label, c.budget = label, budget
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range families {
		ch <- f.desc
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.emit(&metricSink{ch: ch})
}

// emit sends every series of one snapshot to s, each family's series in the
// order the registry sorts them into.
func (c *Collector) emit(s sink) {
	c.mu.RLock()
	label, rpm := c.label, c.budget
	c.mu.RUnlock()
	snap := c.store.Snapshot()
	p := pairs{}

	s.begin(16)
	s.gauge(apiUp, boolValue(snap.Account.Up), nil)
	if snap.Account.Plan != "" {
		s.gauge(accountInfo, 1, []*dto.LabelPair{p.get("plan", snap.Account.Plan)})
	}
	if rl := snap.RateLimit; snap.HasRateLimit {
		if rl.HasLimit {
			s.gauge(rateLimitLimit, float64(rl.Limit), nil)
		}
		if rl.HasRemaining {
			s.gauge(rateLimitRemaining, float64(rl.Remaining), nil)
		}
		if !rl.Reset.IsZero() {
			s.gauge(rateLimitReset, unixSeconds(rl.Reset), nil)
		}
	}
	s.gauge(budget, float64(rpm), nil)
	s.gauge(refreshCycle, snap.Cycle.Seconds(), nil)

	emitAddresses(s, p, snap.Addresses, label)
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
