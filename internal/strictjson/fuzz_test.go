// SPDX-License-Identifier: Apache-2.0

package strictjson

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// tokenCheck is the pass over encoding/json's tokens that Check replaced
// (it allocated for every token): slow, but plainly right, so the fuzz
// target holds Check's verdict to it.
func tokenCheck(data []byte, names ...string) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()            // a number out of float64's range is syntax, not a name
	var open []map[string]bool // per open object its names; nil for an array
	inObject := func() bool { return len(open) > 0 && open[len(open)-1] != nil }
	expectName := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch {
		case tok == json.Delim('{') || tok == json.Delim('['):
			if len(open) == MaxDepth {
				return false
			}
			var members map[string]bool
			if tok == json.Delim('{') {
				members = map[string]bool{}
			}
			open = append(open, members)
			expectName = inObject()
		case tok == json.Delim('}') || tok == json.Delim(']'):
			open = open[:len(open)-1]
			expectName = inObject()
		case expectName:
			name := tok.(string)
			seen := open[len(open)-1]
			if seen[name] || slices.ContainsFunc(names, func(n string) bool { return n != name && strings.EqualFold(n, name) }) {
				return false
			}
			seen[name] = true
			expectName = false
		default:
			expectName = inObject()
		}
		if len(open) == 0 {
			break
		}
	}
	_, err := dec.Token()
	return err != nil && err.Error() == "EOF"
}

func FuzzCheck(f *testing.F) {
	for _, seed := range []string{
		`{"email":"a","sources":[{"breach_count":5}]}`,
		`{"EMAIL":"a"}`,
		`{"a":1,"a":2}`,
		`{"a\"b":1,"a\u0022b":2}`,
		`[{"x":{"y":[1,2,{"z":null}]}},"}",{"\\":true}]`,
		`{"m0":0,"m1":0,"m2":0,"m3":0,"m4":0,"m5":0,"m6":0,"m7":0,"m8":0,"m9":0,"m10":0,"m11":0,"m12":0,"m13":0,"m14":0,"m15":0,"m16":0,"m3":1}`,
		`{"a":1} {}`, `{"a":`, ``, `"\ud800"`,
	} {
		f.Add([]byte(seed))
	}
	names := []string{"email", "sources", "breach_count"}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := Check(data, names...) == nil
		if want := tokenCheck(data, names...); got != want {
			t.Errorf("Check accepts %q: %v; the token pass: %v", data, got, want)
		}
	})
}
