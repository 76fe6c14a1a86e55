// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"math"
	"time"
)

// Continuity is what replicas of one store pass on besides Saved, so that a
// replica that starts from the store's checkpoint serves what the others
// serve: whether each account's key worked at its last /me, and each
// address's news (what its answers added). A replica alone does not keep
// them: its restart asks /me again and counts news afresh.
type Continuity struct {
	Up   map[string]bool // by account; only the accounts whose Known is set
	News map[string]News // by key; addresses without news are left out
}

// SaveContinuity returns the watchlist's Continuity.
func (r *List) SaveContinuity() Continuity {
	r.mu.RLock()
	defer r.mu.RUnlock()
	c := Continuity{Up: make(map[string]bool, len(r.accounts)), News: map[string]News{}}
	for name, a := range r.accounts {
		if a.info.Known {
			c.Up[name] = a.info.Up
		}
	}
	for k, e := range r.entries {
		if e.News != (News{}) {
			c.News[k] = e.News
		}
	}
	return c
}

// RestoreContinuity takes c over: for the accounts and addresses watched;
// news that is negative or not finite is left out.
func (r *List) RestoreContinuity(c Continuity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, up := range c.Up {
		if a := r.known(name); a != nil {
			a.info.Up, a.info.Known = up, true
		}
	}
	for k, n := range c.News {
		e := r.entries[k]
		if e == nil || !validNews(n.NewDatabases) || !validNews(n.SensitiveFields) {
			continue
		}
		e.News = n
		r.touch(e)
	}
}

func validNews(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// Replace drops every address and takes s instead, as Restore does an
// empty watchlist's: a replica that resyncs with the store's checkpoint.
// In one step: a scrape sees the state before or after it. The accounts
// keep whether their key works (RestoreContinuity, or the next /me, says
// it again); the caller syncs the watchlist with the config after it.
func (r *List) Replace(s Saved, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := make(map[string]Account, len(r.accounts))
	for name, a := range r.accounts {
		was[name] = a.info
	}
	for k, e := range r.entries {
		r.remove(k, e)
	}
	r.discovered = 0
	r.restore(s, now)
	for name, a := range r.accounts {
		a.info.Up, a.info.Known = was[name].Up, was[name].Known
	}
}
