// SPDX-License-Identifier: Apache-2.0

// Package collector turns the watchlist's per-address state (the API's cached
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

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/config"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

const cached = " Served from the exporter's cache; a scrape never calls the API."

// family is one metric of the collector.
type family struct {
	name   string
	header []byte // HELP and TYPE lines
	// labels are the label names of every series of the family, in the
	// order the series are written: address first on a per-address
	// family, then the rest. It is the contract the rendering code keeps
	// (TestServedLabelsAreTheFamilys) and the README's labels column
	// lists.
	labels []string
	// index is the family's place in a block; -1 for families that are not
	// per address.
	index int
	// detail: a per-address family served only when
	// metrics.detail_families names it (config.DetailFamilies).
	detail bool
}

var families []*family // every family, sorted by name

// perAddress are the families with an address label, in block order.
var perAddress []*family

// labels is a family's label names, in the order its series carry them.
func labels(names ...string) []string { return names }

func newFamily(name, help, typ string, names []string, perAddr, detail bool) *family {
	f := &family{name: name, header: familyHeader(name, help, typ), labels: names, index: -1, detail: detail}
	if perAddr {
		f.index = len(perAddress)
		perAddress = append(perAddress, f)
	}
	families = append(families, f)
	slices.SortFunc(families, func(a, b *family) int { return cmp.Compare(a.name, b.name) })
	return f
}

func gauge(name, help string, names []string) *family {
	return newFamily(name, help, "gauge", names, false, false)
}
func addressGauge(name, help string, names []string) *family {
	return newFamily(name, help, "gauge", names, true, false)
}
func addressCounter(name, help string, names []string) *family {
	return newFamily(name, help, "counter", names, true, false)
}
func detailGauge(name, help string, names []string) *family {
	return newFamily(name, help, "gauge", names, true, true)
}
func detailCounter(name, help string, names []string) *family {
	return newFamily(name, help, "counter", names, true, true)
}

const sensitive = " Sensitive are the categories the service keeps encrypted: password, dob, address, phone."

