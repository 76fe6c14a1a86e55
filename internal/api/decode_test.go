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

// malformedBreaches are the replies of issue 10 (point 4) and their kin:
// each must be a bad body, never "verified, no feeds" or zeroed values.
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
	}
	return cases
}

func TestDecodeBreachesRejectsMalformedReplies(t *testing.T) {
	for name, body := range malformedBreaches() {
		t.Run(name, func(t *testing.T) {
			b, err := DecodeBreaches([]byte(body), askedFor)
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
		got, err := DecodeBreaches([]byte(body), email)
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
		b, err := DecodeBreaches(body, email)
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
			if v, ok := member(generic, name); ok && v != got {
				t.Fatalf("%s = %q, a plain decoding says %#v", name, got, v)
			}
		}
	})
}

// checkBreaches asserts what an accepted reply guarantees.
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
	plainSources, unique := member(generic, "sources")
	plain, _ := plainSources.([]any)
	if unique && len(plain) != len(b.Sources) {
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
		if !unique {
			continue
		}
		entry, _ := plain[i].(map[string]any)
		if entry == nil {
			t.Fatalf("sources[%d] accepted, a plain decoding has %#v", i, plain[i])
		}
		if v, ok := member(entry, "source"); ok && v != s.Source {
			t.Fatalf("sources[%d].source = %q, plain %#v", i, s.Source, v)
		}
		if v, ok := member(entry, "breach_count"); ok {
			n, isNumber := v.(float64)
			if !isNumber || n != float64(s.BreachCount) || n != math.Trunc(n) {
				t.Fatalf("sources[%d].breach_count = %d, plain %#v", i, s.BreachCount, v)
			}
		}
		if v, ok := member(entry, "has_plaintext_password"); ok && v != s.HasPlaintextPassword {
			t.Fatalf("sources[%d].has_plaintext_password = %v, plain %#v", i, s.HasPlaintextPassword, v)
		}
		if v, ok := member(entry, "source_dbs"); ok && !sameStrings(v, s.SourceDBs) {
			t.Fatalf("sources[%d].source_dbs = %q, plain %#v", i, s.SourceDBs, v)
		}
		if v, ok := member(entry, "fields_exposed"); ok && !sameStrings(v, s.FieldsExposed) {
			t.Fatalf("sources[%d].fields_exposed = %q, plain %#v", i, s.FieldsExposed, v)
		}
		for name, got := range map[string]time.Time{"last_scanned_at": s.LastScannedAt, "last_changed_at": s.LastChangedAt} {
			v, ok := member(entry, name)
			if !ok {
				continue
			}
			text, _ := v.(string)
			var want time.Time
			if err := want.UnmarshalText([]byte(text)); err != nil || !want.Equal(got) {
				t.Fatalf("sources[%d].%s = %v, plain %#v", i, name, got, v)
			}
		}
	}
}

// member looks name up the way encoding/json matches struct fields (exact,
// else case-insensitively); ok is false unless exactly one key matches, since
// a map keeps no order to tell which of several the decoder took last.
func member(m map[string]any, name string) (v any, ok bool) {
	matches := 0
	for k, val := range m {
		if strings.EqualFold(k, name) {
			matches++
			v = val
		}
	}
	return v, matches == 1
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
