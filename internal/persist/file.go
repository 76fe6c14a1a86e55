// SPDX-License-Identifier: Apache-2.0

// Package persist keeps the exporter's state across a restart, as
// Alertmanager keeps its silences: a snapshot file written atomically (a
// temporary file in the same folder, synced, renamed over the old one, the
// folder synced), at most every interval and only when something changed,
// and once at shutdown; read at start before the listeners open.
//
// The file is a line with the SHA-256 of the rest, then versioned JSON. A
// file that is truncated, damaged, of an unknown version or that breaks the
// spec's shapes is refused whole: the caller moves it aside and starts
// empty, never crash-loops.
package persist

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// FileName is the snapshot's name inside --storage.path.
const FileName = "breach_exporter.snapshot"

// version is the newest format, written when the state holds what only
// it has: version 5 adds signed_only, and a state without it is written
// as version 4, which the release before reads (a rollback keeps the
// snapshot while the deployment is not signed only). Decode also reads
// version 4, version 3, which had
// one account (its plan at the top level, every address the account
// breach.DefaultAccount's), version 2, which had no moments of the
// acknowledgements (feeds, acknowledged) either, and version 1, which had
// no alert counts, receiver counts nor journal position either.
const version = 5

// versionSigned is the first version with signed_only.
const versionSigned = 5

// State is what a snapshot holds.
type State struct {
	Watchlist watchlist.Saved
	// Seen is the webhook's duplicate memory: digests of accepted bodies.
	Seen []breach.RememberedWebhook
	// Webhook is the receiver's counters of accepted alerts.
	Webhook breach.WebhookCounts
	// Journal is the sequence number of the last journal record the state
	// holds: a replay skips it and those before.
	Journal uint64
	// Stream is, with replicas, the ID of the last event of the shared
	// stream the state holds; empty alone.
	Stream string
	// SignedOnly is, with replicas, whether the deployment is signed only
	// (sharedstore.Client.SignedOnly): kept so that a store that loses
	// its keys, or a replica that starts from the checkpoint, does not
	// read unsigned entries again.
	SignedOnly bool
}

// The wire form. Field names are the file's, stable across versions of
// the code; a change of meaning needs a new version.
type (
	fileV1 struct {
		Version   int         `json:"version"`
		WrittenAt time.Time   `json:"written_at"`
		Plan      string      `json:"plan,omitempty"` // before version 4: the one account's plan
		Accounts  []accountV4 `json:"accounts,omitempty"`
		Addresses []addressV1 `json:"addresses"`
		Seen      []seenV1    `json:"seen"`
		Webhook   webhookV2   `json:"webhook"`
		Journal   uint64      `json:"journal,omitempty"`
		Stream    string      `json:"stream,omitempty"`
		// Version 5 on.
		SignedOnly bool `json:"signed_only,omitempty"`
	}
	// An account's last /me answer's plan.
	accountV4 struct {
		Name string `json:"name"`
		Plan string `json:"plan,omitempty"`
	}
	webhookV2 struct {
		Accepted                float64 `json:"accepted,omitempty"`
		UntrackedDiscoveryOff   float64 `json:"untracked_discovery_off,omitempty"`
		UntrackedDiscoveryLimit float64 `json:"untracked_discovery_limit,omitempty"`
		UntrackedOtherAccount   float64 `json:"untracked_other_account,omitempty"`
	}
	alertV2 struct {
		Family string  `json:"family"`
		Source string  `json:"source"`
		Label  string  `json:"label,omitempty"`
		Value  float64 `json:"value"`
	}
	addressV1 struct {
		Email        string     `json:"email"`
		Account      string     `json:"account,omitempty"` // version 4 on
		Discovered   bool       `json:"discovered,omitempty"`
		State        string     `json:"state"`
		Sources      []sourceV1 `json:"sources,omitempty"`
		LastRefresh  time.Time  `json:"last_refresh"`
		LastAttempt  time.Time  `json:"last_attempt"`
		Failures     int        `json:"failures,omitempty"`
		Alerts       []alertV2  `json:"alerts,omitempty"`
		Feeds        []feedV3   `json:"feeds,omitempty"`
		Acknowledged []ackV3    `json:"acknowledged,omitempty"`
	}
	// The moments the acknowledgements are decided on: watchlist.FeedMoments.
	feedV3 struct {
		Source        string    `json:"source"`
		LastChangedAt time.Time `json:"last_changed_at"`
		ChangeSeen    time.Time `json:"change_seen"`
		Critical      time.Time `json:"critical,omitzero"`
	}
	// When the exporter first loaded an acknowledgement (acknowledge.Key).
	ackV3 struct {
		Source    string    `json:"source,omitempty"`
		HandledAt time.Time `json:"handled_at"`
		LoadedAt  time.Time `json:"loaded_at"`
	}
	sourceV1 struct {
		Source               string    `json:"source"`
		BreachCount          int64     `json:"breach_count"`
		SourceDBs            []string  `json:"source_dbs"`
		FieldsExposed        []string  `json:"fields_exposed"`
		HasPlaintextPassword bool      `json:"has_plaintext_password"`
		LastScannedAt        time.Time `json:"last_scanned_at"`
		LastChangedAt        time.Time `json:"last_changed_at"`
	}
	seenV1 struct {
		Digest string    `json:"digest"`
		At     time.Time `json:"at"`
	}
)

