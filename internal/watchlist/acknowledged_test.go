// SPDX-License-Identifier: Apache-2.0

package watchlist

import (
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// The moments of the acknowledgements are the exporter's: a feed's change
// counts when first seen, a critical webhook when accepted, an
// acknowledgement when first loaded; all of them survive Save and Restore.
func TestAcknowledgementMoments(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	r := New()
	r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 10)
	key := breach.Key("a@example.com")
	feeds := func(changed time.Time) []breach.SourceState {
		return []breach.SourceState{{Source: "combolist", LastChangedAt: changed}, {Source: "paste", LastChangedAt: t0.Add(time.Hour)}}
	}
	r.Answered(key, breach.Verified, feeds(t0.Add(-time.Hour)), t0)
	r.Answered(key, breach.Verified, feeds(t0.Add(-time.Hour)), t0.Add(time.Minute)) // unchanged
	r.Answered(key, breach.Verified, feeds(t0.Add(-30*time.Minute)), t0.Add(2*time.Minute))
	r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: "index", Severity: breach.Critical, AcceptedAt: t0.Add(3 * time.Minute)})
	acks, err := acknowledge.Parse([]byte("acknowledgements:\n  - address: a@example.com\n    handled_at: 2026-11-22T06:04:00Z\n    by: x\n"), t0)
	if err != nil {
		t.Fatal(err)
	}
	r.NoteAcknowledgements(acks, t0.Add(2*time.Minute))
	r.NoteAcknowledgements(acks, t0.Add(5*time.Minute)) // loaded again: the first moment stays

	want := map[string]FeedMoments{
		// seen changed at 2m, whatever its stamp
		"combolist": {LastChangedAt: t0.Add(-30 * time.Minute), ChangeSeen: t0.Add(2 * time.Minute)},
		// first seen with a stamp ahead of the exporter's clock: seen then
		"paste": {LastChangedAt: t0.Add(time.Hour), ChangeSeen: t0},
		"index": {Critical: t0.Add(3 * time.Minute)},
	}
	wantAcks := map[acknowledge.Key]time.Time{{HandledAt: t0.Add(4 * time.Minute)}: t0.Add(2 * time.Minute)}
	check := func(step string, e Entry) {
		t.Helper()
		for s, m := range want {
			got := e.Feeds[s]
			if !got.LastChangedAt.Equal(m.LastChangedAt) || !got.ChangeSeen.Equal(m.ChangeSeen) || !got.Critical.Equal(m.Critical) {
				t.Errorf("%s: %s moments %+v, want %+v", step, s, got, m)
			}
		}
		for k, at := range wantAcks {
			if got := e.Acknowledged[k]; !got.Equal(at) {
				t.Errorf("%s: acknowledgement %+v loaded at %v, want %v", step, k, got, at)
			}
		}
	}
	check("live", r.View().Entries[0])

	saved, _ := r.Save()
	restored := New()
	restored.Restore(saved, t0.Add(10*time.Minute))
	check("restored", restored.View().Entries[0])

	// A snapshot from before the moments (format version 2): the feeds
	// are seen for the first time at the start.
	saved.Entries[0].Feeds, saved.Entries[0].Acknowledged = nil, nil
	old := New()
	old.Restore(saved, t0.Add(10*time.Minute))
	e := old.View().Entries[0]
	if got := e.Feeds["combolist"].ChangeSeen; !got.Equal(t0.Add(-30 * time.Minute)) {
		t.Errorf("from a v2 snapshot: combolist seen %v, want its last_changed_at", got)
	}
	if got := e.Feeds["paste"].ChangeSeen; !got.Equal(t0.Add(10 * time.Minute)) {
		t.Errorf("from a v2 snapshot: paste (stamped ahead) seen %v, want the start", got)
	}
}

// A critical webhook pages at once; the read of the change it announced
// waits for the budget (behind other addresses' refreshes: seen in the
// owners end-to-end test as the read coming 19 s later). An acknowledgement
// of the page loaded in between covers that change when the read shows it:
// the exporter saw the change when it accepted the webhook. A later change
// the webhook did not announce, and one from a webhook without an
// observed_at in bounds, count as seen at the read.
func TestAcknowledgementCoversChangeReadAfterItsWebhook(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC)
	key := breach.Key("a@example.com")
	feed := func(changed time.Time) []breach.SourceState {
		return []breach.SourceState{{Source: "index", LastChangedAt: changed, HasPlaintextPassword: true}}
	}
	acks, err := acknowledge.Parse([]byte("acknowledgements:\n  - address: a@example.com\n    source: index\n    handled_at: 2026-11-22T06:00:20Z\n    by: x\n"), t0)
	if err != nil {
		t.Fatal(err)
	}
	setUp := func(observed time.Time) *List {
		r := New()
		r.Sync(nil, []breach.Address{{Email: "a@example.com"}}, breach.LabelEmail, 10)
		r.Answered(key, breach.Verified, feed(t0.Add(-time.Hour)), t0)
		// The change, stamped 06:00:09.400 by the service; its webhook
		// says 06:00:09 (whole seconds) and is accepted at 06:00:10.
		r.RecordAlert(breach.DefaultAccount, "a@example.com", AlertDelta{Source: "index", Severity: breach.Critical,
			ObservedAt: observed, AcceptedAt: t0.Add(10 * time.Second)})
		r.NoteAcknowledgements(acks, t0.Add(21*time.Second))
		return r
	}
	covers := func(r *List) (time.Time, bool) {
		t.Helper()
		e := r.View().Entries[0]
		a, ok := acks.For(key, "index")
		if !ok {
			t.Fatal("no acknowledgement for the feed")
		}
		m := e.Feeds["index"]
		_, c := a.Covers(e.Acknowledged[a.Key()], m.ChangeSeen, m.Critical)
		return m.ChangeSeen, c
	}
	changed := t0.Add(9400 * time.Millisecond)

	r := setUp(t0.Add(9 * time.Second))
	r.Answered(key, breach.Verified, feed(changed), t0.Add(40*time.Second))
	if seen, c := covers(r); !c || !seen.Equal(t0.Add(10*time.Second)) {
		t.Errorf("announced change read after the acknowledgement: seen %v, covered %v; want seen at the webhook (%v), covered", seen, c, t0.Add(10*time.Second))
	}
	// A change after the one announced, read after the acknowledgement.
	r.Answered(key, breach.Verified, feed(t0.Add(50200*time.Millisecond)), t0.Add(60*time.Second))
	if seen, c := covers(r); c || !seen.Equal(t0.Add(60*time.Second)) {
		t.Errorf("later change: seen %v, covered %v; want seen at the read (%v), not covered", seen, c, t0.Add(60*time.Second))
	}

	// Without an observed_at in bounds the exporter cannot tell which
	// change the webhook announced: seen at the read.
	r = setUp(time.Time{})
	r.Answered(key, breach.Verified, feed(changed), t0.Add(40*time.Second))
	if seen, c := covers(r); c || !seen.Equal(t0.Add(40*time.Second)) {
		t.Errorf("webhook without observed_at: seen %v, covered %v; want seen at the read, not covered", seen, c)
	}
}
