// SPDX-License-Identifier: Apache-2.0

package strictjson

import (
	"fmt"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	names := []string{"email", "sources", "breach_count"}
	for _, tc := range []struct {
		body string
		err  string // "" when accepted
	}{
		{`{"email":"a@example.com","sources":[{"breach_count":5}]}`, ""},
		{`{"email":"a","other":{"x":1,"y":[1,{"x":2}]},"sources":[]}`, ""},
		{`[]`, ""},
		{`"text"`, ""},
		{` {"email":"a"} `, ""},
		{`{"Unknown":1,"unknown":2}`, ""}, // case only matters for the names asked for
		{`{"sources":[{"breach_count":5,"BREACH_COUNT":777}]}`, `member "BREACH_COUNT" is not "breach_count"`},
		{`{"EMAIL":"a"}`, `member "EMAIL" is not "email"`},
		{`{"\u017fources":[]}`, `is not "sources"`}, // ſ folds to s, as encoding/json matches it
		{`{"email":"a","email":"b"}`, `member "email" appears twice`},
		{`{"email":"a","\u0065mail":"b"}`, `member "email" appears twice`}, // escapes decode first
		{`{"sources":[{"breach_count":1,"breach_count":2}]}`, `member "breach_count" appears twice`},
		{`{"x":{"secret@example.com":1,"secret@example.com":2}}`, "a member name appears twice"},
		{`{"email":"a"} {}`, "data after the JSON value"},
		{`{"email":"a"`, "truncated JSON"},
		{`{"email":}`, "invalid JSON at byte"},
		{``, "truncated JSON"},
		{strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1), "nested deeper"},
		{strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth), ""},
		// Past linearNames members an object's names are in a map.
		{`{` + members(40) + `}`, ""},
		{`{` + members(40) + `,"m3":0}`, "a member name appears twice"},
		{`{` + members(40) + `,"email":"a","x":{"email":1},"email":"b"}`, `member "email" appears twice`},
		{`{` + members(40) + `,"Email":"a"}`, `member "Email" is not "email"`},
		// An object's names end with it.
		{`[{` + members(20) + `},{` + members(20) + `}]`, ""},
		{`{"a":{"b":1},"b":{"a":1}}`, ""},
		{`{"a\"b":1,"a\"b":2}`, "a member name appears twice"},
		{`{"a":"x\"y","b":"}","c":"{"}`, ""},
	} {
		err := Check([]byte(tc.body), names...)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%.60s: rejected: %v", tc.body, err)
		case tc.err != "" && err == nil:
			t.Errorf("%.60s: accepted", tc.body)
		case tc.err != "" && !strings.Contains(err.Error(), tc.err):
			t.Errorf("%.60s: error %q, want it to say %q", tc.body, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), "secret@") {
			t.Errorf("%.60s: the error quotes the data: %v", tc.body, err)
		}
	}
}

// members is n members "m0":0 … "m<n-1>":0, comma-separated.
func members(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"m%d":0`, i)
	}
	return strings.Join(parts, ",")
}
