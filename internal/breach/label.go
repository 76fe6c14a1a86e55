// SPDX-License-Identifier: Apache-2.0

package breach

import (
	"crypto/hmac"
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
	LabelAlias LabelMode = "alias" // the configured alias; the hash (or HMAC, with a key) for an address without one
	LabelHash  LabelMode = "hash"  // HashLabel
	LabelHMAC  LabelMode = "hmac"  // HMACLabel, under labels.address_key_file
)

// LabelModes lists the valid modes.
var LabelModes = []LabelMode{LabelEmail, LabelAlias, LabelHash, LabelHMAC}

// Prefixes of the labels made from an address; an alias must start with
// neither, so it is never taken for one.
const (
	HashPrefix = "sha256:"
	HMACPrefix = "hmac:"
)

// MinLabelKeyBytes is the least key HMACLabel is given: 128 bits, so the
// key cannot be guessed where the addresses can.
const MinLabelKeyBytes = 16

// Labeler gives the address label of a watched address. A LabelMode is one
// for the modes without a key; Keyed is the one for hmac.
type Labeler interface {
	Label(a Address) string
}

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
//
// hmac needs its key: Keyed labels it. Without one it panics, since any
// label it could make would show more than the mode promises.
func (mode LabelMode) Label(a Address) string {
	switch mode {
	case LabelHMAC:
		panic("breach: hmac labels need a key: use Keyed")
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
// without putting the address itself into a label. Anyone holding a list of
// candidate addresses can hash them and confirm which are watched.
func HashLabel(email string) string {
	sum := sha256.Sum256([]byte(Key(email)))
	return HashPrefix + hex.EncodeToString(sum[:8])
}

// Keyed labels under a secret key: in hmac mode every address with
// HMACLabel; in alias mode an address with an alias by its alias and one
// without (a discovered address) with HMACLabel rather than HashLabel.
type Keyed struct {
	Mode LabelMode // LabelHMAC or LabelAlias
	Key  []byte    // at least MinLabelKeyBytes
}

// Label is the address label of a (see Keyed).
func (k Keyed) Label(a Address) string {
	if k.Mode == LabelAlias && a.Alias != "" {
		return LabelValue(a.Alias, MaxAddressBytes)
	}
	return HMACLabel(k.Key, a.Email)
}

// HMACLabel is "hmac:" followed by the first 32 lowercase hex digits (128
// bits) of the HMAC-SHA256 of Key(email) under key. Without the key a label
// cannot be computed from a candidate address, so a list of candidates
// confirms nothing. 128 bits keep labels unique however many addresses are
// watched (at 100,000 addresses a collision has a chance of about 10^-29;
// 64 bits would already make it 10^-10) for 16 bytes more per series than
// the hash mode's 64.
func HMACLabel(key []byte, email string) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(Key(email)))
	return HMACPrefix + hex.EncodeToString(mac.Sum(nil)[:16])
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
