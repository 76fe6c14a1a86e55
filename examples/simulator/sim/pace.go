// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The demo's pace. The service changes a feed rarely; sweeps every few
// seconds compress that, and with Options.HoldExposed they stop short of
// what would make the on-call workflow impossible to rehearse: once a feed
// exposes the address's password (what every critical alert and every
// plaintext page is about), sweeps no longer change it, so an
// acknowledgement of it holds until News brings a change on demand. The
// other feeds keep changing, with warnings and first scans.

// holds reports whether sweeps must leave f alone. Callers hold s.mu.
func (s *Simulator) holds(f *feed) bool {
	return s.holdExposed && f.fields[fieldPassword]
}

// News is a change on demand: the feed of a verified address lists it in a
// new breach database whose records expose its password in plaintext, as
// a sweep at the clock's time would report it. It returns the alert (which
// is delivered, retrying until ctx ends, when the plan has deliveries):
// critical when the feed showed no plaintext password yet, else a warning
// for the new database. Either way last_changed_at moves, so an
// acknowledgement of the feed no longer covers it. Unlike SetFeed, the
// address is not pinned.
func (s *Simulator) News(ctx context.Context, email, source string) (Alert, error) {
	i := slices.Index(breach.KnownSources, source)
	if i < 0 {
		return Alert{}, fmt.Errorf("source %q is not one of %s", source, strings.Join(breach.KnownSources, ", "))
	}
	s.mu.Lock()
	a, known := s.keys[0].lookup(email)
	if !known || !a.Verified || a.exact != nil {
		s.mu.Unlock()
		return Alert{}, fmt.Errorf("%s is not a verified address of the account", email)
	}
	f := a.feeds[i]
	before := f.clone()
	now := s.clock.Now().UTC().Truncate(time.Millisecond)
	s.gen.addPlaintextDB(f)
	f.scanned = true
	f.lastScanned, f.lastChanged = now, now
	alert := s.newAlert(a.Email, before, f, now)
	s.mu.Unlock()

	s.publish(ctx, s.keys[0], []Alert{alert})
	return alert, nil
}

// addPlaintextDB records the address in a new database that holds its
// password in plaintext.
func (g *generator) addPlaintextDB(f *feed) {
	f.records[g.newDBName(f)] = 1 + g.rnd.Intn(3)
	f.fields[fieldPassword] = true
	f.plaintext = true
}
