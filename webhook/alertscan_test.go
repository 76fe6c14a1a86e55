// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"reflect"
	"strings"
	"testing"
)

// scanCases are bodies around the service's form: the ones the one-pass
// reader must take, and the ones it must leave to the general path.
var scanCases = []struct {
	body    string
	scanned bool // read by scanAlert, not the general path
}{
	{validAlert, true},
	{" \t\r\n" + strings.ReplaceAll(validAlert, ",", " ,\n ") + "\n", true},
	{strings.Replace(validAlert, `"summary":"2 new databases"`, `"summary":"caf\u00e9 \"quoted\" \/ \\ done"`, 1), true},
	{strings.Replace(validAlert, `"summary":"2 new databases"`, `"summary":"café ☕"`, 1), true},
	{strings.Replace(validAlert, `"summary":"2 new databases"`, "\"summary\":\"bad \xff byte\"", 1), true},
	{strings.Replace(validAlert, `"summary":"2 new databases"`, `"summary":"lone \ud800 surrogate"`, 1), true},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":-9223372036854775808`, 1), true},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":9223372036854775807`, 1), true},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":-0`, 1), true},
	{strings.Replace(validAlert, `"new_source_dbs":["db-one","db-two"]`, `"new_source_dbs":[]`, 1), true},
	{strings.Replace(validAlert, `"new_source_dbs":["db-one","db-two"]`, `"new_source_dbs":[ ]`, 1), true},
	{strings.Replace(validAlert, `"event":"alert.created"`, `"event":"alert.resolved"`, 1), true},
	{strings.Replace(validAlert, `"severity":"critical",`, ``, 1), true}, // the general path's error
	{strings.Replace(validAlert, `"observed_at":"2025-03-01T11:59:00Z"`, `"observed_at":"yesterday"`, 1), true},
	{`{"event":"alert.created"}`, true},
	{`{}`, true},
	// Unknown members with scalar values are skipped, checked as
	// strictjson checks them.
	{validAlert[:len(validAlert)-1] + `,"n":12,"f":-1.5e+3,"s":"x\n\u0041","t":true,"u":false,"v":null}`, true},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":5,"n":1,"summary":"in delta"`, 1), true},
	{validAlert[:len(validAlert)-1] + `,"new_count":"at the top"}`, true},

	// Left to the general path, which answers them.
	{validAlert[:len(validAlert)-1] + `,"n":{"x":1}}`, false},
	{validAlert[:len(validAlert)-1] + `,"n":[1]}`, false},
	{validAlert[:len(validAlert)-1] + `,"n":1,"n":2}`, false},
	{validAlert[:len(validAlert)-1] + `,"SEVERITY":"info"}`, false},
	{validAlert[:len(validAlert)-1] + `,"\u017fource":"x"}`, false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":5,"New_Count":6`, 1), false},
	{strings.Replace(validAlert, `"severity"`, `"sev\u0065rity"`, 1), false},
	{validAlert[:len(validAlert)-1] + `,"event":"alert.created"}`, false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":5,"new_count":5`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":5.0`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":5e1`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":05`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":9223372036854775808`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":-9223372036854775809`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":"5"`, 1), false},
	{strings.Replace(validAlert, `"new_count":5`, `"new_count":null`, 1), false},
	{strings.Replace(validAlert, `"severity":"critical"`, `"severity":null`, 1), false},
	{strings.Replace(validAlert, `"severity":"critical"`, `"severity":5`, 1), false},
	{strings.Replace(validAlert, `"has_new_plaintext":true`, `"has_new_plaintext":1`, 1), false},
	{strings.Replace(validAlert, `["db-one","db-two"]`, `["db-one",null]`, 1), false},
	{strings.Replace(validAlert, `["db-one","db-two"]`, `["db-one",]`, 1), false},
	{strings.Replace(validAlert, `"summary":"2 new databases"`, "\"summary\":\"tab\there\"", 1), false},
	{strings.Replace(validAlert, `"summary":"2 new databases"`, `"summary":"bad \x escape"`, 1), false},
	{strings.Replace(validAlert, `"delta":{`, `"delta":null,"x":{`, 1), false},
	{validAlert + `{}`, false},
	{validAlert[:len(validAlert)-1], false},
	{validAlert[:len(validAlert)-1] + `,}`, false},
	{`[` + validAlert + `]`, false},
	{``, false},
	{`{"event":"alert.created",}`, false},
}

// The one-pass reader gives the general path's answer on every body it
// takes, and takes the service's usual bodies.
func TestScanAlert(t *testing.T) {
	for _, tc := range scanCases {
		w, scanned := scanAlert([]byte(tc.body))
		if scanned != tc.scanned {
			t.Errorf("scanAlert(%q) took it: %v, want %v", tc.body, scanned, tc.scanned)
		}
		if scanned {
			checkScanned(t, []byte(tc.body), w)
		}
	}
}

// FuzzScanAlert: whatever the one-pass reader takes, strictjson and
// encoding/json take too, with the same result.
func FuzzScanAlert(f *testing.F) {
	for _, tc := range scanCases {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if w, ok := scanAlert(body); ok {
			checkScanned(t, body, w)
		}
	})
}

func checkScanned(t *testing.T, body []byte, scanned wireAlert) {
	t.Helper()
	want, err := decodeAlert(body)
	if err != nil {
		t.Fatalf("scanAlert took %q, which the general path refuses: %v", body, err)
	}
	if !reflect.DeepEqual(scanned, want) {
		t.Fatalf("scanAlert read %q as\n%#v\nthe general path as\n%#v", body, scanned, want)
	}
	_, gotAlert, gotErr := readAlert(scanned)
	_, wantAlert, wantErr := readAlert(want)
	if !reflect.DeepEqual(gotAlert, wantAlert) || (gotErr == nil) != (wantErr == nil) {
		t.Fatalf("%q: %+v (%v), want %+v (%v)", body, gotAlert, gotErr, wantAlert, wantErr)
	}
}

// BenchmarkParseBody reads the service's usual body, in one pass and by
// the general path.
func BenchmarkParseBody(b *testing.B) {
	body := []byte(validAlert)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := parseBody(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w, err := decodeAlert(body)
			if err == nil {
				_, _, err = readAlert(w)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
