// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/go-kit/log/level"
	"github.com/redis/go-redis/v9"
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
	// followSlack is how long past its BLOCK a read may take before the
	// store counts as down.
	followSlack = 3 * time.Second
)

// Publish appends an event to the stream and returns its ID.
func (s *Client) Publish(ctx context.Context, kind string, data []byte) (string, error) {
	id, err := s.rdb.XAdd(ctx, &redis.XAddArgs{
		Stream: s.key("events"),
		MaxLen: streamMax,
		Approx: true,
		Values: []any{"kind", kind, "origin", s.replica, "data", data},
	}).Result()
	if err = s.outcome(ctx, "publish", err); err != nil {
		return "", fmt.Errorf("store: publish: %w", err)
	}
	return id, nil
}

// Once is one event of PublishOnceBatch.
type Once struct {
	Digest string
	Kind   string
	Data   []byte
}

// PublishOnceBatch appends each event unless one with the same digest was
// published within ttl, in their order and in one round trip; ids[i] is
// events[i]'s ID in the stream, empty when it was such a duplicate. Atomic per event: of two
// replicas publishing one digest, one adds it. On an error none of them
// may be taken as published (some may be: publishing them again finds
// them duplicates).
func (s *Client) PublishOnceBatch(ctx context.Context, ttl time.Duration, events []Once) (ids []string, err error) {
	keys := make([]string, 0, 1+len(events))
	args := make([]any, 0, 3+2*len(events))
	keys = append(keys, s.key("events"))
	args = append(args, millis(ttl), streamMax, s.replica)
	for _, e := range events {
		keys = append(keys, s.key("seen", e.Digest))
		args = append(args, e.Kind, e.Data)
	}
	// Run falls back from EVALSHA to EVAL when a restarted store has lost
	// the script.
	ids, err = publishOnceScript.Run(ctx, s.rdb, keys, args...).StringSlice()
	if err == nil && len(ids) != len(events) {
		err = fmt.Errorf("%d replies for %d events", len(ids), len(events))
	}
	if err = s.outcome(ctx, "publish", err); err != nil {
		return nil, fmt.Errorf("store: publish: %w", err)
	}
	return ids, nil
}

// Last returns the ID of the newest event, "0-0" when there is none.
func (s *Client) Last(ctx context.Context) (string, error) {
	msgs, err := s.rdb.XRevRangeN(ctx, s.key("events"), "+", "-", 1).Result()
	if err = s.outcome(ctx, "read", err); err != nil {
		return "", fmt.Errorf("store: last event: %w", err)
	}
	if len(msgs) == 0 {
		return "0-0", nil
	}
	return msgs[0].ID, nil
}

// Read calls apply with every event after after up to and including
// until, in order, and returns the last ID applied (after when none).
func (s *Client) Read(ctx context.Context, after, until string, apply func(Event)) (string, error) {
	from := orZero(after)
	if until == "" {
		until = "+"
	}
	if err := s.checkGap(ctx, "read", from); err != nil {
		return after, fmt.Errorf("store: read: %w", err)
	}
	last := after
	for {
		msgs, err := s.rdb.XRangeN(ctx, s.key("events"), "("+from, until, page).Result()
		if err = s.outcome(ctx, "read", err); err != nil {
			return last, fmt.Errorf("store: read: %w", err)
		}
		for _, m := range msgs {
			apply(event(m))
			last, from = m.ID, m.ID
		}
		if len(msgs) < page {
			return last, nil
		}
	}
}

// Follow calls apply with every event after after, in order and never
// concurrently, until ctx ends; it reconnects with backoff when the store
// is down and goes on from the last event applied.
func (s *Client) Follow(ctx context.Context, after string, apply func(Event)) {
	last := orZero(after)
	checked := false
	failures := 0
	for ctx.Err() == nil {
		err := s.followOnce(ctx, &last, &checked, apply)
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		// After the store was gone, it may have trimmed past us meanwhile.
		checked = false
		t := time.NewTimer(backoff(failures))
		failures++
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// followOnce checks for a gap unless checked, then waits up to the block
// time for events after *last and applies them.
func (s *Client) followOnce(ctx context.Context, last *string, checked *bool, apply func(Event)) error {
	if !*checked {
		if err := s.checkGap(ctx, "follow", *last); err != nil {
			return err
		}
		*checked = true
	}
	// go-redis gives a blocking read BLOCK + 10 s on the socket; this
	// deadline notices a store that stopped answering sooner.
	rctx, cancel := context.WithTimeout(ctx, s.followBlock+followSlack)
	defer cancel()
	streams, err := s.rdb.XRead(rctx, &redis.XReadArgs{
		Streams: []string{s.key("events"), *last},
		Count:   page,
		Block:   s.followBlock,
	}).Result()
	if err = s.outcome(ctx, "follow", err); err != nil {
		return err
	}
	for _, st := range streams {
		for _, m := range st.Messages {
			apply(event(m))
			*last = m.ID
		}
	}
	return nil
}

// checkGap logs, once, and counts events trimmed or deleted from the
// stream that a reader at after has not read. The store reports the
// newest entry deleted (Redis 7, Valkey); the first entry left tells of
// trimming.
func (s *Client) checkGap(ctx context.Context, op, after string) error {
	info, err := s.rdb.XInfoStream(ctx, s.key("events")).Result()
	if err != nil && strings.Contains(err.Error(), "no such key") {
		return s.outcome(ctx, op, nil)
	}
	if err = s.outcome(ctx, op, err); err != nil {
		return err
	}
	a, _ := idOf(after)
	gap := false
	if deleted, ok := idOf(info.MaxDeletedEntryID); ok {
		gap = less(a, deleted)
	}
	if first, ok := idOf(info.FirstEntry.ID); ok && after != "0-0" {
		// after was read, so it existed: a later first entry means
		// trimming passed it, and maybe entries after it too.
		gap = gap || (less(a, first) && !next(a, first))
	}
	if !gap {
		return nil
	}
	s.gapMu.Lock()
	seen := s.gapAt == after
	s.gapAt = after
	s.gapMu.Unlock()
	if !seen {
		s.missed.Inc()
		level.Warn(s.logger).Log("msg", "The shared store trimmed events this replica had not read; the state it serves may miss some until they recur", "after", after)
	}
	return nil
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

func event(m redis.XMessage) Event {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	return Event{ID: m.ID, Kind: str("kind"), Origin: str("origin"), Data: []byte(str("data"))}
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