// alertFamilies name the alert families in the file.
var alertFamilies = map[watchlist.AlertFamily]string{
	watchlist.AlertsBySeverity: "alerts",
	watchlist.NewDatabases:     "new_databases",
	watchlist.ExposedFields:    "exposed_fields",
	watchlist.NewPlaintext:     "new_plaintext",
	watchlist.LastObserved:     "last_observed",
}

// Encode renders st as a snapshot file's bytes.
func Encode(st State, now time.Time) ([]byte, error) {
	v := versionSigned - 1
	if st.SignedOnly {
		v = versionSigned
	}
	f := fileV1{Version: v, WrittenAt: now.UTC(), SignedOnly: st.SignedOnly,
		Addresses: make([]addressV1, len(st.Watchlist.Entries)), Seen: make([]seenV1, len(st.Seen)),
		Webhook: webhookV2(st.Webhook), Journal: st.Journal, Stream: st.Stream}
	for _, a := range st.Watchlist.Accounts {
		f.Accounts = append(f.Accounts, accountV4(a))
	}
	for i, e := range st.Watchlist.Entries {
		a := addressV1{Email: e.Address.Email, Account: e.Address.Account, Discovered: e.Address.Discovered, State: e.State,
			LastRefresh: e.LastRefresh, LastAttempt: e.LastAttempt, Failures: e.Failures}
		for _, s := range e.Sources {
			a.Sources = append(a.Sources, sourceV1(s))
		}
		for _, c := range e.Alerts {
			a.Alerts = append(a.Alerts, alertV2{Family: alertFamilies[c.Family], Source: c.Source, Label: c.Label, Value: c.Value})
		}
		for _, source := range slices.Sorted(maps.Keys(e.Feeds)) {
			m := e.Feeds[source]
			a.Feeds = append(a.Feeds, feedV3{Source: source, LastChangedAt: m.LastChangedAt, ChangeSeen: m.ChangeSeen, Critical: m.Critical})
		}
		for k, at := range e.Acknowledged {
			a.Acknowledged = append(a.Acknowledged, ackV3{Source: k.Source, HandledAt: k.HandledAt, LoadedAt: at})
		}
		slices.SortFunc(a.Acknowledged, func(x, y ackV3) int {
			return cmp.Or(cmp.Compare(x.Source, y.Source), x.HandledAt.Compare(y.HandledAt))
		})
		f.Addresses[i] = a
	}
	for i, s := range st.Seen {
		f.Seen[i] = seenV1{Digest: hex.EncodeToString(s.Digest[:]), At: s.At}
	}
	return framed(f)
}

