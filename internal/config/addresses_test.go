package config

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"testing"
)

func TestHashLabel(t *testing.T) {
	sum := sha256.Sum256([]byte("alice@example.com"))
	want := "sha256:" + hex.EncodeToString(sum[:])[:16]
	for _, input := range []string{"alice@example.com", "Alice@Example.COM", "  alice@example.com\n"} {
		if got := HashLabel(input); got != want {
			t.Errorf("HashLabel(%q) = %q, want %q", input, got, want)
		}
	}
	if HashLabel("bob@example.com") == want {
		t.Error("different emails hash to the same label")
	}
}

const labelsYAML = `api:
  base_url: https://breaches.example.com/api/v1
addresses:
  - Alice@Example.com
  - {email: ops@example.com, alias: ops}
  - {email: sec@example.com, alias: security}
`

func TestEmailsAndLookup(t *testing.T) {
	c := mustParse(t, labelsYAML)
	if got, want := c.Emails(), []string{"Alice@Example.com", "ops@example.com", "sec@example.com"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Emails() = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		query string
		want  Address
		found bool
	}{
		{"Alice@Example.com", Address{Email: "Alice@Example.com"}, true},
		{"alice@example.com", Address{Email: "Alice@Example.com"}, true},
		{" OPS@EXAMPLE.COM ", Address{Email: "ops@example.com", Alias: "ops"}, true},
		{"mallory@example.com", Address{}, false},
		{"", Address{}, false},
	} {
		got, found := c.Lookup(tc.query)
		if got != tc.want || found != tc.found {
			t.Errorf("Lookup(%q) = %+v, %v; want %+v, %v", tc.query, got, found, tc.want, tc.found)
		}
	}
}

func TestAddressLabel(t *testing.T) {
	for _, tc := range []struct {
		mode, email, want string
	}{
		{"email", "Alice@Example.com", "Alice@Example.com"},
		{"email", "alice@example.com", "Alice@Example.com"}, // as configured
		{"email", "ops@example.com", "ops@example.com"},     // alias ignored
		{"email", "New.User@Example.org", "new.user@example.org"},
		{"alias", "ops@example.com", "ops"},
		{"alias", "SEC@example.com", "security"},
		{"alias", "new.user@example.org", HashLabel("new.user@example.org")}, // discovered: no alias
		{"hash", "alice@example.com", HashLabel("alice@example.com")},
		{"hash", "ops@example.com", HashLabel("ops@example.com")},
		{"hash", "New.User@Example.org", HashLabel("new.user@example.org")},
	} {
		t.Run(tc.mode+"/"+tc.email, func(t *testing.T) {
			yml := labelsYAML + "labels:\n  address: " + tc.mode + "\n"
			if tc.mode == "alias" {
				// alias mode needs an alias on every configured address
				yml = "api:\n  base_url: https://breaches.example.com/api/v1\nlabels:\n  address: alias\n" +
					"addresses:\n  - {email: ops@example.com, alias: ops}\n  - {email: sec@example.com, alias: security}\n"
			}
			c := mustParse(t, yml)
			if got := c.AddressLabel(tc.email); got != tc.want {
				t.Errorf("AddressLabel(%q) = %q, want %q", tc.email, got, tc.want)
			}
		})
	}
}

// A Config built in code has no index; Lookup must still find its addresses.
func TestLookupWithoutIndex(t *testing.T) {
	c := &Config{Addresses: []Address{{Email: "Alice@Example.com", Alias: "a"}}}
	if got, ok := c.Lookup("alice@example.com"); !ok || got.Alias != "a" {
		t.Errorf("Lookup on a hand-built Config = %+v, %v", got, ok)
	}
}
