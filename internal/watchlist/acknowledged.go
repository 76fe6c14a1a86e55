// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"maps"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
)

// NoteAcknowledgements records, for every watched address, when this
// exporter first loaded each of its acknowledgements in s (nil: none):
// call it after every load of the acknowledgements file and the Sync that
// goes with it, with the load's time. An entry loaded before keeps its
// moment; one gone from the file is forgotten. An address discovered later
// gets s's entries at its discovery.
func (r *List) NoteAcknowledgements(s *acknowledge.Set, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = s
	for _, e := range r.entries {
		r.noteAcknowledgements(e, now)
	}
}

// noteAcknowledgements brings e's load moments in line with the
// acknowledgements in force. Called with r.mu held.
func (r *List) noteAcknowledgements(e *Entry, now time.Time) {
	var next map[acknowledge.Key]time.Time
	for _, a := range r.acks.ForAddress(e.Address.Key()) {
		k := a.Key()
		if next == nil {
			next = map[acknowledge.Key]time.Time{}
		}
		if _, dup := next[k]; dup {
			continue
		}
		t, ok := e.Acknowledged[k]
		if !ok {
			t = now
		}
		next[k] = t
	}
	if maps.Equal(next, e.Acknowledged) {
		return
	}
	e.Acknowledged = next
	r.generation++
	r.touch(e)
}
