// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The serving replica is the one whose state answers Prometheus' scrape of
// the cluster's series (/metrics?scope=cluster): one replica at a time, so
// that the per-address series reach Prometheus once and from one state.
// It holds a lease in the store (the key serving: its name and the URL the
// others pass the scrape to) and records, with every scrape it serves, the
// stream ID its state held (the key served): a replica that serves in its
// place, when it cannot be reached, first holds that much, so that no
// counter Prometheus read goes back.

// maxServingBytes bounds what the serving key may hold: a replica's name
// and a URL. Anything longer is not a lease a replica wrote.
const maxServingBytes = 4096

// Serving is the store's word on the serving replica.
type Serving struct {
	// Replica and URL name the lease's holder; both empty when nobody
	// holds it.
	Replica, URL string
	// Served is the stream ID the last scrape of the cluster's series
	// held; "" when none was recorded.
	Served string
}

// holdServingScript: KEYS serving, served, the lease's sig; ARGV
// replica, its URL, the lease (ms), '1' to take the lease when free (else
// only read it), the lease's sig (sign.go). The lease is renewed when
// this replica holds it, taken when nobody does. The sig is a key of its
// own, with the lease's expiry: the lease's value stays the one the
// release before read.
var holdServingScript = redis.NewScript(`
local me = ARGV[1] .. '\n' .. ARGV[2]
local v = redis.call('GET', KEYS[1])
if v == me or (not v and ARGV[4] == '1') then
  redis.call('SET', KEYS[1], me, 'PX', ARGV[3])
  if ARGV[5] ~= '' then redis.call('SET', KEYS[3], ARGV[5], 'PX', ARGV[3]) else redis.call('DEL', KEYS[3]) end
  v = me
end
return {v or '', redis.call('GET', KEYS[2]) or '', redis.call('GET', KEYS[3]) or ''}
`)

// releaseServingScript: KEYS serving, its sig; ARGV replica, its URL.
// The lease goes only when it is still this replica's.
var releaseServingScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] .. '\n' .. ARGV[2] then redis.call('DEL', KEYS[1], KEYS[2]) end
return 1
`)

// recordServedScript: KEYS served; ARGV the stream ID, ms and sequence
// apart. The key only moves forward: a scrape that raced another's
// never takes it back.
var recordServedScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  local ms, seq = string.match(v, '^(%d+)-(%d+)$')
  if ms and (tonumber(ms) > tonumber(ARGV[2]) or (tonumber(ms) == tonumber(ARGV[2]) and tonumber(seq) >= tonumber(ARGV[3]))) then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1])
return 1
`)

// HoldServing renews this replica's lease on serving, or takes it when
// nobody holds it and take is set, for lease; it returns who serves
// after that, and the stream ID last served. A replica that is not synced
// passes take false: it only learns whom to pass scrapes to.
func (s *Client) HoldServing(ctx context.Context, url string, lease time.Duration, take bool) (Serving, error) {
	t := "0"
	if take {
		t = "1"
	}
	vals, err := holdServingScript.Run(ctx, s.rdb, []string{s.key("serving"), s.key("served"), s.key("serving", sigField)},
		s.replica, url, millis(lease), t, s.sign(s.key("serving"), servingFields(s.replica, url)...)).StringSlice()
	if err = s.outcome(ctx, opServe, err); err != nil {
		return Serving{}, fmt.Errorf("store: serving: %w", err)
	}
	if len(vals) != 3 {
		return Serving{}, fmt.Errorf("store: serving: %d values in the answer, want 3", len(vals))
	}
	sv := parseServing(vals[0], vals[1])
	if sv.Replica != "" && !s.accepted(s.verify(vals[2], s.key("serving"), servingFields(sv.Replica, sv.URL)...), unverifiedServing, sv.Replica) {
		// As none: no scrape goes to a URL the deployment did not sign.
		sv.Replica, sv.URL = "", ""
	}
	return sv, nil
}

// servingFields are the signed fields of the serving lease.
func servingFields(replica, url string) []string {
	return []string{"replica", replica, "url", url}
}

// parseServing checks what the store holds as it would an API answer: a
// lease that is too long or has no URL, or a served ID that is not a
// stream ID, reads as none.
func parseServing(lease, served string) Serving {
	var sv Serving
	if replica, url, ok := strings.Cut(lease, "\n"); ok && len(lease) <= maxServingBytes && replica != "" &&
		(strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://")) {
		sv.Replica, sv.URL = replica, url
	}
	if _, _, ok := parseID(served); ok {
		sv.Served = served
	}
	return sv
}

// ReleaseServing gives this replica's lease back, so that another takes
// it at its next round rather than when the lease runs out.
func (s *Client) ReleaseServing(ctx context.Context, url string) error {
	err := releaseServingScript.Run(ctx, s.rdb, []string{s.key("serving"), s.key("serving", sigField)}, s.replica, url).Err()
	if err = s.outcome(ctx, opServe, err); err != nil {
		return fmt.Errorf("store: serving: %w", err)
	}
	return nil
}

// RecordServed records that a scrape of the cluster's series held the
// state up to stream ID id, unless a later one is recorded.
func (s *Client) RecordServed(ctx context.Context, id string) error {
	ms, seq, ok := parseID(id)
	if !ok {
		return fmt.Errorf("store: served: %q is not a stream ID", id)
	}
	err := recordServedScript.Run(ctx, s.rdb, []string{s.key("served")}, id, ms, seq).Err()
	if err = s.outcome(ctx, opServe, err); err != nil {
		return fmt.Errorf("store: served: %w", err)
	}
	return nil
}
