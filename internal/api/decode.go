// SPDX-License-Identifier: Apache-2.0

package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/strictjson"
)

// The decoders below hold a 200 reply to the spec (section 2) before
// anything of it reaches the cache: a reply that breaks the spec is a
// KindBadBody failure, so the scheduler keeps the address's last good values
// and counts bad_body, instead of storing zeroes, year-1 timestamps or
// "verified, no feeds" the service never said.
//
// What they check:
//   - the body is one JSON object (trailing data after it is an error);
//   - member names are the spec's, exactly: a member that differs from one
//     only in case ("BREACH_COUNT") and a member that appears twice in one
//     object are errors (strictjson), where encoding/json alone would take
//     either silently;
//   - every required member is present, not null, and of its type: strings,
//     arrays of strings (no null elements), booleans, date-times (RFC 3339,
//     which covers the spec's "YYYY-MM-DDTHH:MM:SS.sssZ" and its form
//     without milliseconds);
//   - date-times are plausible: from 2000-01-01T00:00:00Z (older than any
//     scan the service can have made) to one day after the exporter's
//     clock (no clock skew or time-zone mistake is larger). A time in the
//     future would make every staleness rule blind for as long as it lasts,
//     year 0 would read as a scan 2,000 years overdue. A leap second
//     (23:59:60 UTC, which RFC 3339 allows and Go's parser does not) is read
//     as 23:59:59.999: still in its own day, and before the next second;
//   - breach_count is an integer >= 0 (1.5, -1, "3", true are errors; 3.0
//     and 3e0 are integers, as JSON Schema counts them) that fits an int64
//     exactly (at most 2^53);
//   - source, id, plan and every fields_exposed entry are non-empty: an
//     empty string is never a value of the spec's enums and would be
//     exported as a missing label;
//   - the Breaches email is the address asked for, compared
//     case-insensitively after trimming spaces.
//
// What they leave alone, on purpose:
//   - unknown members are ignored (the service may add some);
//   - enum values the spec does not list (a new source, field or plan) are
//     accepted: bounding how many distinct ones are exported is the label
//     layer's job, as is capping label lengths;
//   - lengths and counts: a 1 MB source name or 10,000 source_dbs are
//     accepted here (the 4 MiB body cap bounds the total). The spec sets no
//     limit, and rejecting would freeze the address on its last values for
//     as long as the service keeps sending them; the label layer cuts
//     source and field values to 64 bytes, database names to 256 bytes and
//     the number of database series per feed.
//   - repeated feeds in sources, and repeated names in a feed, are
//     deduplicated by the label layer (the first feed wins).

// maxExactInteger is the largest breach_count taken: every integer up to it
// is exact in a float64, so the gauge shows exactly what the service said.
const maxExactInteger = 1 << 53

// The spec's member names, for strictjson.Check.
var (
	meNames       = []string{"id", "email", "plan"}
	breachesNames = []string{"email", "sources", "source", "breach_count", "source_dbs",
		"fields_exposed", "has_plaintext_password", "last_scanned_at", "last_changed_at"}
)

// Plausible date-times (see above).
var minDateTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const maxDateTimeAhead = 24 * time.Hour

// DecodeMe decodes and validates the body of GET /me.
func DecodeMe(body []byte) (Me, error) {
	var raw struct {
		ID    json.RawMessage `json:"id"`
		Email json.RawMessage `json:"email"`
		Plan  json.RawMessage `json:"plan"`
	}
	if err := decodeDocument(body, &raw, meNames); err != nil {
		return Me{}, err
	}
	var m Me
	var err error
	if m.ID, err = nonEmptyString("id", raw.ID); err != nil {
		return Me{}, err
	}
	if m.Email, err = requiredString("email", raw.Email); err != nil {
		return Me{}, err
	}
	if m.Plan, err = nonEmptyString("plan", raw.Plan); err != nil {
		return Me{}, err
	}
	return m, nil
}

