// SPDX-License-Identifier: Apache-2.0

package api

import (
	"github.com/breach-exporter/breach_exporter/internal/breach"

	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

const askedFor = "alice@example.com"

// decodeNow is the exporter's clock in decoder tests: later than every
// valid time below.
var decodeNow = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// validSource is one BreachSourceState with every required member.
const validSource = `{"source":"archive","breach_count":3,"source_dbs":["LinkedIn 2012","Adobe 2013"],` +
	`"fields_exposed":["password","username"],"has_plaintext_password":true,` +
	`"last_scanned_at":"2024-05-01T12:34:56.789Z","last_changed_at":"2024-04-30T08:00:00.000Z"}`

// withMember returns validSource with member replaced by value, or removed
// when value is "".
func withMember(member, value string) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(validSource), &m); err != nil {
		panic(err)
	}
	if value == "" {
		delete(m, member)
	} else {
		m[member] = json.RawMessage(value)
	}
	out, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(out)
}

func breachesWith(sources ...string) string {
	return `{"email":"` + askedFor + `","sources":[` + strings.Join(sources, ",") + `]}`
}

// malformedBreaches are valid JSON replies that break the spec: each must be
// a bad body, never "verified, no feeds" or zeroed values.
func malformedBreaches() map[string]string {
	cases := map[string]string{
		"sources null":                 `{"email":"` + askedFor + `","sources":null}`,
		"sources missing":              `{"email":"` + askedFor + `"}`,
		"empty object":                 `{}`,
		"only a source name":           breachesWith(`{"source":"archive"}`),
		"email differs":                `{"email":"mallory@example.com","sources":[` + validSource + `]}`,
		"email missing":                `{"sources":[` + validSource + `]}`,
		"email null":                   `{"email":null,"sources":[]}`,
		"email a number":               `{"email":7,"sources":[]}`,
		"sources an object":            `{"email":"` + askedFor + `","sources":{}}`,
		"sources a string":             `{"email":"` + askedFor + `","sources":"none"}`,
		"source entry null":            breachesWith(`null`),
		"source entry a string":        breachesWith(`"archive"`),
		"source empty":                 breachesWith(withMember("source", `""`)),
		"source a number":              breachesWith(withMember("source", `1`)),
		"breach_count 1.5":             breachesWith(withMember("breach_count", `1.5`)),
		"breach_count -1":              breachesWith(withMember("breach_count", `-1`)),
		"breach_count a string":        breachesWith(withMember("breach_count", `"3"`)),
		"breach_count true":            breachesWith(withMember("breach_count", `true`)),
		"breach_count null":            breachesWith(withMember("breach_count", `null`)),
		"breach_count 2^63":            breachesWith(withMember("breach_count", `9223372036854775808`)),
		"breach_count 1e300":           breachesWith(withMember("breach_count", `1e300`)),
		"breach_count missing":         breachesWith(withMember("breach_count", "")),
		"source_dbs missing":           breachesWith(withMember("source_dbs", "")),
		"source_dbs null":              breachesWith(withMember("source_dbs", `null`)),
		"source_dbs a string":          breachesWith(withMember("source_dbs", `"LinkedIn"`)),
		"source_dbs with a null":       breachesWith(withMember("source_dbs", `["a",null]`)),
		"source_dbs with a number":     breachesWith(withMember("source_dbs", `["a",1]`)),
		"fields_exposed missing":       breachesWith(withMember("fields_exposed", "")),
		"fields_exposed with an empty": breachesWith(withMember("fields_exposed", `["password",""]`)),
		"fields_exposed objects":       breachesWith(withMember("fields_exposed", `[{"name":"password"}]`)),
		"plaintext missing":            breachesWith(withMember("has_plaintext_password", "")),
		"plaintext a string":           breachesWith(withMember("has_plaintext_password", `"true"`)),
		"plaintext 1":                  breachesWith(withMember("has_plaintext_password", `1`)),
		"last_scanned_at missing":      breachesWith(withMember("last_scanned_at", "")),
		"last_scanned_at not a date":   breachesWith(withMember("last_scanned_at", `"yesterday"`)),
		"last_scanned_at a number":     breachesWith(withMember("last_scanned_at", `1714566896`)),
		"last_changed_at missing":      breachesWith(withMember("last_changed_at", "")),
		"last_changed_at no zone":      breachesWith(withMember("last_changed_at", `"2024-04-30T08:00:00"`)),
		"one good, one bad entry":      breachesWith(validSource, `{"source":"index"}`),
		"null body":                    `null`,
		"array body":                   `[]`,
		"trailing data":                breachesWith(validSource) + ` {}`,
		"truncated":                    breachesWith(validSource)[:60],
		// encoding/json alone matches member names case-insensitively and
		// lets the last of two win.
		"case variant beside the member": breachesWith(strings.Replace(validSource, `"breach_count":3`, `"breach_count":3,"BREACH_COUNT":777`, 1)),
		"case variant alone":             breachesWith(strings.Replace(validSource, `"breach_count"`, `"Breach_Count"`, 1)),
		"case variant of email":          `{"EMAIL":"` + askedFor + `","email":"` + askedFor + `","sources":[]}`,
		"folded s in sources":            `{"email":"` + askedFor + `","\u017fources":[]}`,
		"member twice":                   breachesWith(strings.Replace(validSource, `"breach_count":3`, `"breach_count":3,"breach_count":777`, 1)),
		"sources twice":                  `{"email":"` + askedFor + `","sources":[],"sources":[` + validSource + `]}`,
		"unknown member twice":           `{"email":"` + askedFor + `","x":1,"x":2,"sources":[]}`,
		// Implausible times: before any scan, or far ahead of our clock.
		"year 0":                     breachesWith(withMember("last_scanned_at", `"0000-01-01T00:00:00.000Z"`)),
		"year 9999":                  breachesWith(withMember("last_changed_at", `"9999-12-31T23:59:59.999Z"`)),
		"before 2000":                breachesWith(withMember("last_changed_at", `"1999-12-31T23:59:59.999Z"`)),
		"two days ahead":             breachesWith(withMember("last_scanned_at", `"2026-11-25T12:00:00.000Z"`)),
		"leap second not at day end": breachesWith(withMember("last_scanned_at", `"2016-12-31T12:59:60.000Z"`)),
		"second 61":                  breachesWith(withMember("last_scanned_at", `"2016-12-31T23:59:61.000Z"`)),
	}
	return cases
}