var (
	// The default per address: what the product promises and what the
	// shipped rules read.
	addressState = addressGauge("breach_address_state",
		"The address's current state (pending, verified, unverified, not_monitored) and the account whose key reads it, always 1: one series per address."+cached,
		labels("address", "account", "state"))
	// The owner labels ride on a series of their own, not on
	// breach_address_state: a change of owner moves this one series,
	// never the data series, and a join brings them to every alert
	// (* on (address) group_left (team, owner)). Its labels are address,
	// account and then the address's owner labels (owner_labels) in name
	// order, those it has.
	addressInfo = addressGauge("breach_address_info",
		"The address's account and its owner labels (owner_labels: team, owner by default) from the config or addresses_sd_files, always 1: one series per address, for routing alerts to the owner (metrics.address_info).",
		labels("address", "account"))
	addressLastRefresh = addressGauge("breach_address_last_refresh_timestamp_seconds",
		"Last time the API answered for the address with 200, 403 or 404 (Unix seconds); 0 before the first answer."+cached,
		labels("address"))
	addressNewDatabases = addressCounter("breach_address_new_databases_total",
		"Breach databases or combolists a feed listed for the address that its previous answer did not, counted since the exporter started; a first scan is not counted.",
		labels("address"))
	addressNewSensitive = addressCounter("breach_address_newly_exposed_sensitive_fields_total",
		"Sensitive field categories a feed found exposed for the address that its previous answer did not, counted since the exporter started; a first scan is not counted."+sensitive,
		labels("address"))
	sourceBreaches = addressGauge("breach_source_breaches",
		"breach_count reported by the feed for the address."+cached,
		labels("address", "source"))
	sourcePlaintext = addressGauge("breach_source_plaintext_password",
		"1 when the feed found a plaintext password for the address, else 0."+cached,
		labels("address", "source"))
	sourceLastChanged = addressGauge("breach_source_last_changed_timestamp_seconds",
		"When the feed last saw the address's state change (Unix seconds); a change is what triggers an alert."+cached,
		labels("address", "source"))
	// Where an entry of acknowledgements_file is in force for a feed the
	// API lists for the address or a critical webhook named: the rules
	// read whether it covers the feed (the exporter decides, on its own
	// clock: acknowledged), the dashboards show who and why. One series
	// carries both, so an acknowledged feed costs one.
	sourceAcknowledged = addressGauge("breach_source_acknowledged_timestamp_seconds",
		"While the acknowledgement in force for the address and feed covers everything the exporter has seen of the feed: the moment it took effect, min(handled_at, when the exporter first loaded it) (Unix seconds); 0 once the exporter has seen a change or a critical webhook after that moment. by and comment are the acknowledgement's; absent where none is in force.",
		labels("address", "source", "by", "comment"))
	// The webhook's per-address counter, with the receiver on.
	alerts = addressCounter("breach_alerts_total",
		"Accepted alert.created webhooks.",
		labels("address", "severity", "source"))

	// Detail per address (metrics.detail_families).
	sourceDatabases = detailGauge("breach_source_databases",
		"Number of distinct breach databases or combolists the feed lists for the address."+cached,
		labels("address", "source"))
	sourceDatabaseInfo = detailGauge("breach_source_database_info",
		"1 for each breach database or combolist the feed lists for the address."+cached,
		labels("address", "database", "source"))
	sourceFieldExposed = detailGauge("breach_source_field_exposed",
		"1 for each category of value the feed found exposed alongside the address; categories not exposed have no series."+cached,
		labels("address", "field", "source"))
	sourceLastScanned = detailGauge("breach_source_last_scanned_timestamp_seconds",
		"When the feed last scanned the address (Unix seconds)."+cached,
		labels("address", "source"))
	alertNewDatabases = detailCounter("breach_alert_new_databases_total",
		"Source databases reported as new by accepted alerts (sum of len(delta.new_source_dbs)).",
		labels("address", "source"))
	alertExposedFields = detailCounter("breach_alert_exposed_fields_total",
		"Newly exposed field categories reported by accepted alerts, one per entry of delta.newly_exposed_fields.",
		labels("address", "field", "source"))
	alertNewPlaintext = detailCounter("breach_alert_new_plaintext_passwords_total",
		"Accepted alerts whose delta introduced a new plaintext password.",
		labels("address", "source"))
	alertLastObserved = detailGauge("breach_alert_last_observed_timestamp_seconds",
		"observed_at of the newest accepted alert, as a Unix time.",
		labels("address", "source"))

	// The fleet: no address label, bounded by the spec's enums (and the
	// watchlist's bound on values outside them).
	fleetStates = gauge("breach_addresses",
		"Watched addresses by state."+cached,
		labels("state"))
	fleetBreached = gauge("breach_addresses_breached",
		"Verified addresses the feed reports a breach_count above 0 for."+cached,
		labels("source"))
	fleetPlaintext = gauge("breach_addresses_plaintext_password",
		"Verified addresses the feed found a plaintext password for."+cached,
		labels("source"))
	fleetPlaintextOpen = gauge("breach_addresses_plaintext_password_open",
		"Verified addresses whose plaintext password exposure in the feed is open: reported, and not covered by an acknowledgement (breach_source_acknowledged_timestamp_seconds absent or 0).",
		labels("source"))
	fleetPlaintextHandled = gauge("breach_addresses_plaintext_password_handled",
		"Verified addresses whose plaintext password exposure in the feed is handled: an acknowledgement covers it (breach_source_acknowledged_timestamp_seconds above 0).",
		labels("source"))
	fleetFieldExposed = gauge("breach_addresses_field_exposed",
		"Verified addresses the feed found this category of value exposed for."+cached,
		labels("field", "source"))

	// Per account (its API key).
	accountInfo = gauge("breach_account_info",
		"The account's plan as last reported by /me; absent until /me has answered once."+cached,
		labels("account", "plan"))
	apiUp = gauge("breach_api_up",
		"1 when the account's last /me call answered 200; 0 after a failed /me or any 401 (token rejected)."+cached,
		labels("account"))
	rateLimitLimit = gauge("breach_api_rate_limit_limit",
		"X-RateLimit-Limit of the account's last API response."+cached,
		labels("account"))
	rateLimitRemaining = gauge("breach_api_rate_limit_remaining",
		"X-RateLimit-Remaining of the account's last API response."+cached,
		labels("account"))
	rateLimitReset = gauge("breach_api_rate_limit_reset_timestamp_seconds",
		"X-RateLimit-Reset of the account's last API response (Unix seconds)."+cached,
		labels("account"))
	budget = gauge("breach_api_budget_requests_per_minute",
		"The request budget the exporter allows itself with the account's key (api.requests_per_minute).",
		labels("account"))
	refreshCycle = gauge("breach_refresh_cycle_seconds",
		"How long one full round of the account's addresses takes at its budget.",
		labels("account"))
	labelValuesDropped = newFamily("breach_label_values_dropped_total",
		"Values from the API or signed alerts kept out of the exposition by a bound, by label: a source, field, severity or plan past the 16 values outside the spec a label may take, a database name past 1,000 per address and feed, or a value that looks like an email address (exported as the value redacted).", "counter",
		labels("label"), false, false)
)

