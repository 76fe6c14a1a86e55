// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"strings"
	"testing"
)

// Member names are the spec's, exactly: encoding/json alone would take a
// case variant or the last of two members silently.
func TestParseBodyMemberNames(t *testing.T) {
	for name, body := range map[string]string{
		"case variant beside":   strings.Replace(validAlert, `"severity":"critical"`, `"severity":"info","SEVERITY":"critical"`, 1),
		"case variant alone":    strings.Replace(validAlert, `"severity"`, `"Severity"`, 1),
		"case variant in delta": strings.Replace(validAlert, `"new_count":5`, `"new_count":5,"New_Count":500`, 1),
		"address twice":         strings.Replace(validAlert, `"address":"alice@example.com"`, `"address":"alice@example.com","address":"mallory@example.com"`, 1),
		"delta member twice":    strings.Replace(validAlert, `"has_new_plaintext":true`, `"has_new_plaintext":true,"has_new_plaintext":false`, 1),
		"event twice":           strings.Replace(validAlert, `"event":"alert.created"`, `"event":"alert.created","event":"alert.resolved"`, 1),
	} {
		if event, _, err := parseBody([]byte(body)); err == nil {
			t.Errorf("%s: accepted as %q", name, event)
		}
	}
	if _, a, err := parseBody([]byte(validAlert)); err != nil || a.Severity != "critical" || a.Delta.NewCount != 5 {
		t.Fatalf("the valid alert: %+v, %v", a, err)
	}
}
