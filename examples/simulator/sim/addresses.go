package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Address is one address on the simulated account.
type Address struct {
	Email    string `yaml:"email"`
	Verified bool   `yaml:"verified"`
}

// DefaultAddresses is the demo account: eight addresses, exactly one of them
// unverified so the 403 path is always visible in a demo.
func DefaultAddresses() []Address {
	return []Address{
		{Email: "alice@example.com", Verified: true},
		{Email: "bob@example.com", Verified: true},
		{Email: "carol@example.com", Verified: true},
		{Email: "dave@example.com", Verified: true},
		{Email: "erin@example.org", Verified: true},
		{Email: "frank@example.com", Verified: true},
		{Email: "grace@example.org", Verified: true},
		{Email: "newhire@example.com", Verified: false},
	}
}

// ParseAddresses reads a YAML list of {email, verified} entries, rejecting
// unknown keys so a typo such as "verfied" is an error rather than an
// unverified address. An empty file is a document-less stream (io.EOF):
// no addresses, which validateAddresses reports.
func ParseAddresses(data []byte) ([]Address, error) {
	var addrs []Address
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&addrs); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("parsing addresses: %w", err)
	}
	if len(addrs) == 0 {
		return nil, errors.New("no addresses: the account needs at least one")
	}
	if err := validateAddresses(addrs); err != nil {
		return nil, err
	}
	return addrs, nil
}

// validateAddresses accepts an empty list: Options use it for an account
// whose addresses a test sets one by one.
func validateAddresses(addrs []Address) error {
	seen := make(map[string]bool, len(addrs))
	for i, a := range addrs {
		parsed, err := mail.ParseAddress(a.Email)
		if err != nil || parsed.Address != a.Email {
			return fmt.Errorf("address %d: %q is not a plain email address", i+1, a.Email)
		}
		key := strings.ToLower(a.Email)
		if seen[key] {
			return fmt.Errorf("address %d: %q is listed twice", i+1, a.Email)
		}
		seen[key] = true
	}
	return nil
}