// DecodeBreaches decodes and validates the body of GET /breaches asked for
// email; now is the exporter's clock, which date-times may not be far ahead
// of.
func DecodeBreaches(body []byte, email string, now time.Time) (Breaches, error) {
	var raw struct {
		Email   json.RawMessage `json:"email"`
		Sources json.RawMessage `json:"sources"`
	}
	if err := decodeDocument(body, &raw, breachesNames); err != nil {
		return Breaches{}, err
	}
	got, err := requiredString("email", raw.Email)
	if err != nil {
		return Breaches{}, err
	}
	if !strings.EqualFold(strings.TrimSpace(got), strings.TrimSpace(email)) {
		// Neither address is echoed: they may be personal data, and the
		// caller's logs follow its own address label mode.
		return Breaches{}, errors.New("email is not the address asked for")
	}
	entries, err := requiredArray("sources", raw.Sources)
	if err != nil {
		return Breaches{}, err
	}
	b := Breaches{Email: got, Sources: make([]breach.SourceState, 0, len(entries))}
	for i, e := range entries {
		s, err := decodeSourceState(e, now)
		if err != nil {
			return Breaches{}, fmt.Errorf("sources[%d]: %w", i, err)
		}
		b.Sources = append(b.Sources, s)
	}
	return b, nil
}

func decodeSourceState(data json.RawMessage, now time.Time) (breach.SourceState, error) {
	var raw struct {
		Source               json.RawMessage `json:"source"`
		BreachCount          json.RawMessage `json:"breach_count"`
		SourceDBs            json.RawMessage `json:"source_dbs"`
		FieldsExposed        json.RawMessage `json:"fields_exposed"`
		HasPlaintextPassword json.RawMessage `json:"has_plaintext_password"`
		LastScannedAt        json.RawMessage `json:"last_scanned_at"`
		LastChangedAt        json.RawMessage `json:"last_changed_at"`
	}
	if err := decodeObject(data, &raw); err != nil {
		return breach.SourceState{}, err
	}
	var s breach.SourceState
	var err error
	if s.Source, err = nonEmptyString("source", raw.Source); err != nil {
		return breach.SourceState{}, err
	}
	if s.BreachCount, err = count("breach_count", raw.BreachCount); err != nil {
		return breach.SourceState{}, err
	}
	if s.SourceDBs, err = stringArray("source_dbs", raw.SourceDBs, false); err != nil {
		return breach.SourceState{}, err
	}
	if s.FieldsExposed, err = stringArray("fields_exposed", raw.FieldsExposed, true); err != nil {
		return breach.SourceState{}, err
	}
	if s.HasPlaintextPassword, err = boolean("has_plaintext_password", raw.HasPlaintextPassword); err != nil {
		return breach.SourceState{}, err
	}
	if s.LastScannedAt, err = dateTime("last_scanned_at", raw.LastScannedAt, now); err != nil {
		return breach.SourceState{}, err
	}
	if s.LastChangedAt, err = dateTime("last_changed_at", raw.LastChangedAt, now); err != nil {
		return breach.SourceState{}, err
	}
	return s, nil
}

// decodeDocument is decodeObject for a whole body, whose member names at
// every depth are first held to names: after that, encoding/json's
// case-insensitive matching can only take the exact name.
func decodeDocument(body []byte, dst any, names []string) error {
	if kind(body) == '{' {
		if err := strictjson.Check(body, names...); err != nil {
			return err
		}
	}
	return decodeObject(body, dst)
}

// decodeObject unmarshals data, which must be exactly one JSON object, into
// the struct of raw members dst.
func decodeObject(data []byte, dst any) error {
	if kind(data) != '{' {
		return fmt.Errorf("want a JSON object, got %s", describe(data))
	}
	if err := json.Unmarshal(data, dst); err != nil {
		return err
	}
	return nil
}

// kind returns the first byte of a JSON value ('{', '[', '"', 't', 'f', 'n',
// or a number's first byte), 0 when data is empty.
func kind(data []byte) byte {
	data = bytes.TrimLeft(data, " \t\r\n")
	if len(data) == 0 {
		return 0
	}
	return data[0]
}

func describe(data []byte) string {
	switch k := kind(data); {
	case k == 0:
		return "nothing"
	case k == '{':
		return "an object"
	case k == '[':
		return "an array"
	case k == '"':
		return "a string"
	case k == 't' || k == 'f':
		return "a boolean"
	case k == 'n':
		return "null"
	default:
		return "a number"
	}
}

func present(name string, raw json.RawMessage) error {
	switch kind(raw) {
	case 0:
		return fmt.Errorf("%s is missing", name)
	case 'n':
		return fmt.Errorf("%s is null", name)
	}
	return nil
}

