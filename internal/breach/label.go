package breach

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"unicode/utf8"
)

// LabelMode is labels.address: what the address label of every series holds.
type LabelMode string

// The label modes.
const (
	LabelEmail LabelMode = "email" // the email as configured (lower-cased when discovered)
	LabelAlias LabelMode = "alias" // the configured alias; the hash for an address without one
	LabelHash  LabelMode = "hash"  // HashLabel
)

// LabelModes lists the valid modes.
var LabelModes = []LabelMode{LabelEmail, LabelAlias, LabelHash}

// HashPrefix starts every hashed label; an alias must not start with it.
const HashPrefix = "sha256:"

// Label caps, in bytes, the same on every series that carries the label so
// that series still join. An address is at most 254 bytes (RFC 5321), which
// discovery enforces; the others bound values a buggy sender or API makes up.
const (
	MaxAddressBytes  = 254
	MaxSourceBytes   = 64
	MaxFieldBytes    = 64
	MaxDatabaseBytes = 256
	MaxValueBytes    = 64 // severity, plan and other enum values
)

// Label is the value of the address label for a under mode:
//   - email: the email as configured, lower-cased when discovered;
//   - alias: the alias, or HashLabel when there is none (a discovered address
//     has none, and its email must not leak into a setup that hides emails);
//   - hash: HashLabel.
func (mode LabelMode) Label(a Address) string {
	switch mode {
	case LabelHash:
		return HashLabel(a.Email)
	case LabelAlias:
		if a.Alias != "" {
			return LabelValue(a.Alias, MaxAddressBytes)
		}
		return HashLabel(a.Email)
	default:
		if a.Discovered {
			return LabelValue(Key(a.Email), MaxAddressBytes)
		}
		return LabelValue(a.Email, MaxAddressBytes)
	}
}

// HashLabel is "sha256:" followed by the first 16 lowercase hex digits of
// the SHA-256 of Key(email): stable across restarts and case variants,
// without putting the address itself into a label.
func HashLabel(email string) string {
	sum := sha256.Sum256([]byte(Key(email)))
	return HashPrefix + hex.EncodeToString(sum[:8])
}

// LabelValue makes s a safe label value: valid UTF-8 (client_golang and the
// exposition formats require it) and at most max bytes, cut on a rune
// boundary.
func LabelValue(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