func TestDecodeBreachesRejectsMalformedReplies(t *testing.T) {
	for name, body := range malformedBreaches() {
		t.Run(name, func(t *testing.T) {
			b, err := DecodeBreaches([]byte(body), askedFor, decodeNow)
			if err == nil {
				t.Fatalf("accepted %s as %+v", body, b)
			}
			if !reflect.DeepEqual(b, Breaches{}) {
				t.Errorf("data alongside the error: %+v", b)
			}
		})
	}
}

// The client turns every malformed reply into KindBadBody, which is what
// the scheduler keeps the last good values on and counts as bad_body.
func TestClientCountsMalformedRepliesAsBadBody(t *testing.T) {
	for name, body := range malformedBreaches() {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, respond(200, nil, body))
			b, _, err := newClient(t, srv).Breaches(t.Context(), askedFor)
			assertKind(t, err, KindBadBody)
			if !reflect.DeepEqual(b, Breaches{}) {
				t.Errorf("data alongside the error: %+v", b)
			}
		})
	}
}

func TestDecodeBreachesAccepts(t *testing.T) {
	scanned := time.Date(2024, 5, 1, 12, 34, 56, 789_000_000, time.UTC)
	changed := time.Date(2024, 4, 30, 8, 0, 0, 0, time.UTC)
	want := breach.SourceState{
		Source: "archive", BreachCount: 3, SourceDBs: []string{"LinkedIn 2012", "Adobe 2013"},
		FieldsExposed: []string{"password", "username"}, HasPlaintextPassword: true,
		LastScannedAt: scanned, LastChangedAt: changed,
	}
	check := func(t *testing.T, body, email string, want Breaches) {
		t.Helper()
		got, err := DecodeBreaches([]byte(body), email, decodeNow)
		if err != nil {
			t.Fatalf("rejected: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
	}
	t.Run("spec example", func(t *testing.T) {
		check(t, breachesWith(validSource), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{want}})
	})
	t.Run("no feeds scanned yet", func(t *testing.T) {
		check(t, breachesWith(), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{}})
	})
	t.Run("email in another case and padded", func(t *testing.T) {
		check(t, `{"email":" Alice@Example.COM ","sources":[]}`, "alice@example.com",
			Breaches{Email: " Alice@Example.COM ", Sources: []breach.SourceState{}})
	})
	t.Run("unknown members, source and field", func(t *testing.T) {
		s := strings.Replace(withMember("confidence", `{"score":0.9}`), `"archive"`, `"darkweb"`, 1)
		s = strings.Replace(s, `"username"`, `"ssn"`, 1)
		w := want
		w.Source, w.FieldsExposed = "darkweb", []string{"password", "ssn"}
		check(t, `{"email":"`+askedFor+`","page":1,"sources":[`+s+`]}`, askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{w}})
	})
	t.Run("integral breach_count written as a float", func(t *testing.T) {
		w := want
		w.BreachCount = 3000
		check(t, breachesWith(withMember("breach_count", `3e3`)), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{w}})
	})
	t.Run("leap second", func(t *testing.T) {
		w := want
		w.LastScannedAt = time.Date(2016, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
		w.LastChangedAt = time.Date(2016, 12, 31, 23, 59, 59, 999_000_000, time.UTC)
		body := withMember("last_scanned_at", `"2016-12-31T23:59:60.500Z"`)
		// With an offset: 23:59:60 UTC is 00:59:60 at +01:00.
		body = strings.Replace(body, `"2024-04-30T08:00:00.000Z"`, `"2017-01-01T00:59:60+01:00"`, 1)
		got, err := DecodeBreaches([]byte(breachesWith(body)), askedFor, decodeNow)
		if err != nil {
			t.Fatalf("rejected: %v", err)
		}
		if s := got.Sources[0]; !s.LastScannedAt.Equal(w.LastScannedAt) || !s.LastChangedAt.Equal(w.LastChangedAt) {
			t.Fatalf("read as %v and %v, want both %v", s.LastScannedAt, s.LastChangedAt, w.LastScannedAt)
		}
	})
	t.Run("times at the bounds", func(t *testing.T) {
		w := want
		w.LastScannedAt = decodeNow.Add(24 * time.Hour)
		w.LastChangedAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
		body := withMember("last_scanned_at", `"2026-11-24T12:00:00.000Z"`)
		body = strings.Replace(body, `"2024-04-30T08:00:00.000Z"`, `"2000-01-01T00:00:00.000Z"`, 1)
		check(t, breachesWith(body), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{w}})
	})
	t.Run("timestamps without milliseconds", func(t *testing.T) {
		w := want
		w.LastScannedAt = scanned.Truncate(time.Second)
		check(t, breachesWith(withMember("last_scanned_at", `"2024-05-01T12:34:56Z"`)), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{w}})
	})
	// Lengths and counts are the label layer's to bound (see decode.go).
	t.Run("10,000 source_dbs", func(t *testing.T) {
		dbs := make([]string, 10_000)
		for i := range dbs {
			dbs[i] = "db-" + strings.Repeat("x", i%7)
		}
		raw, _ := json.Marshal(dbs)
		w := want
		w.SourceDBs = dbs
		check(t, breachesWith(withMember("source_dbs", string(raw))), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{w}})
	})
	t.Run("1 MB source name", func(t *testing.T) {
		name := strings.Repeat("s", 1<<20)
		w := want
		w.Source = name
		check(t, breachesWith(withMember("source", `"`+name+`"`)), askedFor, Breaches{Email: askedFor, Sources: []breach.SourceState{w}})
	})
}