func requiredString(name string, raw json.RawMessage) (string, error) {
	if err := present(name, raw); err != nil {
		return "", err
	}
	if kind(raw) != '"' {
		return "", fmt.Errorf("%s is %s, want a string", name, describe(raw))
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return s, nil
}

func nonEmptyString(name string, raw json.RawMessage) (string, error) {
	s, err := requiredString(name, raw)
	if err == nil && s == "" {
		err = fmt.Errorf("%s is empty", name)
	}
	return s, err
}

func requiredArray(name string, raw json.RawMessage) ([]json.RawMessage, error) {
	if err := present(name, raw); err != nil {
		return nil, err
	}
	if kind(raw) != '[' {
		return nil, fmt.Errorf("%s is %s, want an array", name, describe(raw))
	}
	var elems []json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return elems, nil
}

// stringArray decodes a required array of strings; nonEmpty rejects empty
// elements. The result is never nil.
func stringArray(name string, raw json.RawMessage, nonEmpty bool) ([]string, error) {
	elems, err := requiredArray(name, raw)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(elems))
	for i, e := range elems {
		element := name + "[" + strconv.Itoa(i) + "]"
		var s string
		if nonEmpty {
			s, err = nonEmptyString(element, e)
		} else {
			s, err = requiredString(element, e)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

func boolean(name string, raw json.RawMessage) (bool, error) {
	if err := present(name, raw); err != nil {
		return false, err
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%s is %s, want a boolean", name, describe(raw))
}

// count decodes an integer >= 0, at most maxExactInteger.
func count(name string, raw json.RawMessage) (int64, error) {
	if err := present(name, raw); err != nil {
		return 0, err
	}
	k := kind(raw)
	if k != '-' && (k < '0' || k > '9') {
		return 0, fmt.Errorf("%s is %s, want an integer", name, describe(raw))
	}
	text := string(bytes.TrimSpace(raw))
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		// JSON Schema's integer is any number with a zero fractional part
		// (3.0, 3e0); anything else, or out of range, is an error.
		f, ferr := strconv.ParseFloat(text, 64)
		if ferr != nil || f != math.Trunc(f) || math.Abs(f) > maxExactInteger {
			return 0, fmt.Errorf("%s is %.40q, want an integer", name, text)
		}
		n = int64(f)
	}
	switch {
	case n < 0:
		return 0, fmt.Errorf("%s is %d, want at least 0", name, n)
	case n > maxExactInteger:
		return 0, fmt.Errorf("%s is %d, more than %d", name, n, int64(maxExactInteger))
	}
	return n, nil
}

func dateTime(name string, raw json.RawMessage, now time.Time) (time.Time, error) {
	s, err := requiredString(name, raw)
	if err != nil {
		return time.Time{}, err
	}
	t, ok := parseDateTime(s)
	if !ok {
		// The value is quoted only when it cannot be anything but a
		// malformed date: a server echoing the token or an address here
		// must not put it into a log.
		if strings.Trim(s, "0123456789-:.TZtz+ ") == "" && len(s) <= 40 {
			return time.Time{}, fmt.Errorf("%s is %q, want an RFC 3339 date-time", name, s)
		}
		return time.Time{}, fmt.Errorf("%s is not an RFC 3339 date-time", name)
	}
	switch {
	case t.Before(minDateTime):
		return time.Time{}, fmt.Errorf("%s is %s, before %s: no scan can be that old", name, t.Format(time.RFC3339), minDateTime.Format(time.RFC3339))
	case t.After(now.Add(maxDateTimeAhead)):
		return time.Time{}, fmt.Errorf("%s is %s, more than %s ahead of this host's clock (%s)", name, t.Format(time.RFC3339), maxDateTimeAhead, now.UTC().Format(time.RFC3339))
	}
	return t, nil
}

// parseDateTime is time's strict RFC 3339 (as its JSON decoding uses), plus
// the leap second it rejects: 23:59:60 UTC reads as 23:59:59.999.
func parseDateTime(s string) (time.Time, bool) {
	var t time.Time
	if t.UnmarshalText([]byte(s)) == nil {
		return t, true
	}
	// The seconds are at [17:19] in every RFC 3339 date-time.
	if len(s) < 20 || s[16] != ':' || s[17:19] != "60" {
		return time.Time{}, false
	}
	if t.UnmarshalText([]byte(s[:17]+"59"+s[19:])) != nil {
		return time.Time{}, false
	}
	if u := t.UTC(); u.Hour() != 23 || u.Minute() != 59 {
		return time.Time{}, false // leap seconds end a UTC day
	}
	return t.Truncate(time.Second).Add(time.Second - time.Millisecond), true
}
