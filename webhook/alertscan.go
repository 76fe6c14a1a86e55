// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"encoding/json"
	"strings"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// scanAlert reads body into a wireAlert in one pass over its bytes, as
// strictjson.Check followed by json.Unmarshal would read it, for the form
// the service sends: an object of the spec's members, strings, integers,
// booleans, string arrays and a delta object, plus unknown members with a
// scalar value. Those two passes cost most of a verified request's CPU,
// and every accepted alert takes them.
//
// ok false means this pass did not decide, never that the body is bad:
// anything it does not read exactly (an error of any kind, null, a nested
// unknown value, an escaped or non-ASCII member name, an integer out of
// range...) goes to the general path, which gives the answer and the
// error. So ok true may only be returned for a body the general path
// accepts with the same result; FuzzScanAlert holds it to that.
func scanAlert(body []byte) (w wireAlert, ok bool) {
	s := scanner{data: body}
	if !s.object(func(name []byte) bool { return s.alertMember(&w, name) }) {
		return wireAlert{}, false
	}
	s.space()
	return w, s.i == len(s.data)
}

// scanner is a position in a body; every method returns false, leaving
// the position anywhere, on what it does not read.
type scanner struct {
	data []byte
	i    int
	// known has a bit for each spec member read in the current object, so
	// that a second one is left to the general path (which refuses it).
	known uint32
}

// Bits of scanner.known, one per member of alertNames.
const (
	bitEvent = 1 << iota
	bitSeverity
	bitAddress
	bitSource
	bitSummary
	bitDelta
	bitObservedAt
	bitDashboardURL
	bitPreviousCount
	bitNewCount
	bitNewSourceDBs
	bitNewlyExposedFields
	bitHasNewPlaintext
	bitIsFirstScan
)

// maxUnknownMembers is how many unknown members one object may have on
// this path; they are compared pairwise for repeats.
const maxUnknownMembers = 8

// object reads an object whose member values member reads; member is
// called with the name and the position at the value.
func (s *scanner) object(member func(name []byte) bool) bool {
	if !s.consume('{') {
		return false
	}
	outer := s.known
	s.known = 0
	var unknown [maxUnknownMembers][]byte
	unknowns := 0
	if s.closed('}') {
		s.known = outer
		return true
	}
	for {
		s.space()
		name, plain, ok := s.stringLiteral()
		if !ok || !plain {
			return false
		}
		if !s.consume(':') {
			return false
		}
		s.space()
		before := s.known
		if !member(name) {
			return false
		}
		if s.known == before {
			// Not one of this object's members: skipped as the general
			// path skips it, after the checks strictjson makes of every
			// name.
			if unknowns == maxUnknownMembers || !unknownName(name, unknown[:unknowns]) {
				return false
			}
			unknown[unknowns] = name
			unknowns++
			if !s.skipScalar() {
				return false
			}
		}
		if more, ok := s.separator('}'); !ok || !more {
			s.known = outer
			return ok
		}
	}
}

// separator reads what follows an element of an object or array: a comma
// (more) or the closing end.
func (s *scanner) separator(end byte) (more, ok bool) {
	s.space()
	if s.i == len(s.data) {
		return false, false
	}
	switch s.data[s.i] {
	case ',':
		s.i++
		return true, true
	case end:
		s.i++
		return false, true
	}
	return false, false
}

// closed reads end at once after the opening: an empty object or array.
func (s *scanner) closed(end byte) bool {
	s.space()
	if s.i < len(s.data) && s.data[s.i] == end {
		s.i++
		return true
	}
	return false
}

// unknownName reports whether name may be skipped: not a case variant of
// a spec member, which encoding/json would read as that member, and not
// a repeat of another unknown one.
func unknownName(name []byte, earlier [][]byte) bool {
	for _, n := range alertNames {
		if string(name) != n && strings.EqualFold(string(name), n) {
			return false
		}
	}
	for _, e := range earlier {
		if string(e) == string(name) {
			return false
		}
	}
	return true
}

// claim marks a spec member read; false when it was already.
func (s *scanner) claim(bit uint32) bool {
	if s.known&bit != 0 {
		return false
	}
	s.known |= bit
	return true
}

// alertMember reads the value of a top-level member; an unknown one is
// left unread (known unchanged) for object to skip.
func (s *scanner) alertMember(w *wireAlert, name []byte) bool {
	var field *string
	var bit uint32
	var known []string // values that need no copy of their own
	switch string(name) {
	case "event":
		field, bit, known = &w.Event, bitEvent, eventNames
	case "severity":
		field, bit, known = &w.Severity, bitSeverity, breach.KnownSeverities
	case "address":
		field, bit = &w.Address, bitAddress
	case "source":
		field, bit, known = &w.Source, bitSource, breach.KnownSources
	case "summary":
		field, bit = &w.Summary, bitSummary
	case "observed_at":
		field, bit = &w.ObservedAt, bitObservedAt
	case "dashboard_url":
		field, bit = &w.DashboardURL, bitDashboardURL
	case "delta":
		if !s.claim(bitDelta) {
			return false
		}
		d := &Delta{}
		w.Delta = d
		return s.object(func(name []byte) bool { return s.deltaMember(d, name) })
	default:
		return true
	}
	if !s.claim(bit) {
		return false
	}
	v, ok := s.stringValue(known)
	*field = v
	return ok
}

var eventNames = []string{breach.EventAlertCreated}

