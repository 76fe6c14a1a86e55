package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

const hashPrefix = "sha256:"

// Emails returns the configured email addresses as written, in config order.
func (c *Config) Emails() []string {
	emails := make([]string, len(c.Addresses))
	for i, a := range c.Addresses {
		emails[i] = a.Email
	}
	return emails
}

// Lookup finds the configured address matching email, ignoring case and
// surrounding whitespace: through the index Parse builds, or by a scan for a
// Config built by hand.
func (c *Config) Lookup(email string) (Address, bool) {
	if c.byKey != nil {
		if i, ok := c.byKey[normalize(email)]; ok {
			return c.Addresses[i], true
		}
		return Address{}, false
	}
	email = strings.TrimSpace(email)
	for _, a := range c.Addresses {
		if strings.EqualFold(a.Email, email) {
			return a, true
		}
	}
	return Address{}, false
}

// AddressLabel is the value of the address label for email under
// labels.address:
//   - email: the email as configured, or lower-cased when it is not
//     configured (an address discovered through the webhook);
//   - alias: the configured alias, or HashLabel when there is none (a
//     discovered address has no alias, and its email must not leak into a
//     setup that chose to hide emails);
//   - hash: HashLabel.
func (c *Config) AddressLabel(email string) string {
	a, configured := c.Lookup(email)
	switch c.Labels.Address {
	case LabelHash:
		return HashLabel(email)
	case LabelAlias:
		if configured && a.Alias != "" {
			return a.Alias
		}
		return HashLabel(email)
	default:
		if configured {
			return a.Email
		}
		return normalize(email)
	}
}

// HashLabel is "sha256:" followed by the first 16 lowercase hex digits of
// the SHA-256 of the trimmed, lower-cased email: stable across restarts and
// case variants, without putting the address itself into a label.
func HashLabel(email string) string {
	sum := sha256.Sum256([]byte(normalize(email)))
	return hashPrefix + hex.EncodeToString(sum[:8])
}

func normalize(email string) string { return strings.ToLower(strings.TrimSpace(email)) }
