// SPDX-License-Identifier: Apache-2.0

package breach

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
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

func TestLabel(t *testing.T) {
	alice := Address{Email: "Alice@Example.com"}
	ops := Address{Email: "ops@example.com", Alias: "ops"}
	discovered := Address{Email: "New.User@Example.org", Discovered: true}
	key := []byte("0123456789abcdef")
	for _, tc := range []struct {
		mode Labeler
		addr Address
		want string
	}{
		{LabelEmail, alice, "Alice@Example.com"}, // as configured
		{LabelEmail, ops, "ops@example.com"},     // alias ignored
		{LabelEmail, discovered, "new.user@example.org"},
		{LabelAlias, ops, "ops"},
		{LabelAlias, discovered, HashLabel("new.user@example.org")}, // discovered: no alias
		{LabelHash, alice, HashLabel("alice@example.com")},
		{LabelHash, ops, HashLabel("ops@example.com")},
		{LabelHash, discovered, HashLabel("new.user@example.org")},
		{Keyed{Mode: LabelHMAC, Key: key}, ops, HMACLabel(key, "ops@example.com")}, // alias ignored
		{Keyed{Mode: LabelHMAC, Key: key}, discovered, HMACLabel(key, "new.user@example.org")},
		{Keyed{Mode: LabelAlias, Key: key}, ops, "ops"},
		{Keyed{Mode: LabelAlias, Key: key}, discovered, HMACLabel(key, "new.user@example.org")}, // no alias: keyed, not hashed
	} {
		if got := tc.mode.Label(tc.addr); got != tc.want {
			t.Errorf("%v.Label(%+v) = %q, want %q", tc.mode, tc.addr, got, tc.want)
		}
	}
}

// hmac without its key makes no label: any it could make would show more
// than the mode promises.
func TestHMACNeedsAKey(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("hmac without a key made a label")
		}
	}()
	LabelHMAC.Label(Address{Email: "ops@example.com"})
}

func TestHMACLabel(t *testing.T) {
	key := []byte("0123456789abcdef")
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte("alice@example.com"))
	want := "hmac:" + hex.EncodeToString(mac.Sum(nil))[:32]
	for _, input := range []string{"alice@example.com", "Alice@Example.COM"} {
		if got := HMACLabel(key, input); got != want {
			t.Errorf("HMACLabel(%q) = %q, want %q", input, got, want)
		}
	}
	// Without the key, hashing candidates confirms nothing.
	if HMACLabel([]byte("fedcba9876543210"), "alice@example.com") == want || HashLabel("alice@example.com") == want {
		t.Error("the label does not depend on the key")
	}
}

func TestLabelValue(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"archive", 64, "archive"},
		{strings.Repeat("a", 70), 64, strings.Repeat("a", 64)},
		{"ab\xffc", 64, "ab\uFFFDc"}, // invalid UTF-8 is replaced
		{"aé", 2, "a"},               // cut on a rune boundary
		{strings.Repeat("é", 40), 63, strings.Repeat("é", 31)},
	} {
		if got := LabelValue(tc.in, tc.max); got != tc.want {
			t.Errorf("LabelValue(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func TestValidEmail(t *testing.T) {
	long := strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + ".org"
	if len(long) != 254 {
		t.Fatalf("test address is %d bytes, want 254", len(long))
	}
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"alice@example.com", true},
		{long, true},
		{long[:64] + "x" + long[64:], false}, // 255 bytes
		{"not an email", false},
		{"Alice <alice@example.com>", false},
		{" alice@example.com", false},
		{"alice@example.com\x00", false},
		{"", false},
	} {
		if got := ValidEmail(tc.in); got != tc.want {
			t.Errorf("ValidEmail(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