// deltaMember reads the value of a member of delta, as alertMember.
func (s *scanner) deltaMember(d *Delta, name []byte) bool {
	switch string(name) {
	case "previous_count":
		return s.claim(bitPreviousCount) && s.int64Value(&d.PreviousCount)
	case "new_count":
		return s.claim(bitNewCount) && s.int64Value(&d.NewCount)
	case "new_source_dbs":
		return s.claim(bitNewSourceDBs) && s.stringArray(&d.NewSourceDBs, nil)
	case "newly_exposed_fields":
		return s.claim(bitNewlyExposedFields) && s.stringArray(&d.NewlyExposedFields, breach.KnownFields)
	case "has_new_plaintext":
		return s.claim(bitHasNewPlaintext) && s.boolValue(&d.HasNewPlaintext)
	case "is_first_scan":
		return s.claim(bitIsFirstScan) && s.boolValue(&d.IsFirstScan)
	}
	return true
}

// stringValue reads a string. A value equal to one of known is that
// string, not a copy: the spec's enums come with nearly every alert.
func (s *scanner) stringValue(known []string) (string, bool) {
	start := s.i
	raw, plain, ok := s.stringLiteral()
	if !ok {
		return "", false
	}
	if !plain {
		// Escapes or bytes past ASCII: decoded by encoding/json itself,
		// so that its rules (invalid UTF-8, lone surrogates) hold.
		var v string
		return v, json.Unmarshal(s.data[start:s.i], &v) == nil
	}
	for _, k := range known {
		if string(raw) == k {
			return k, true
		}
	}
	return string(raw), true
}

// stringArray reads an array of strings; [] is an empty slice, not nil,
// as encoding/json makes it.
func (s *scanner) stringArray(out *[]string, known []string) bool {
	if !s.consume('[') {
		return false
	}
	values := []string{}
	if s.closed(']') {
		*out = values
		return true
	}
	for {
		s.space()
		v, ok := s.stringValue(known)
		if !ok {
			return false
		}
		values = append(values, v)
		if more, ok := s.separator(']'); !ok || !more {
			*out = values
			return ok
		}
	}
}

// int64Value reads an integer in int64's range; a fraction or exponent,
// which encoding/json refuses for an integer field, is left to it.
func (s *scanner) int64Value(out *int64) bool {
	neg := s.next("-")
	start := s.i
	var v uint64
	for s.atDigit() {
		if v > (1<<63)/10 {
			return false
		}
		v = v*10 + uint64(s.data[s.i]-'0')
		s.i++
	}
	switch digits := s.i - start; {
	case digits == 0, digits > 1 && s.data[start] == '0': // no digit, or a leading zero
		return false
	case v > 1<<63, v == 1<<63 && !neg:
		return false
	case s.at(".eE"):
		return false
	}
	*out = int64(v)
	if neg {
		*out = -*out
	}
	return true
}

func (s *scanner) boolValue(out *bool) bool {
	switch {
	case s.literal("true"):
		*out = true
	case s.literal("false"):
		*out = false
	default:
		return false
	}
	return true
}

// skipScalar reads a string, number, true, false or null whose value
// nothing takes.
func (s *scanner) skipScalar() bool {
	if s.i == len(s.data) {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '"':
		_, _, ok := s.stringLiteral()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	default:
		return s.literal("true") || s.literal("false") || s.literal("null")
	}
}

// number reads a JSON number (RFC 8259's grammar).
func (s *scanner) number() bool {
	s.next("-")
	if !s.next("0") && !s.digits() {
		return false
	}
	if s.next(".") && !s.digits() {
		return false
	}
	if s.next("eE") {
		s.next("+-")
		return s.digits()
	}
	return true
}

// digits reads one or more decimal digits.
func (s *scanner) digits() bool {
	start := s.i
	for s.atDigit() {
		s.i++
	}
	return s.i > start
}

// at says whether the next byte is one of set.
func (s *scanner) at(set string) bool {
	return s.i < len(s.data) && strings.IndexByte(set, s.data[s.i]) >= 0
}

// atDigit says whether the next byte is a decimal digit.
func (s *scanner) atDigit() bool {
	return s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9'
}

// next reads the next byte if it is one of set.
func (s *scanner) next(set string) bool {
	if !s.at(set) {
		return false
	}
	s.i++
	return true
}

// stringLiteral reads a string and returns its raw bytes between the
// quotes; plain means they are the value as they stand: printable ASCII,
// no escape.
func (s *scanner) stringLiteral() (raw []byte, plain, ok bool) {
	if s.i == len(s.data) || s.data[s.i] != '"' {
		return nil, false, false
	}
	s.i++
	start := s.i
	plain = true
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return s.data[start : s.i-1], plain, true
		case c < 0x20:
			return nil, false, false
		case c >= 0x80:
			plain = false
		case c == '\\':
			plain = false
			if !s.escape() {
				return nil, false, false
			}
			continue
		}
		s.i++
	}
	return nil, false, false
}

// escape reads one escape sequence, the backslash included.
func (s *scanner) escape() bool {
	s.i++ // the backslash
	if s.i == len(s.data) {
		return false
	}
	switch s.data[s.i] {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		s.i++
		return true
	case 'u':
		if len(s.data)-s.i < 5 {
			return false
		}
		for _, c := range s.data[s.i+1 : s.i+5] {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
		s.i += 5
		return true
	}
	return false
}

func (s *scanner) literal(word string) bool {
	if len(s.data)-s.i < len(word) || string(s.data[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// consume skips white space and reads c.
func (s *scanner) consume(c byte) bool {
	s.space()
	if s.i == len(s.data) || s.data[s.i] != c {
		return false
	}
	s.i++
	return true
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}
