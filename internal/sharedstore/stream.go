// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/go-kit/log/level"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/ratelog"
)

const (
	// streamMax bounds the stream (trimmed approximately, which is cheap):
	// a replica that falls further behind than this misses events, and
	// says so (breach_exporter_store_events_missed_total).
	streamMax = 100000
	// page is how many events one read brings.
	page = 500
	// Follow's backoff while the store is down.
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

// aheadLimit is how far ahead of the store's clock a stream ID may be:
// beyond it, the entry (or a checkpoint, or a reader's place) would stall
// reading, and is removed or ignored. It is far above any skew of the
// store's clock a failover or an NTP step brings.
const aheadLimit = time.Hour

// The reasons of breach_exporter_store_stream_resets_total.
const (
	resetAhead     = "ahead"
	resetRecreated = "recreated"
)

// waitTimeout bounds a publish's wait for one of the store's replicas.
const waitTimeout = time.Second

// ErrNotReplicated is a publish the store took and none of its replicas
// acknowledged within waitTimeout: a failover now could lose it, so the
// caller keeps it and publishes it again (the store takes it for this
// replica's, and waits again).
var ErrNotReplicated = errors.New("store: none of the store's replicas acknowledged the publish in time")

// Publish appends an event to the stream and returns its ID.
func (s *Client) Publish(ctx context.Context, kind string, data []byte) (string, error) {
	sig := s.sign(s.key("events"), entryFields(kind, s.replica, s.identity, string(data))...)
	reply, err := s.run(ctx, publishScript, s.rdb, []string{s.key("events")},
		aheadLimit.Milliseconds(), streamMax, kind, s.replica, data, sig).StringSlice()
	if err == nil && len(reply) != 2 {
		err = fmt.Errorf("%d replies, want 2", len(reply))
	}
	if err = s.outcome(ctx, "publish", err); err != nil {
		return "", fmt.Errorf("store: publish: %w", err)
	}
	s.repaired(reply[1])
	s.wake()
	return reply[0], nil
}

// Once is one event of PublishOnceBatch.
type Once struct {
	Digest string
	Kind   string
	Data   []byte
}

// PublishOnceBatch appends each event unless one with the same digest was
// published within ttl, in their order and in one round trip; ids[i] is
// events[i]'s ID in the stream when this replica added it (now or in an
// earlier call), empty when another replica did. Atomic per event: of
// two replicas publishing one digest, one adds it. On an error none of
// them may be taken as published (some may be: publishing them again
// finds them). With the store's replicas online, it then waits for one
// of them to hold the batch: ErrNotReplicated, with the ids, when none
// did in time.
func (s *Client) PublishOnceBatch(ctx context.Context, ttl time.Duration, events []Once) (ids []string, err error) {
	keys := make([]string, 0, 1+len(events))
	args := make([]any, 0, 4+3*len(events))
	keys = append(keys, s.key("events"))
	args = append(args, millis(ttl), streamMax, s.replica, aheadLimit.Milliseconds())
	for _, e := range events {
		keys = append(keys, s.key("seen", e.Digest))
		args = append(args, e.Kind, e.Data, s.sign(keys[0], entryFields(e.Kind, s.replica, s.identity, string(e.Data))...))
	}
	// One connection for the script and the WAIT after it: WAIT counts
	// the writes of its own connection. On a cluster it is one to the
	// primary of the keys' slot, which has not the cluster client's gate:
	// its check and the stop's deadline are made here.
	ctx, cancel, err := gate{s}.admit(ctx)
	defer cancel()
	if err != nil {
		return nil, fmt.Errorf("store: publish: %w", err)
	}
	shard, err := s.shard(ctx)
	if err = s.outcome(ctx, "publish", err); err != nil {
		return nil, fmt.Errorf("store: publish: %w", err)
	}
	conn := shard.Conn()
	defer conn.Close()
	// Run falls back from EVALSHA to EVAL when a restarted store has lost
	// the script.
	reply, err := s.run(ctx, publishOnceScript, conn, keys, args...).StringSlice()
	if err == nil && len(reply) != len(events)+1 {
		err = fmt.Errorf("%d replies for %d events", len(reply), len(events))
	}
	if err = s.outcome(ctx, "publish", err); err != nil {
		return nil, fmt.Errorf("store: publish: %w", err)
	}
	s.repaired(reply[len(events)])
	s.wake()
	ids = reply[:len(events)]
	for i, id := range ids {
		ids[i] = strings.TrimPrefix(id, "=")
	}
	return ids, s.waitReplicas(ctx, conn)
}

// waitReplicas waits, up to waitTimeout, for one of the store's replicas
// to hold what conn wrote: replication is asynchronous, and a failover
// loses what the new primary did not get. Without replicas there is
// nothing to wait for; a store that refuses WAIT is said so once and not
// waited for again.
func (s *Client) waitReplicas(ctx context.Context, conn *redis.Conn) error {
	if s.storeReplicas.Load() == 0 || s.waitRefused.Load() {
		return nil
	}
	n, err := conn.Wait(ctx, 1, waitTimeout).Result()
	var reply redis.Error
	switch {
	case errors.As(err, &reply):
		if !s.waitRefused.Swap(true) {
			level.Warn(s.logger).Log("msg", "The store refuses WAIT: a publish does not wait for the store's replicas (a failover may lose the last alerts the journal released)", "err", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("store: wait: %w", s.outcome(ctx, "publish", err))
	case n < 1:
		return ErrNotReplicated
	}
	return nil
}

// repaired counts and logs entries a publish found far ahead of the
// store's clock and removed (n, from the script's reply).
func (s *Client) repaired(n string) {
	if n != "" && n != "0" {
		s.reset(resetAhead, "The store's stream held entries far ahead of the store's clock, which stall it; they were removed", n)
	}
}

// reset counts one reset of the stream and logs it, at most once per
// reason per logEvery.
func (s *Client) reset(reason, msg, what string) {
	s.resets.WithLabelValues(reason).Inc()
	if suppressed, ok := s.logs.Allow("reset-" + reason); ok {
		level.Warn(s.logger).Log("msg", msg, "at", what, ratelog.SuppressedKey, suppressed)
	}
}

// Last returns the ID of the newest event, "0-0" when there is none
// (streamState: the newest entry itself, which may be huge, is not read).
func (s *Client) Last(ctx context.Context) (string, error) {
	st, err := s.streamState(ctx, "read")
	if err != nil {
		return "", fmt.Errorf("store: last event: %w", err)
	}
	return st.top, nil
}

// Read calls apply with every event of this deployment (ours) after
// after up to and including until, in order, and returns the last ID
// applied (after when none).
// When the stream ends before after (deleted, emptied, rolled back), it
// reads from its end, and the first event it applies says so (Rewound).
func (s *Client) Read(ctx context.Context, after, until string, apply func(Event)) (string, error) {
	if until == "" {
		until = "+"
	}
	from, rewound, err := s.position(ctx, "read", orZero(after))
	if err != nil {
		return after, fmt.Errorf("store: read: %w", err)
	}
	last, ahead := after, false
	for {
		msgs, more, err := s.readPage(ctx, "read", from, until)
		if err != nil {
			return last, fmt.Errorf("store: read: %w", err)
		}
		for _, m := range msgs {
			from = m.ID
			if s.ahead(m.ID) {
				ahead = true // not applied: the repair below removes it
				continue
			}
			if !s.ours(m.XMessage) {
				continue
			}
			ev := event(m)
			ev.Rewound, rewound = rewound, false
			apply(ev)
			last = m.ID
		}
		if !more {
			break
		}
	}
	if ahead {
		if err := s.repairAhead(ctx, "read"); err != nil {
			return last, fmt.Errorf("store: read: %w", err)
		}
	}
	return last, nil
}

// Follow calls apply with every event of this deployment (ours) after
// after, in order and never concurrently, until ctx ends; it polls the
// stream, more often while entries come (read.go: why not a blocking
// read), and at once after this replica added to it (wake), reconnects
// with backoff when the store is down and goes on from the last event
// applied (or from the stream's end, when the stream ends before it: see
// Read).
func (s *Client) Follow(ctx context.Context, after string, apply func(Event)) {
	f := follower{last: orZero(after), apply: apply, every: s.pollEvery}
	failures := 0
	for ctx.Err() == nil {
		more, err := s.followOnce(ctx, &f)
		wait := f.every
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			// After the store was gone, it may have trimmed past us meanwhile.
			f.checked = false
			wait = backoff(failures)
			failures++
		case more:
			failures = 0
			continue
		default:
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.added:
			t.Stop()
		case <-t.C:
		}
	}
}

// wake tells Follow that this replica added to the stream. Until a
// replica has read its own event back it has not applied it, and the
// alert it carries stays in its journal (the exporter's mine.go); a
// blocking read closed that window at once, a poll would leave it open up
// to pollIdle.
func (s *Client) wake() {
	select {
	case s.added <- struct{}{}:
	default:
	}
}

// follower is where Follow is in the stream.
type follower struct {
	last    string
	checked bool          // the place was checked against the stream since the last failure or idle spell
	idle    time.Duration // polled for this long without an event since the place was checked
	every   time.Duration // the wait before the next poll: pollEvery, doubled by each that finds nothing up to pollIdle
	rewound bool          // the next event applied is the first after a rewind
	apply   func(Event)
}

// followOnce checks the place unless checked, then reads one page after
// it and applies it; more tells that the page stopped at a bound. Polls
// that bring nothing for recheckEvery check the place again: the stream
// may have been deleted meanwhile.
func (s *Client) followOnce(ctx context.Context, f *follower) (more bool, err error) {
	if !f.checked {
		last, rewound, err := s.position(ctx, "follow", f.last)
		if err != nil {
			return false, err
		}
		f.last, f.rewound, f.checked, f.idle = last, f.rewound || rewound, true, 0
	}
	msgs, more, err := s.readPage(ctx, "follow", f.last, "+")
	if err != nil {
		return false, err
	}
	if len(msgs) == 0 {
		f.every = min(2*f.every, s.pollIdle)
		if f.idle += f.every; f.idle >= s.recheckEvery {
			f.checked = false
		}
		return false, nil
	}
	f.idle, f.every = 0, s.pollEvery
	for _, m := range msgs {
		if s.ahead(m.ID) {
			// Not applied, and not passed: the repair removes it and
			// the stream goes on before it.
			f.checked = false
			return false, s.repairAhead(ctx, "follow")
		}
		if s.ours(m.XMessage) {
			ev := event(m)
			ev.Rewound, f.rewound = f.rewound, false
			f.apply(ev)
		}
		f.last = m.ID
	}
	return more, nil
}

// position checks a reader's place in the stream: a place after the
// stream's last ID (the stream was deleted, emptied, rolled back, or the
// place is far ahead) moves back to that ID, counted and logged; and a gap
// (see checkGap) is reported. It returns the place to read after and
// whether it moved back.
func (s *Client) position(ctx context.Context, op, after string) (string, bool, error) {
	st, err := s.streamState(ctx, op)
	if err != nil {
		return after, false, err
	}
	if after != "0-0" && After(after, st.last) {
		s.reset(resetRecreated, "The stream ends before this replica's place in it (deleted, emptied, rolled back, or a place far ahead); reading goes on from its end", after)
		return st.last, true, nil
	}
	s.checkGap(st, after)
	return after, false, nil
}

// streamInfo is what streamStateScript tells of the stream: its last
// generated ID, first entry, largest deleted ID and last entry.
type streamInfo struct {
	last, first, maxDeleted, top string
}

// streamState reads the stream's state and the store's clock, which
// keeps the offset of the store's clock (ahead).
func (s *Client) streamState(ctx context.Context, op string) (streamInfo, error) {
	reply, err := streamStateScript.Run(ctx, s.rdb, []string{s.key("events")}).StringSlice()
	if err == nil && len(reply) != 6 {
		err = fmt.Errorf("%d replies, want 6", len(reply))
	}
	if err = s.readOutcome(ctx, op, err); err != nil {
		return streamInfo{}, err
	}
	if ms, perr := strconv.ParseInt(reply[4], 10, 64); perr == nil {
		s.clockOffset.Store(ms - time.Now().UnixMilli())
	}
	if reply[0] == "0" {
		return streamInfo{last: "0-0", top: "0-0"}, nil
	}
	return streamInfo{last: reply[1], first: reply[2], maxDeleted: reply[3], top: reply[5]}, nil
}

// ahead reports whether id is far ahead of the store's clock (as last
// read, streamState).
func (s *Client) ahead(id string) bool {
	return idAhead(id, time.Now().Add(time.Duration(s.clockOffset.Load())*time.Millisecond))
}

// idAhead reports whether id is more than aheadLimit after now.
func idAhead(id string, now time.Time) bool {
	ms, _, ok := parseID(id)
	return ok && ms > uint64(max(now.Add(aheadLimit).UnixMilli(), 0))
}

// repairAhead has the store remove the entries far ahead of its clock
// (repairScript), counted and logged.
func (s *Client) repairAhead(ctx context.Context, op string) error {
	n, err := s.run(ctx, repairScript, s.rdb, []string{s.key("events")}, aheadLimit.Milliseconds()).Int64()
	if err = s.outcome(ctx, op, err); err != nil {
		return err
	}
	if n > 0 {
		s.reset(resetAhead, "The store's stream held entries far ahead of the store's clock, which stall it; they were removed", strconv.FormatInt(n, 10))
	}
	return nil
}

// checkGap logs, once, and counts events trimmed or deleted from the
// stream that a reader at after has not read. The store reports the
// newest entry deleted (Redis 7, Valkey); the first entry left tells of
// trimming.
func (s *Client) checkGap(st streamInfo, after string) {
	a, _ := idOf(after)
	gap := false
	if deleted, ok := idOf(st.maxDeleted); ok {
		gap = less(a, deleted)
	}
	if first, ok := idOf(st.first); ok && after != "0-0" {
		// after was read, so it existed: a later first entry means
		// trimming passed it, and maybe entries after it too.
		gap = gap || (less(a, first) && !next(a, first))
	}
	if !gap {
		return
	}
	s.gapMu.Lock()
	seen := s.gapAt == after
	s.gapAt = after
	s.gapMu.Unlock()
	if !seen {
		s.missed.Inc()
		level.Warn(s.logger).Log("msg", "The shared store trimmed events this replica had not read; the state it serves may miss some until they recur", "after", after)
	}
}

// After reports whether stream ID a comes after b, as pairs of numbers
// (as strings "9-0" would sort after "10-0"); an empty or malformed ID
// comes before every other.
func After(a, b string) bool {
	x, _ := idOf(a)
	y, _ := idOf(b)
	return less(y, x)
}

func idOf(id string) ([2]uint64, bool) {
	ms, seq, ok := parseID(id)
	return [2]uint64{ms, seq}, ok
}

func less(a, b [2]uint64) bool { return a[0] < b[0] || (a[0] == b[0] && a[1] < b[1]) }

// next reports whether b is the ID right after a (nothing can lie between).
func next(a, b [2]uint64) bool { return a[0] == b[0] && a[1]+1 == b[1] }

func orZero(id string) string {
	if id == "" {
		return "0-0"
	}
	return id
}

func event(m entry) Event {
	if m.oversized > 0 {
		return Event{ID: m.ID, Oversized: m.oversized}
	}
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	ev := Event{ID: m.ID, Kind: str("kind"), Origin: str("origin"), Data: []byte(str("data"))}
	prev := str("prev")
	if _, _, ok := parseID(prev); ok && After(m.ID, prev) {
		ev.Prev = prev
	}
	return ev
}

// backoff is the wait after the nth failure in a row: doubling from
// backoffMin to backoffMax, each drawn between half and all of it so that
// replicas that lost the store together do not return together.
func backoff(n int) time.Duration {
	d := backoffMax
	if n < 16 {
		d = min(backoffMin<<n, backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}