func TestDecodeMe(t *testing.T) {
	good := Me{ID: "u1", Email: "owner@example.com", Plan: "pro"}
	for body, want := range map[string]Me{
		`{"id":"u1","email":"owner@example.com","plan":"pro"}`:          good,
		`{"id":"u1","email":"owner@example.com","plan":"pro","org":{}}`: good,
		`{"id":"u1","email":"owner@example.com","plan":"enterprise"}`:   {ID: "u1", Email: "owner@example.com", Plan: "enterprise"},
		`{"email":"owner@example.com","plan":"pro"}`:                    {},
		`{"id":"u1","plan":"pro"}`:                                      {},
		`{"id":"u1","email":"owner@example.com"}`:                       {},
		`{"id":"u1","email":"owner@example.com","plan":""}`:             {},
		`{"id":"","email":"owner@example.com","plan":"pro"}`:            {},
		`{"id":7,"email":"owner@example.com","plan":"pro"}`:             {},
		`{"id":"u1","email":null,"plan":"pro"}`:                         {},
		`{"id":"u1","email":"owner@example.com","plan":{"tier":"pro"}}`: {},
		`{"id":"u1","email":"owner@example.com","plan":"pro"}{}`:        {},
		`{"email":"` + askedFor + `","sources":[` + validSource + `]}`:  {},
		`null`: {},
		``:     {},
	} {
		got, err := DecodeMe([]byte(body))
		if want == (Me{}) {
			if err == nil {
				t.Errorf("%s: accepted as %+v", body, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%s: got %+v, %v; want %+v", body, got, err, want)
		}
	}
}

// FuzzDecodeBreaches: the decoder never panics, and whatever it accepts
// holds every invariant of the spec and agrees with a plain decoding of the
// same JSON.
func FuzzDecodeBreaches(f *testing.F) {
	f.Add([]byte(breachesWith(validSource)), askedFor)
	f.Add([]byte(breachesWith(validSource, withMember("source", `"index"`))), askedFor)
	f.Add([]byte(breachesWith()), "ALICE@example.com")
	for _, body := range malformedBreaches() {
		f.Add([]byte(body), askedFor)
	}
	f.Fuzz(func(t *testing.T, body []byte, email string) {
		b, err := DecodeBreaches(body, email, decodeNow)
		if err != nil {
			if !reflect.DeepEqual(b, Breaches{}) {
				t.Fatalf("data alongside the error %v: %+v", err, b)
			}
			return
		}
		checkBreaches(t, body, email, b)
	})
}

func FuzzDecodeMe(f *testing.F) {
	f.Add([]byte(`{"id":"u1","email":"owner@example.com","plan":"pro"}`))
	f.Add([]byte(`{"id":"u1","email":"owner@example.com","plan":"enterprise","x":[1,{}]}`))
	f.Add([]byte(`{"id":"u1","plan":""}`))
	f.Add([]byte(`{"id":7,"email":["x"],"plan":{"tier":"pro"},"sources":"none"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := DecodeMe(body)
		if err != nil {
			if m != (Me{}) {
				t.Fatalf("data alongside the error %v: %+v", err, m)
			}
			return
		}
		if !json.Valid(body) {
			t.Fatalf("accepted invalid JSON %q", body)
		}
		if m.ID == "" || m.Plan == "" {
			t.Fatalf("accepted a Me without id or plan: %+v", m)
		}
		var generic map[string]any
		if err := json.Unmarshal(body, &generic); err != nil {
			t.Fatalf("accepted a body that is not an object: %v", err)
		}
		for name, got := range map[string]string{"id": m.ID, "email": m.Email, "plan": m.Plan} {
			if v := mustMember(t, generic, name); v != got {
				t.Fatalf("%s = %q, a plain decoding says %#v", name, got, v)
			}
		}
	})
}

// checkBreaches asserts what an accepted reply guarantees, among it that a
// plain decoding finds every member under its exact name and only there.
func checkBreaches(t *testing.T, body []byte, email string, b Breaches) {
	t.Helper()
	if !json.Valid(body) {
		t.Fatalf("accepted invalid JSON %q", body)
	}
	if !strings.EqualFold(strings.TrimSpace(b.Email), strings.TrimSpace(email)) {
		t.Fatalf("accepted email %q for %q", b.Email, email)
	}
	if b.Sources == nil {
		t.Fatal("accepted a reply without sources")
	}
	var generic map[string]any
	if err := json.Unmarshal(body, &generic); err != nil {
		t.Fatalf("accepted a body that is not an object: %v", err)
	}
	plain, _ := mustMember(t, generic, "sources").([]any)
	if len(plain) != len(b.Sources) {
		t.Fatalf("%d sources, a plain decoding has %d", len(b.Sources), len(plain))
	}
	for i, s := range b.Sources {
		switch {
		case s.Source == "":
			t.Fatalf("sources[%d]: empty source", i)
		case s.BreachCount < 0 || s.BreachCount > maxExactInteger:
			t.Fatalf("sources[%d]: breach_count %d out of range", i, s.BreachCount)
		case s.SourceDBs == nil || s.FieldsExposed == nil:
			t.Fatalf("sources[%d]: nil array %+v", i, s)
		}
		for _, f := range s.FieldsExposed {
			if f == "" {
				t.Fatalf("sources[%d]: empty field", i)
			}
		}
		entry, _ := plain[i].(map[string]any)
		if entry == nil {
			t.Fatalf("sources[%d] accepted, a plain decoding has %#v", i, plain[i])
		}
		if v := mustMember(t, entry, "source"); v != s.Source {
			t.Fatalf("sources[%d].source = %q, plain %#v", i, s.Source, v)
		}
		v := mustMember(t, entry, "breach_count")
		if n, isNumber := v.(float64); !isNumber || n != float64(s.BreachCount) || n != math.Trunc(n) {
			t.Fatalf("sources[%d].breach_count = %d, plain %#v", i, s.BreachCount, v)
		}
		if v := mustMember(t, entry, "has_plaintext_password"); v != s.HasPlaintextPassword {
			t.Fatalf("sources[%d].has_plaintext_password = %v, plain %#v", i, s.HasPlaintextPassword, v)
		}
		if v := mustMember(t, entry, "source_dbs"); !sameStrings(v, s.SourceDBs) {
			t.Fatalf("sources[%d].source_dbs = %q, plain %#v", i, s.SourceDBs, v)
		}
		if v := mustMember(t, entry, "fields_exposed"); !sameStrings(v, s.FieldsExposed) {
			t.Fatalf("sources[%d].fields_exposed = %q, plain %#v", i, s.FieldsExposed, v)
		}
		for name, got := range map[string]time.Time{"last_scanned_at": s.LastScannedAt, "last_changed_at": s.LastChangedAt} {
			v := mustMember(t, entry, name)
			text, _ := v.(string)
			want, ok := parseDateTime(text)
			if !ok || !want.Equal(got) {
				t.Fatalf("sources[%d].%s = %v, plain %#v", i, name, got, v)
			}
			if got.Before(minDateTime) || got.After(decodeNow.Add(maxDateTimeAhead)) {
				t.Fatalf("sources[%d].%s = %v accepted, out of the plausible range", i, name, got)
			}
		}
	}
}

// mustMember fails unless a plain decoding of an accepted reply has name,
// and no case variant of it.
func mustMember(t *testing.T, m map[string]any, name string) any {
	t.Helper()
	v, ok := member(m, name)
	if !ok {
		t.Fatalf("accepted, but a plain decoding has no %s, or a case variant of it", name)
	}
	return v
}

// member looks name up exactly, as the decoder must; ok is false when
// another key matches it case-insensitively, which the decoder must have
// rejected.
func member(m map[string]any, name string) (v any, ok bool) {
	for k := range m {
		if k != name && strings.EqualFold(k, name) {
			return nil, false
		}
	}
	v, ok = m[name]
	return v, ok
}

func sameStrings(v any, want []string) bool {
	list, ok := v.([]any)
	if !ok || len(list) != len(want) {
		return false
	}
	for i, e := range list {
		if e != want[i] {
			return false
		}
	}
	return true
}
