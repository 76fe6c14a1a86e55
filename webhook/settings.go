package webhook

import (
	"errors"
	"fmt"
	"time"
)

// Defaults applied when a Settings field is left at zero.
const (
	DefaultMaxBodyBytes    int64         = 64 << 10
	DefaultDedupWindow     time.Duration = 24 * time.Hour
	DefaultDedupMaxEntries int           = 100000
)

// Settings is everything the handler needs from the configuration. It is
// given as plain values so this package does not depend on the config
// loader; Update swaps it at run time.
type Settings struct {
	// Secrets are the HMAC keys; a body signed with any one of them is
	// accepted, so a new secret can be added before the old one is removed.
	// At least one is required and none may be empty.
	Secrets [][]byte
	// MaxBodyBytes caps the request body; DefaultMaxBodyBytes when 0.
	MaxBodyBytes int64
	// DedupWindow is how long the digest of an accepted body is remembered;
	// DefaultDedupWindow when 0.
	DedupWindow time.Duration
	// DedupMaxEntries bounds the dedup memory (oldest evicted first);
	// DefaultDedupMaxEntries when 0.
	DedupMaxEntries int
	// MaxEventAge, when positive, turns alerts whose observed_at is older
	// than this into "stale" outcomes. 0 disables the check.
	MaxEventAge time.Duration
	// Label maps an email address to the value of the `address` label
	// (email, alias or hash mode: the caller decides). Nil means the
	// address itself. It is applied to configured addresses and to the
	// address of every accepted alert as received, so it should normalise
	// (e.g. lower-case) if the two may be spelled differently.
	Label func(email string) string
	// Addresses are the configured addresses, whose alert counters are
	// created at 0 so that increase() sees their first alert.
	Addresses []string
}

// normalise validates s and returns a copy with defaults filled in. The
// secrets and addresses are copied so the caller may reuse its slices.
func (s Settings) normalise() (Settings, error) {
	if len(s.Secrets) == 0 {
		return Settings{}, errors.New("webhook: no secret configured")
	}
	secrets := make([][]byte, len(s.Secrets))
	for i, secret := range s.Secrets {
		if len(secret) == 0 {
			// The index, never the value: secrets must not reach logs.
			return Settings{}, fmt.Errorf("webhook: secret #%d is empty", i+1)
		}
		secrets[i] = append([]byte(nil), secret...)
	}
	s.Secrets = secrets
	s.Addresses = append([]string(nil), s.Addresses...)

	switch {
	case s.MaxBodyBytes < 0:
		return Settings{}, fmt.Errorf("webhook: max body bytes %d is negative", s.MaxBodyBytes)
	case s.DedupWindow < 0:
		return Settings{}, fmt.Errorf("webhook: dedup window %s is negative", s.DedupWindow)
	case s.DedupMaxEntries < 0:
		return Settings{}, fmt.Errorf("webhook: dedup max entries %d is negative", s.DedupMaxEntries)
	case s.MaxEventAge < 0:
		return Settings{}, fmt.Errorf("webhook: max event age %s is negative", s.MaxEventAge)
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.DedupWindow == 0 {
		s.DedupWindow = DefaultDedupWindow
	}
	if s.DedupMaxEntries == 0 {
		s.DedupMaxEntries = DefaultDedupMaxEntries
	}
	if s.Label == nil {
		s.Label = func(email string) string { return email }
	}
	return s, nil
}
