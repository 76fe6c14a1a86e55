// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"time"

	"github.com/go-kit/log/level"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/ratelog"
)

// What a replica reads from the stream is bounded before it leaves the
// store, not after: a client library reads a reply whole, so an entry of
// 100 MB that anyone who reaches the store added (XADD) would cost every
// replica 100 MB of memory before any check of its size could refuse it.
// So entries are never read with XRANGE or XREAD directly: readScript
// reads them on the store and sends each entry whose fields and values
// exceed MaxEventBytes as its ID and size only, and stops a page once it holds
// maxPageBytes. A replica so never receives more than about
// maxPageBytes+MaxEventBytes per read, whatever the stream holds.
//
// Follow therefore polls (readScript) instead of blocking in XREAD: a
// blocking read returns the entries it waited for, whole, and no blocking
// command of Redis returns only that something changed (XREAD, BLPOP,
// pub/sub and keyspace notifications all bring data anyone with the
// store's password can make huge, or need CONFIG). The poll adapts: every
// pollEvery while entries come, doubling after each read that finds none
// up to pollIdle; at once after this replica added to the stream (Follow's
// wake), which reads its own event back within a millisecond. An idle
// replica so costs the store 4 reads a second of some 45 µs each (and a
// check of its place every 2 s), not the 20 of a fixed pollEvery, and
// another replica's event reaches it within pollIdle after a quiet spell
// (measured: a median of 147 ms), within pollEvery during a burst (31 ms).

// MaxEventBytes bounds one stream entry, its fields and values (the
// event's data, kind, origin and deployment) together: of an entry over
// it the store sends only its size (Event.Oversized). The largest event an
// exporter writes is an answer with a feed's 1,000 database names of 256
// bytes (breach.MaxDatabaseBytes), about a quarter of it.
const MaxEventBytes = 1 << 20

const (
	// pollEvery is how often Follow reads the stream while entries come;
	// pollIdle the longest its wait grows to while none do: an event
	// reaches the other replicas within it.
	pollEvery = 50 * time.Millisecond
	pollIdle  = 250 * time.Millisecond
	// maxPageBytes bounds the values one read brings: a page stops once
	// it holds this much, so 500 entries just under MaxEventBytes come
	// over several reads, not in one reply of 500 MiB.
	maxPageBytes = 4 << 20
	// scanChunk is how many entries readScript takes from the stream at a
	// time: it holds them all in the store's memory for a moment, whole.
	scanChunk = 16
)

// readScript: KEYS the stream; ARGV the start (exclusive, "(id"), the
// end, the most entries, MaxEventBytes, maxPageBytes. Replies whether the
// page stopped at a bound before the end (1: read on), then per entry
// {ID, its size (fields and values) when over MaxEventBytes, and then
// nothing more, or 0 and the field/value list}. Read-only: it needs no deployment guard.
var readScript = redis.NewScript(`
local from, to = ARGV[1], ARGV[2]
local count, maxEntry, maxPage = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local out, bytes, more = {0}, 0, 0
while more == 0 do
  local want = math.min(count - (#out - 1), ` + fmt.Sprint(scanChunk) + `)
  local got = redis.call('XRANGE', KEYS[1], from, to, 'COUNT', want)
  for _, e in ipairs(got) do
    from = '(' .. e[1]
    local size = 0
    for _, v in ipairs(e[2]) do size = size + #v end
    if size > maxEntry then
      out[#out + 1] = {e[1], size}
    else
      out[#out + 1] = {e[1], 0, e[2]}
      bytes = bytes + size
    end
    if #out - 1 >= count or bytes >= maxPage then
      more = 1
      break
    end
  end
  if #got < want then break end
end
out[1] = more
return out
`)

// entry is one entry readScript sent.
type entry struct {
	redis.XMessage
	oversized int64 // its size, when over MaxEventBytes: Values is empty
}

// readPage reads up to page entries after from (exclusive) up to and
// including until, bounded (readScript); more tells that it stopped at a
// bound, not at until. A page holds at most maxPageBytes+MaxEventBytes.
func (s *Client) readPage(ctx context.Context, op, from, until string) (entries []entry, more bool, err error) {
	reply, err := readScript.Run(ctx, s.rdb, []string{s.key("events")}, "("+from, until, page, MaxEventBytes, maxPageBytes).Slice()
	if err = s.readOutcome(ctx, op, err); err != nil {
		return nil, false, err
	}
	if len(reply) == 0 {
		return nil, false, fmt.Errorf("an empty reply to a read")
	}
	more = reply[0] == int64(1)
	entries = make([]entry, 0, len(reply)-1)
	for _, r := range reply[1:] {
		e, err := parseEntry(r)
		if err != nil {
			return nil, false, err
		}
		entries = append(entries, e)
	}
	return entries, more, nil
}

// parseEntry reads one entry of readScript's reply.
func parseEntry(r any) (entry, error) {
	parts, _ := r.([]any)
	if len(parts) < 2 {
		return entry{}, fmt.Errorf("an entry of %d parts in a read", len(parts))
	}
	id, _ := parts[0].(string)
	size, _ := parts[1].(int64)
	e := entry{XMessage: redis.XMessage{ID: id}, oversized: size}
	if size > 0 || len(parts) < 3 {
		return e, nil
	}
	fields, _ := parts[2].([]any)
	e.Values = make(map[string]any, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		if k, ok := fields[i].(string); ok {
			e.Values[k] = fields[i+1]
		}
	}
	return e, nil
}

// maxItemBytes bounds an item of a ready hash (Prune) as the store sends
// it: the items are digests and "me", far shorter. A longer one is no
// item of any replica's; it is not sent, and is logged.
const maxItemBytes = 256

// scanReadyScript: KEYS a ready hash; ARGV the cursor, the page size,
// maxItemBytes. Replies the next cursor, how many items over the bound it
// left out, and the items: never their values, which Prune does not use.
// Read-only: it needs no deployment guard.
var scanReadyScript = redis.NewScript(`
local r = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
local out, kv, max = {r[1], 0}, r[2], tonumber(ARGV[3])
for i = 1, #kv - 1, 2 do
  if #kv[i] <= max then out[#out + 1] = kv[i] else out[2] = out[2] + 1 end
end
return out
`)

// scanReady reads one page of scope's ready hash's items from cursor,
// bounded (scanReadyScript), and the cursor to read on from ("0": done).
func (s *Client) scanReady(ctx context.Context, scope, cursor string) (items []string, next string, err error) {
	reply, err := scanReadyScript.Run(ctx, s.rdb, []string{s.key("ready", scope)}, cursor, forgetBatch, maxItemBytes).Slice()
	if err = s.outcome(ctx, "release", err); err != nil {
		return nil, "", err
	}
	if len(reply) < 2 {
		return nil, "", fmt.Errorf("%d values in a scan, want 2 or more", len(reply))
	}
	next, _ = reply[0].(string)
	if n, _ := reply[1].(int64); n > 0 {
		if suppressed, ok := s.logs.Allow("ready-oversized"); ok {
			level.Warn(s.logger).Log("msg", "The store's ready times hold items longer than any replica writes; they were not read", "items", n, ratelog.SuppressedKey, suppressed)
		}
	}
	for _, v := range reply[2:] {
		if item, ok := v.(string); ok {
			items = append(items, item)
		}
	}
	return items, next, nil
}