// Framed is v in the shape of a state folder's file (framed): for other
// data kept beside a state snapshot's form, such as parts of a checkpoint.
func Framed(v any) ([]byte, error) { return framed(v) }

// Unframed checks the checksum line of data in Framed's shape and returns
// the JSON after it.
func Unframed(data []byte) ([]byte, error) { return checksummed(data) }

// framed is v as JSON after the line with its SHA-256: the shape of every
// file of the state folder but the journal.
func framed(v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	out := make([]byte, 0, 2*sha256.Size+1+len(body))
	out = hex.AppendEncode(out, sum[:])
	out = append(out, '\n')
	return append(out, body...), nil
}

// unframed checks the checksum line of a framed file and returns its JSON
// and the version it names, which is between 1 and newest.
func unframed(data []byte, newest int) ([]byte, int, error) {
	body, err := checksummed(data)
	if err != nil {
		return nil, 0, err
	}
	var probe struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return nil, 0, fmt.Errorf("not JSON: %w", err)
	}
	if err := checkVersion(probe.Version, newest); err != nil {
		return nil, 0, err
	}
	return body, probe.Version, nil
}

func checkVersion(v, newest int) error {
	if v < 1 || v > newest {
		return fmt.Errorf("version %d, this exporter reads versions 1 to %d", v, newest)
	}
	return nil
}

// Checksum is the checksum line of a framed file's bytes (the SHA-256 of
// the rest, in hex), unchecked; "" when it has none.
func Checksum(data []byte) string {
	head, _, ok := bytes.Cut(data, []byte("\n"))
	if !ok || len(head) != 2*sha256.Size {
		return ""
	}
	return string(head)
}

// checksummed checks the checksum line of a framed file and returns the
// rest.
func checksummed(data []byte) ([]byte, error) {
	head, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok || len(head) != 2*sha256.Size {
		return nil, errors.New("no checksum line: not a state folder file, or truncated")
	}
	var want [sha256.Size]byte
	if _, err := hex.Decode(want[:], head); err != nil {
		return nil, errors.New("the checksum line is not hexadecimal")
	}
	if sha256.Sum256(body) != want {
		return nil, errors.New("checksum mismatch: truncated or damaged")
	}
	return body, nil
}

// Decode reads a snapshot file's bytes. Any damage, an unknown version or a
// value outside what the exporter itself would have written is an error:
// the file is refused whole.
func Decode(data []byte) (State, error) { return decode(data, true) }

// DecodeShared reads a checkpoint from the shared store, which replicas of
// the next release write too during a rolling upgrade: members this
// version does not know are ignored, and a later version is read as this
// one (a later release that changes what a member means renames it). The
// values are checked as Decode checks them.
func DecodeShared(data []byte) (State, error) { return decode(data, false) }

func decode(data []byte, strict bool) (State, error) {
	var f fileV1
	if strict {
		body, _, err := unframed(data, version)
		if err != nil {
			return State{}, err
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return State{}, fmt.Errorf("decoding: %w", err)
		}
	} else {
		// Any version from 1 on, decoded at once: no probe of the version
		// first, which would cost another pass over a checkpoint's every
		// part.
		body, err := checksummed(data)
		if err != nil {
			return State{}, err
		}
		if err := json.Unmarshal(body, &f); err != nil {
			return State{}, fmt.Errorf("decoding: %w", err)
		}
		if err := checkVersion(f.Version, math.MaxInt); err != nil {
			return State{}, err
		}
	}
	f.Version = min(f.Version, version)
	return f.state()
}

