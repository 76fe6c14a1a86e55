// SPDX-License-Identifier: Apache-2.0

// Package breach holds the breach monitoring service's domain: the spec's
// enums with their known values, a feed's scan state, the rate-limit figures
// every response carries, and watched addresses with their one key and their
// label. It imports nothing of the exporter's, so the API client, the
// watchlist, the collector and the webhook receiver all share these types
// without importing each other.
package breach

import (
	"crypto/sha256"
	"net/mail"
	"slices"
	"strings"
	"time"
)

// Enum values are plain strings on purpose: the service may add a feed,
// field, plan or severity, and the exporter keeps (a bounded number of)
// values it does not know rather than rejecting the whole answer.

// KnownSources are the spec's feeds (Source).
var KnownSources = []string{"archive", "combolist", "index", "enriched"}

// KnownFields are the spec's exposed-value categories (Field).
var KnownFields = []string{"password", "hash", "username", "name", "dob", "address", "phone", "ip"}

// SensitiveFields are the categories whose values the service keeps
// encrypted and shows only in its audited dashboard (spec section 1:
// passwords, dates of birth, addresses, phone numbers): their exposure is
// what BreachSensitiveFieldExposed pages for.
var SensitiveFields = []string{"password", "dob", "address", "phone"}

// KnownPlans are the spec's subscription tiers (Plan).
var KnownPlans = []string{"free", "personal", "pro", "business"}

// The spec's alert severities; Critical means "rotate credentials now".
const (
	Critical = "critical"
	Warning  = "warning"
	Info     = "info"
)

// KnownSeverities are the spec's alert severities.
var KnownSeverities = []string{Critical, Warning, Info}

// EventAlertCreated is the only webhook event the spec defines today.
const EventAlertCreated = "alert.created"

// PlanWithoutWebhooks reports whether plan is one the service delivers no
// webhooks to (spec section 6: Pro and Business only). An unknown plan is
// not assumed to lack them.
func PlanWithoutWebhooks(plan string) bool { return plan == "free" || plan == "personal" }

// Address states, the values of breach_address_state's state label.
const (
	Pending      = "pending"       // watched, not answered yet
	Verified     = "verified"      // 200 from /breaches
	Unverified   = "unverified"    // 403 from /breaches
	NotMonitored = "not_monitored" // 404 from /breaches
)

// States lists every address state.
var States = []string{Pending, Verified, Unverified, NotMonitored}

// SourceState is the latest sweep result of one feed for an address
// (spec: BreachSourceState).
type SourceState struct {
	Source               string
	BreachCount          int64
	SourceDBs            []string
	FieldsExposed        []string
	HasPlaintextPassword bool
	LastScannedAt        time.Time
	LastChangedAt        time.Time
}

// RateLimit is what the rate-limit headers of one response said. A zero
// field means the header was absent or unparseable.
type RateLimit struct {
	Limit        int       // X-RateLimit-Limit
	HasLimit     bool      // the Limit header was present
	Remaining    int       // X-RateLimit-Remaining
	HasRemaining bool      // the Remaining header was present
	Reset        time.Time // X-RateLimit-Reset (Unix seconds); zero when absent
}

// Key is the identity of an address: the service treats addresses
// case-insensitively, so Alice@ and alice@ are one address.
func Key(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

// DefaultAccount is the name of the one account a config without an
// accounts list has (top-level api, addresses and webhook.secret_files),
// and the account of an address that names none (a state snapshot from
// before accounts).
const DefaultAccount = "default"

// Address is one watched address.
type Address struct {
	Email      string // as configured or as the alert spelt it; sent to the API
	Alias      string // labels.address: alias; empty for a discovered address
	Discovered bool   // came from a webhook alert, not the config
	// Account is the account whose key reads the address: the config's
	// entry that lists it, or the one whose webhook secret verified the
	// alert that discovered it. Empty means DefaultAccount.
	Account string
	// Labels are the owner labels (team, owner, ...) of the source that
	// lists the address, in name order; none for a discovered address.
	Labels []Label
}

// AccountName is the address's account, DefaultAccount when it names none.
func (a Address) AccountName() string {
	if a.Account == "" {
		return DefaultAccount
	}
	return a.Account
}

// Key is the address's identity (see Key).
func (a Address) Key() string { return Key(a.Email) }

// Known reports whether v is one of the known values.
func Known(known []string, v string) bool { return slices.Contains(known, v) }

// ValidEmail reports whether s is a bare addr-spec (no display name, no
// angle brackets, nothing mail.ParseAddress would rewrite) of at most
// MaxAddressBytes bytes: the one check for configured and discovered
// addresses alike.
func ValidEmail(s string) bool {
	if len(s) > MaxAddressBytes {
		return false
	}
	parsed, err := mail.ParseAddress(s)
	return err == nil && parsed.Address == s
}

// RememberedWebhook is a signed webhook body the receiver accepted, by the
// SHA-256 of its bytes, and when: what its duplicate check remembers and the
// state snapshot keeps across a restart.
type RememberedWebhook struct {
	Digest [sha256.Size]byte
	At     time.Time
}

// WebhookCounts are the webhook receiver's counters that move only with accepted alerts:
// they are kept across a restart with the alerts themselves, so that a
// restart neither loses them nor, replayed from the journal, counts twice.
type WebhookCounts struct {
	Accepted                float64
	UntrackedDiscoveryOff   float64
	UntrackedDiscoveryLimit float64
	UntrackedOtherAccount   float64
}
