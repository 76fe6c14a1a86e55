// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The feeds and exposed-value categories are the spec's enums, whose one
// home is internal/breach. The simulator reports and sweeps feeds in
// breach.KnownSources' order (part of the seed's determinism) and lists
// fields in breach.KnownFields' order.

// Fields returns the exposed-value categories in the order they are reported.
func Fields() []string { return slices.Clone(breach.KnownFields) }

const fieldPassword = "password"

// Breaches is the body of GET /breaches.
type Breaches struct {
	Email   string              `json:"email"`
	Sources []BreachSourceState `json:"sources"`
}

// BreachSourceState is the latest sweep result of one feed for an address.
//
// BreachCount is the number of breach records that mention the address in
// this feed; every database holds at least one, so it is never below
// len(SourceDBs), and it only grows.
type BreachSourceState struct {
	Source               string    `json:"source"`
	BreachCount          int       `json:"breach_count"`
	SourceDBs            []string  `json:"source_dbs"`
	FieldsExposed        []string  `json:"fields_exposed"`
	HasPlaintextPassword bool      `json:"has_plaintext_password"`
	LastScannedAt        time.Time `json:"last_scanned_at"`
	LastChangedAt        time.Time `json:"last_changed_at"`
}

// TimeLayout is the spec's date-time form: UTC with milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z"

// MarshalJSON writes the timestamps in TimeLayout; time.Time's own encoding
// drops trailing zero milliseconds and would keep a non-UTC offset.
func (s BreachSourceState) MarshalJSON() ([]byte, error) {
	type plain BreachSourceState // no MarshalJSON, so no recursion
	return json.Marshal(struct {
		plain
		LastScannedAt string `json:"last_scanned_at"`
		LastChangedAt string `json:"last_changed_at"`
	}{
		plain:         plain(s),
		LastScannedAt: s.LastScannedAt.UTC().Format(TimeLayout),
		LastChangedAt: s.LastChangedAt.UTC().Format(TimeLayout),
	})
}

// feed is the simulator's private state of one feed for one address.
type feed struct {
	source      string
	scanned     bool
	records     map[string]int // database name -> breach records in it
	fields      map[string]bool
	plaintext   bool
	lastScanned time.Time
	lastChanged time.Time
}

func newFeed(source string) *feed {
	return &feed{source: source, records: map[string]int{}, fields: map[string]bool{}}
}

func (f *feed) clone() *feed {
	c := *f
	c.records = make(map[string]int, len(f.records))
	for k, v := range f.records {
		c.records[k] = v
	}
	c.fields = make(map[string]bool, len(f.fields))
	for k, v := range f.fields {
		c.fields[k] = v
	}
	return &c
}

func (f *feed) breachCount() int {
	n := 0
	for _, r := range f.records {
		n += r
	}
	return n
}

