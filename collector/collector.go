// Package collector turns the poller's cached state into Prometheus metrics at
// scrape time. It never calls the breach API: a scrape costs no request budget,
// however many Prometheus servers scrape and however often.
package collector

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/state"
)

const cached = " Served from the exporter's cache; a scrape never calls the API."

var (
	addressSource = []string{"address", "source"}

	sourceBreaches = prometheus.NewDesc("breach_source_breaches",
		"breach_count reported by the feed for the address."+cached, addressSource, nil)
	sourceDatabases = prometheus.NewDesc("breach_source_databases",
		"Number of distinct breach databases or combolists the feed lists for the address."+cached, addressSource, nil)
	sourceDatabaseInfo = prometheus.NewDesc("breach_source_database_info",
		"1 for each breach database or combolist the feed lists for the address."+cached,
		[]string{"address", "source", "database"}, nil)
	sourceFieldExposed = prometheus.NewDesc("breach_source_field_exposed",
		"1 when the feed found this category of value exposed alongside the address, else 0."+cached,
		[]string{"address", "source", "field"}, nil)
	sourcePlaintext = prometheus.NewDesc("breach_source_plaintext_password",
		"1 when the feed found a plaintext password for the address, else 0."+cached, addressSource, nil)
	sourceLastScanned = prometheus.NewDesc("breach_source_last_scanned_timestamp_seconds",
		"When the feed last scanned the address (Unix seconds)."+cached, addressSource, nil)
	sourceLastChanged = prometheus.NewDesc("breach_source_last_changed_timestamp_seconds",
		"When the feed last saw the address's state change (Unix seconds); a change is what triggers an alert."+cached, addressSource, nil)
	addressState = prometheus.NewDesc("breach_address_state",
		"1 for the address's current state (pending, verified, unverified, not_monitored), 0 for the others."+cached,
		[]string{"address", "state"}, nil)
	addressLastRefresh = prometheus.NewDesc("breach_address_last_refresh_timestamp_seconds",
		"Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer."+cached,
		[]string{"address"}, nil)
	accountInfo = prometheus.NewDesc("breach_account_info",
		"The account's plan as last reported by /me; absent until /me has answered once."+cached, []string{"plan"}, nil)
	apiUp = prometheus.NewDesc("breach_api_up",
		"1 when the last /me call answered 200; 0 after a failed /me or any 401 (token rejected)."+cached, nil, nil)
	rateLimitLimit = prometheus.NewDesc("breach_api_rate_limit_limit",
		"X-RateLimit-Limit of the last API response."+cached, nil, nil)
	rateLimitRemaining = prometheus.NewDesc("breach_api_rate_limit_remaining",
		"X-RateLimit-Remaining of the last API response."+cached, nil, nil)
	rateLimitReset = prometheus.NewDesc("breach_api_rate_limit_reset_timestamp_seconds",
		"X-RateLimit-Reset of the last API response (Unix seconds)."+cached, nil, nil)
	budget = prometheus.NewDesc("breach_api_budget_requests_per_minute",
		"The request budget the exporter allows itself (api.requests_per_minute).", nil, nil)
	refreshCycle = prometheus.NewDesc("breach_refresh_cycle_seconds",
		"How long one full round of all addresses takes at the current budget.", nil, nil)
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
	for _, d := range []*prometheus.Desc{
		sourceBreaches, sourceDatabases, sourceDatabaseInfo, sourceFieldExposed, sourcePlaintext,
		sourceLastScanned, sourceLastChanged, addressState, addressLastRefresh, accountInfo, apiUp,
		rateLimitLimit, rateLimitRemaining, rateLimitReset, budget, refreshCycle,
	} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.RLock()
	label, rpm := c.label, c.budget
	c.mu.RUnlock()
	snap := c.store.Snapshot()

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	gauge(apiUp, boolValue(snap.Account.Up))
	if snap.Account.Plan != "" {
		gauge(accountInfo, 1, snap.Account.Plan)
	}
	if rl := snap.RateLimit; snap.HasRateLimit {
		if rl.HasLimit {
			gauge(rateLimitLimit, float64(rl.Limit))
		}
		if rl.HasRemaining {
			gauge(rateLimitRemaining, float64(rl.Remaining))
		}
		if !rl.Reset.IsZero() {
			gauge(rateLimitReset, unixSeconds(rl.Reset))
		}
	}
	gauge(budget, float64(rpm))
	gauge(refreshCycle, snap.Cycle.Seconds())

	collectAddresses(ch, snap.Addresses, label)
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