// Renderer renders the state of every watched address into exposition
// lines. It is not a prometheus.Collector: nothing registers it, the
// Handler writes what it renders beside the registry's families.
type Renderer struct {
	watchlist *watchlist.List
	config    *config.Current
	webhook   bool // the receiver is on: export the alert series

	mu    sync.Mutex        // one render at a time; guards cache, on and acks
	cache map[string]*block // by address key, from the last render
	on    []bool            // per family index: served; the cache's blocks hold these
	acks  *acknowledge.Set  // the acknowledgements the cache's blocks hold
}

// NewRenderer returns a renderer over reg; cur gives the budget in force.
// With webhook, every address also has its alert series.
func NewRenderer(reg *watchlist.List, cur *config.Current, webhook bool) *Renderer {
	return &Renderer{watchlist: reg, config: cur, webhook: webhook, cache: map[string]*block{}}
}

// rendering is one scrape's worth of the renderer: the global series by
// family, and every address's block in label order.
type rendering struct {
	global map[*family][]byte
	blocks []*block
}

// add adds a series of the global family f.
func (r *rendering) add(f *family, v float64, labels ...label) {
	r.global[f] = appendSeries(r.global[f], f.name, v, labels...)
}

// render takes a view of the watchlist and renders what changed since
// the last render; blocks of unchanged addresses are reused as they are.
func (c *Renderer) render() rendering {
	bundle := c.config.Load()
	cfg, acks := bundle.Config, bundle.Acknowledgements
	view := c.watchlist.View()

	r := rendering{global: map[*family][]byte{}, blocks: make([]*block, 0, len(view.Entries))}
	add := r.add
	r.addAccounts(view.Accounts, cfg.AccountsInForce())
	for _, l := range watchlist.BoundedLabels {
		add(labelValuesDropped, view.Dropped[l], label{"label", l})
	}
	r.addFleet(view.Entries, acks)

	on := servedFamilies(&cfg.Metrics)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !slices.Equal(on, c.on) || acks != c.acks {
		// A reload switched detail on or off, or loaded the
		// acknowledgements again: every block renders anew.
		c.cache, c.on, c.acks = map[string]*block{}, on, acks
	}
	next := make(map[string]*block, len(view.Entries))
	sc := newScratch()
	for i := range view.Entries {
		e := &view.Entries[i]
		k := e.Address.Key()
		b := c.cache[k]
		if b == nil || b.version != e.Version {
			b = renderBlock(e, acks, c.webhook, on, sc)
		}
		next[k] = b
		r.blocks = append(r.blocks, b)
	}
	c.cache = next // removed addresses' blocks go with the old map
	slices.SortFunc(r.blocks, func(a, b *block) int { return cmp.Compare(a.label, b.label) })
	return r
}

// addAccounts adds the series of each account's key, every one with the
// account label (default for the single-account shape too, so that a second
// account does not change the series the first already has), in account
// order: accounts come sorted by name.
func (r *rendering) addAccounts(accounts []watchlist.AccountView, configured []config.Account) {
	for _, a := range accounts {
		acct := label{"account", a.Name}
		if a.Account.Known {
			r.add(apiUp, boolValue(a.Account.Up), acct)
		}
		if a.Account.Plan != "" {
			r.add(accountInfo, 1, acct, label{"plan", a.Account.Plan})
		}
		if rl := a.RateLimit; a.HasRateLimit {
			if rl.HasLimit {
				r.add(rateLimitLimit, float64(rl.Limit), acct)
			}
			if rl.HasRemaining {
				r.add(rateLimitRemaining, float64(rl.Remaining), acct)
			}
			if !rl.Reset.IsZero() {
				r.add(rateLimitReset, unixSeconds(rl.Reset), acct)
			}
		}
		// The watchlist follows the config a moment after a reload:
		// an account it still has that the config no longer names has no
		// budget.
		for _, c := range configured {
			if c.Name == a.Name {
				r.add(budget, float64(c.API.RequestsPerMinute), acct)
			}
		}
		r.add(refreshCycle, a.Cycle.Seconds(), acct)
	}
}

// servedFamilies says, per family index, whether m serves the family.
func servedFamilies(m *config.MetricsConfig) []bool {
	on := make([]bool, len(perAddress))
	for i, f := range perAddress {
		on[i] = !f.detail || m.Detail(f.name)
	}
	on[addressInfo.index] = m.Info()
	return on
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