func (f *feed) dbNames() []string {
	names := make([]string, 0, len(f.records))
	for name := range f.records {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func (f *feed) fieldList() []string {
	list := make([]string, 0, len(f.fields))
	for _, field := range breach.KnownFields {
		if f.fields[field] {
			list = append(list, field)
		}
	}
	return list
}

func (f *feed) state() BreachSourceState {
	return BreachSourceState{
		Source:               f.source,
		BreachCount:          f.breachCount(),
		SourceDBs:            f.dbNames(),
		FieldsExposed:        f.fieldList(),
		HasPlaintextPassword: f.plaintext,
		LastScannedAt:        f.lastScanned,
		LastChangedAt:        f.lastChanged,
	}
}

// differs reports whether a client could see a change between before and
// f other than last_scanned_at. Anything that differs is a change, so an
// alert can never be missed by a future mutation that forgets to flag it.
func (f *feed) differs(before *feed) bool {
	if f.scanned != before.scanned || f.plaintext != before.plaintext ||
		len(f.records) != len(before.records) || len(f.fields) != len(before.fields) {
		return true
	}
	for name, n := range f.records {
		if before.records[name] != n {
			return true
		}
	}
	for field := range f.fields {
		if !before.fields[field] {
			return true
		}
	}
	return false
}

// generator draws every random decision of the simulation from one
// math/rand source, so a seed and a sequence of sweeps fix the whole history.
type generator struct {
	rnd *rand.Rand
}

// Probabilities per feed and sweep. With the demo account (7 verified
// addresses x 4 feeds) they give a few alerts per sweep.
const (
	firstScanChance = 0.3
	changeChance    = 0.15
)

// firstScan gives a never-scanned feed its initial findings.
func (g *generator) firstScan(f *feed) {
	f.scanned = true
	for range 1 + g.rnd.Intn(3) {
		g.addDB(f)
	}
}

// change applies one or more visible changes to a scanned feed.
func (g *generator) change(f *feed) {
	switch k := g.rnd.Intn(10); {
	case k < 5:
		for range 1 + g.rnd.Intn(2) {
			g.addDB(f)
		}
	case k < 8:
		if !g.exposeFields(f) {
			g.addDB(f)
		}
	default:
		if !g.exposePlaintext(f) {
			g.addDB(f)
		}
	}
}

// addDB records the address in a database the feed had not listed yet.
func (g *generator) addDB(f *feed) {
	name := g.newDBName(f)
	f.records[name] = 1 + g.rnd.Intn(3)
	for _, field := range g.pickFields(1 + g.rnd.Intn(3)) {
		f.fields[field] = true
		if field == fieldPassword && g.rnd.Intn(4) == 0 {
			f.plaintext = true
		}
	}
}

// exposeFields adds a record to an existing database that exposes one or
// two categories not seen before. It reports false when there is nothing
// left to expose or no database to attach it to.
func (g *generator) exposeFields(f *feed) bool {
	var unseen []string
	for _, field := range breach.KnownFields {
		if !f.fields[field] {
			unseen = append(unseen, field)
		}
	}
	if len(unseen) == 0 || len(f.records) == 0 {
		return false
	}
	g.rnd.Shuffle(len(unseen), func(i, j int) { unseen[i], unseen[j] = unseen[j], unseen[i] })
	for _, field := range unseen[:min(len(unseen), 1+g.rnd.Intn(2))] {
		f.fields[field] = true
	}
	g.addRecordToExistingDB(f)
	return true
}

// exposePlaintext adds a record carrying a plaintext password. It reports
// false when the feed already shows one or has no database.
func (g *generator) exposePlaintext(f *feed) bool {
	if f.plaintext || len(f.records) == 0 {
		return false
	}
	f.plaintext = true
	f.fields[fieldPassword] = true
	g.addRecordToExistingDB(f)
	return true
}

func (g *generator) addRecordToExistingDB(f *feed) {
	names := f.dbNames() // sorted, so the pick depends only on the seed
	f.records[names[g.rnd.Intn(len(names))]]++
}

func (g *generator) pickFields(n int) []string {
	perm := g.rnd.Perm(len(breach.KnownFields))
	picked := make([]string, n)
	for i := range picked {
		picked[i] = breach.KnownFields[perm[i]]
	}
	return picked
}

// Fictional organisations: the simulator must not suggest that a real
// company was breached.
var dbWords = []string{
	"brightforum", "pixelmart", "cloudnotes", "gamerzone", "travelbug", "fitlog",
	"petpals", "recipebox", "quizhub", "artspace", "photoshare", "musicbay",
	"bookclubby", "carpoolr", "datingdots", "shopsphere",
}

var comboRegions = []string{"eu", "us", "apac", "latam", "mixed"}

func (g *generator) dbNameCandidate(source string) string {
	word := dbWords[g.rnd.Intn(len(dbWords))]
	switch source {
	case "archive":
		return fmt.Sprintf("%s-%d", word, 2008+g.rnd.Intn(12))
	case "combolist":
		return fmt.Sprintf("combo-%d-%02d-%s", 2022+g.rnd.Intn(4), 1+g.rnd.Intn(12), comboRegions[g.rnd.Intn(len(comboRegions))])
	case "index":
		return fmt.Sprintf("%s-%d", word, 2015+g.rnd.Intn(11))
	default:
		return fmt.Sprintf("%s-%s-%d", source, word, 2015+g.rnd.Intn(11))
	}
}

// newDBName returns a name the feed does not list yet. Long runs exhaust the
// candidate space, so after a few collisions a numeric suffix guarantees
// uniqueness.
func (g *generator) newDBName(f *feed) string {
	for attempt := 0; ; attempt++ {
		name := g.dbNameCandidate(f.source)
		if attempt >= 8 {
			name = fmt.Sprintf("%s-part%d", name, attempt)
		}
		if _, taken := f.records[name]; !taken {
			return name
		}
	}
}

// newFieldsSince lists the categories f exposes that before did not, in
// Fields() order.
func newFieldsSince(before, f *feed) []string {
	exposed := []string{}
	for _, field := range breach.KnownFields {
		if f.fields[field] && !before.fields[field] {
			exposed = append(exposed, field)
		}
	}
	return exposed
}

// newDBsSince lists the databases f lists that before did not, sorted.
func newDBsSince(before, f *feed) []string {
	dbs := []string{}
	for _, name := range f.dbNames() {
		if _, known := before.records[name]; !known {
			dbs = append(dbs, name)
		}
	}
	return dbs
}