func (f *fileV1) state() (State, error) {
	if f.SignedOnly && f.Version < versionSigned {
		return State{}, fmt.Errorf("version %d has no signed_only", f.Version)
	}
	st := State{Journal: f.Journal, Stream: f.Stream, SignedOnly: f.SignedOnly}
	var err error
	if st.Watchlist.Accounts, err = f.accounts(); err != nil {
		return State{}, err
	}
	if st.Webhook, err = f.webhookCounts(); err != nil {
		return State{}, err
	}
	seen := make(map[string]int, len(f.Addresses))
	for i, a := range f.Addresses {
		if err := a.validate(); err != nil {
			return State{}, fmt.Errorf("addresses[%d]: %w", i, err)
		}
		k := breach.Key(a.Email)
		// The error is logged: it names entries, never the address, which
		// the logs show only as its label.
		if j, dup := seen[k]; dup {
			return State{}, fmt.Errorf("addresses[%d]: the address of addresses[%d] again", i, j)
		}
		seen[k] = i
		e, err := a.entry(f.Version)
		if err != nil {
			return State{}, fmt.Errorf("addresses[%d]%w", i, err)
		}
		st.Watchlist.Entries = append(st.Watchlist.Entries, e)
	}
	if st.Seen, err = f.seen(); err != nil {
		return State{}, err
	}
	return st, nil
}

// accounts are the saved accounts: one plan before version 4, a list of
// named accounts since.
func (f *fileV1) accounts() ([]watchlist.SavedAccount, error) {
	var out []watchlist.SavedAccount
	switch {
	case f.Version < 4 && len(f.Accounts) > 0, f.Version >= 4 && f.Plan != "":
		return nil, fmt.Errorf("version %d has the plan of one account or of each, not the other", f.Version)
	case f.Version < 4 && f.Plan != "":
		out = []watchlist.SavedAccount{{Name: breach.DefaultAccount, Plan: f.Plan}}
	}
	for i, a := range f.Accounts {
		if a.Name == "" || slices.ContainsFunc(f.Accounts[:i], func(b accountV4) bool { return b.Name == a.Name }) {
			return nil, fmt.Errorf("accounts[%d]: no name, or the name of another", i)
		}
		out = append(out, watchlist.SavedAccount(a))
	}
	return out, nil
}

func (f *fileV1) webhookCounts() (breach.WebhookCounts, error) {
	if f.Version == 1 && (f.Journal != 0 || f.Webhook != (webhookV2{})) {
		return breach.WebhookCounts{}, errors.New("version 1 has no webhook counts nor journal position")
	}
	for _, v := range []float64{f.Webhook.Accepted, f.Webhook.UntrackedDiscoveryOff, f.Webhook.UntrackedDiscoveryLimit, f.Webhook.UntrackedOtherAccount} {
		if !validCount(v) {
			return breach.WebhookCounts{}, errors.New("webhook: a count that is negative or not finite")
		}
	}
	return breach.WebhookCounts(f.Webhook), nil
}

func (f *fileV1) seen() ([]breach.RememberedWebhook, error) {
	var out []breach.RememberedWebhook
	for i, s := range f.Seen {
		var d breach.RememberedWebhook
		if n, err := hex.Decode(d.Digest[:], []byte(s.Digest)); err != nil || n != sha256.Size || len(s.Digest) != 2*sha256.Size {
			return nil, fmt.Errorf("seen[%d]: not a SHA-256 digest", i)
		}
		d.At = s.At
		out = append(out, d)
	}
	return out, nil
}

// entry is the watchlist entry of a saved address of a file of version v.
// a is valid (validate). Its errors go after "addresses[i]": they start
// with ": " or with the member, ".alerts[j]: ".
func (a addressV1) entry(v int) (watchlist.SavedEntry, error) {
	if v < 4 && a.Account != "" {
		return watchlist.SavedEntry{}, fmt.Errorf(": version %d has no account", v)
	}
	e := watchlist.SavedEntry{Address: breach.Address{Email: a.Email, Account: a.Account, Discovered: a.Discovered}, State: a.State,
		LastRefresh: a.LastRefresh, LastAttempt: a.LastAttempt, Failures: a.Failures}
	for _, s := range a.Sources {
		e.Sources = append(e.Sources, breach.SourceState(s))
	}
	var err error
	if e.Alerts, err = a.alerts(); err != nil {
		return watchlist.SavedEntry{}, err
	}
	if v < 3 && (len(a.Feeds) > 0 || len(a.Acknowledged) > 0) {
		return watchlist.SavedEntry{}, fmt.Errorf(": version %d has no feeds nor acknowledged", v)
	}
	if e.Feeds, err = a.feeds(); err != nil {
		return watchlist.SavedEntry{}, err
	}
	if e.Acknowledged, err = a.acknowledged(); err != nil {
		return watchlist.SavedEntry{}, err
	}
	return e, nil
}

