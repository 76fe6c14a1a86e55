// Package collector turns the registry's per-address state (the API's cached
// answers and the counts of accepted alerts) into the exposition served at
// /metrics. It never calls the breach API: a scrape costs no request budget,
// however many Prometheus servers scrape and however often.
//
// A scrape of 10,000 addresses is close to a million series, so each
// address's lines are rendered once, when its entry changes, and copied into
// every scrape after that (bench/README.md has the figures).
package collector

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/registry"
)

const cached = " Served from the exporter's cache; a scrape never calls the API."

// family is one metric of the collector.
type family struct {
	name   string
	header []byte // HELP and TYPE lines
	// index is the family's place in a block; -1 for families that are not
	// per address.
	index int
}

var families []*family // every family, sorted by name

// perAddress are the families with an address label, in block order.
var perAddress []*family

func newFamily(name, help, typ string, perAddr bool) *family {
	f := &family{name: name, header: familyHeader(name, help, typ), index: -1}
	if perAddr {
		f.index = len(perAddress)
		perAddress = append(perAddress, f)
	}
	families = append(families, f)
	slices.SortFunc(families, func(a, b *family) int { return cmp.Compare(a.name, b.name) })
	return f
}

func gauge(name, help string) *family        { return newFamily(name, help, "gauge", false) }
func addressGauge(name, help string) *family { return newFamily(name, help, "gauge", true) }
func addressCounter(name, help string) *family {
	return newFamily(name, help, "counter", true)
}

var (
	sourceBreaches = addressGauge("breach_source_breaches",
		"breach_count reported by the feed for the address."+cached)
	sourceDatabases = addressGauge("breach_source_databases",
		"Number of distinct breach databases or combolists the feed lists for the address."+cached)
	sourceDatabaseInfo = addressGauge("breach_source_database_info",
		"1 for each breach database or combolist the feed lists for the address."+cached)
	sourceFieldExposed = addressGauge("breach_source_field_exposed",
		"1 when the feed found this category of value exposed alongside the address, else 0."+cached)
	sourcePlaintext = addressGauge("breach_source_plaintext_password",
		"1 when the feed found a plaintext password for the address, else 0."+cached)
	sourceLastScanned = addressGauge("breach_source_last_scanned_timestamp_seconds",
		"When the feed last scanned the address (Unix seconds)."+cached)
	sourceLastChanged = addressGauge("breach_source_last_changed_timestamp_seconds",
		"When the feed last saw the address's state change (Unix seconds); a change is what triggers an alert."+cached)
	addressState = addressGauge("breach_address_state",
		"1 for the address's current state (pending, verified, unverified, not_monitored), 0 for the others."+cached)
	addressLastRefresh = addressGauge("breach_address_last_refresh_timestamp_seconds",
		"Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer."+cached)

	// The webhook's per-address series, with the receiver on.
	alerts = addressCounter("breach_alerts_total",
		"Accepted alert.created webhooks.")
	alertNewDatabases = addressCounter("breach_alert_new_databases_total",
		"Source databases reported as new by accepted alerts (sum of len(delta.new_source_dbs)).")
	alertExposedFields = addressCounter("breach_alert_exposed_fields_total",
		"Newly exposed field categories reported by accepted alerts, one per entry of delta.newly_exposed_fields.")
	alertNewPlaintext = addressCounter("breach_alert_new_plaintext_passwords_total",
		"Accepted alerts whose delta introduced a new plaintext password.")
	alertLastObserved = addressGauge("breach_alert_last_observed_timestamp_seconds",
		"observed_at of the newest accepted alert, as a Unix time.")

	accountInfo = gauge("breach_account_info",
		"The account's plan as last reported by /me; absent until /me has answered once."+cached)
	apiUp = gauge("breach_api_up",
		"1 when the last /me call answered 200; 0 after a failed /me or any 401 (token rejected)."+cached)
	rateLimitLimit = gauge("breach_api_rate_limit_limit",
		"X-RateLimit-Limit of the last API response."+cached)
	rateLimitRemaining = gauge("breach_api_rate_limit_remaining",
		"X-RateLimit-Remaining of the last API response."+cached)
	rateLimitReset = gauge("breach_api_rate_limit_reset_timestamp_seconds",
		"X-RateLimit-Reset of the last API response (Unix seconds)."+cached)
	budget = gauge("breach_api_budget_requests_per_minute",
		"The request budget the exporter allows itself (api.requests_per_minute).")
	refreshCycle = gauge("breach_refresh_cycle_seconds",
		"How long one full round of all addresses takes at the current budget.")
	labelValuesDropped = newFamily("breach_label_values_dropped_total",
		"Values from the API or signed alerts kept out of the exposition by a bound, by label: a source, field, severity or plan past the 16 values outside the spec a label may take, or a database name past 1,000 per address and feed.", "counter", false)
)

// Collector renders the state of every watched address.
type Collector struct {
	registry *registry.Registry
	config   *config.Current
	webhook  bool // the receiver is on: export the alert series

	mu    sync.Mutex        // one render at a time; guards cache
	cache map[string]*block // by address key, from the last render
}

// New returns a collector over reg; cur gives the budget in force. With
// webhook, every address also has its alert series.
func New(reg *registry.Registry, cur *config.Current, webhook bool) *Collector {
	return &Collector{registry: reg, config: cur, webhook: webhook, cache: map[string]*block{}}
}

// rendering is one scrape's worth of the collector: the global series by
// family, and every address's block in label order.
type rendering struct {
	global map[*family][]byte
	blocks []*block
}

// render takes a snapshot of the registry and renders what changed since
// the last render; blocks of unchanged addresses are reused as they are.
func (c *Collector) render() rendering {
	rpm := c.config.Load().Config.API.RequestsPerMinute
	snap := c.registry.Snapshot()

	r := rendering{global: map[*family][]byte{}, blocks: make([]*block, 0, len(snap.Entries))}
	add := func(f *family, v float64, labels ...label) {
		r.global[f] = appendSeries(r.global[f], f.name, v, labels...)
	}
	add(apiUp, boolValue(snap.Account.Up))
	if snap.Account.Plan != "" {
		add(accountInfo, 1, label{"plan", snap.Account.Plan})
	}
	if rl := snap.RateLimit; snap.HasRateLimit {
		if rl.HasLimit {
			add(rateLimitLimit, float64(rl.Limit))
		}
		if rl.HasRemaining {
			add(rateLimitRemaining, float64(rl.Remaining))
		}
		if !rl.Reset.IsZero() {
			add(rateLimitReset, unixSeconds(rl.Reset))
		}
	}
	add(budget, float64(rpm))
	add(refreshCycle, snap.Cycle.Seconds())
	for _, l := range registry.BoundedLabels {
		add(labelValuesDropped, snap.Dropped[l], label{"label", l})
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[string]*block, len(snap.Entries))
	sc := newScratch()
	for i := range snap.Entries {
		e := &snap.Entries[i]
		k := e.Address.Key()
		b := c.cache[k]
		if b == nil || b.version != e.Version {
			b = renderBlock(e, c.webhook, sc)
		}
		next[k] = b
		r.blocks = append(r.blocks, b)
	}
	c.cache = next // removed addresses' blocks go with the old map
	slices.SortFunc(r.blocks, func(a, b *block) int { return cmp.Compare(a.label, b.label) })
	return r
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