func (a addressV1) alerts() ([]watchlist.AlertCount, error) {
	var out []watchlist.AlertCount
	for j, c := range a.Alerts {
		family, ok := familyOf(c.Family)
		if !ok || c.Source == "" || !validCount(c.Value) ||
			(c.Label == "") != (family != watchlist.AlertsBySeverity && family != watchlist.ExposedFields) {
			return nil, fmt.Errorf(".alerts[%d]: not an alert count the exporter writes", j)
		}
		out = append(out, watchlist.AlertCount{Family: family, Source: c.Source, Label: c.Label, Value: c.Value})
	}
	return out, nil
}

func (a addressV1) feeds() (map[string]watchlist.FeedMoments, error) {
	var out map[string]watchlist.FeedMoments
	for j, m := range a.Feeds {
		if _, dup := out[m.Source]; m.Source == "" || dup || m.ChangeSeen.IsZero() && !m.LastChangedAt.IsZero() {
			return nil, fmt.Errorf(".feeds[%d]: not a feed the exporter writes", j)
		}
		if out == nil {
			out = map[string]watchlist.FeedMoments{}
		}
		out[m.Source] = watchlist.FeedMoments{LastChangedAt: m.LastChangedAt, ChangeSeen: m.ChangeSeen, Critical: m.Critical}
	}
	return out, nil
}

func (a addressV1) acknowledged() (map[acknowledge.Key]time.Time, error) {
	var out map[acknowledge.Key]time.Time
	for j, ack := range a.Acknowledged {
		k := acknowledge.Key{Source: ack.Source, HandledAt: ack.HandledAt.UTC()}
		if _, dup := out[k]; dup || ack.HandledAt.IsZero() || ack.LoadedAt.IsZero() {
			return nil, fmt.Errorf(".acknowledged[%d]: not an acknowledgement the exporter writes", j)
		}
		if out == nil {
			out = map[acknowledge.Key]time.Time{}
		}
		out[k] = ack.LoadedAt
	}
	return out, nil
}

func familyOf(name string) (watchlist.AlertFamily, bool) {
	for f, n := range alertFamilies {
		if n == name {
			return f, true
		}
	}
	return 0, false
}

func validCount(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// validate holds a restored address to what the exporter writes: the
// bounds on what comes from outside apply to what comes back from disk.
func (a addressV1) validate() error {
	switch {
	case !breach.ValidEmail(a.Email):
		return errors.New("not a valid email address")
	case !breach.Known(breach.States, a.State):
		return fmt.Errorf("unknown state %q", breach.LabelValue(a.State, breach.MaxValueBytes))
	case a.State != breach.Verified && len(a.Sources) > 0:
		return fmt.Errorf("sources on a %s address", a.State)
	case a.Failures < 0:
		return errors.New("negative failure count")
	}
	for i, s := range a.Sources {
		switch {
		case s.Source == "":
			return fmt.Errorf("sources[%d]: no source", i)
		case s.BreachCount < 0:
			return fmt.Errorf("sources[%d]: negative breach_count", i)
		}
	}
	return nil
}

// write replaces the snapshot in root with data atomically: a crash at
// any moment leaves either the old complete file or the new one. The
// temporary file's name is fixed: one process writes in a folder at a
// time (its lock).
func write(root *os.Root, name string, data []byte) error {
	tmp := name + ".tmp"
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = root.Remove(tmp) }() // after a successful rename this is a no-op
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	// The rename is durable only once the folder's entry is.
	d, err := root.Open(".")
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
