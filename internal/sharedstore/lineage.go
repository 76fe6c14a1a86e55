// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The checkpoint is one hash: id (the last event it holds), data (the
// state), and from the release with lineages on, lineage (which history
// it belongs to) and extra (state the previous release's data has no room
// for). A previous release writes id and data only; it reads those two.
// From the release with parts on (parts.go), the state is in parts of
// their own keys, data holds a note the previous release refuses, and
// parts_id says which id the parts hold: a previous release's write of id
// and data leaves it behind, and its data is read then.

// Checkpoint is a checkpoint as stored.
type Checkpoint struct {
	ID      string
	Lineage string
	Data    []byte // the state whole, as the previous release writes it
	Extra   []byte
	// Parts is the state in parts (when Data is not): what LoadCheckpoint
	// found, with Gen, the write of the parts they are of (ReadParts); or
	// what WriteCheckpoint writes, sending Body only for the parts whose
	// digest the store does not hold.
	Parts []Part
	Gen   int64
	Body  func(name string) ([]byte, error)
}

// Head is what a replica checks about the store without fetching a
// checkpoint's data: the checkpoint's ID, lineage and size, and where the
// stream stands, on the store's clock.
type Head struct {
	HasCheckpoint bool
	ID, Lineage   string
	Size          int64 // of data and extra together

	// The stream: whether it exists, its first and last entries, the
	// newest ID it ever gave, the newest entry deleted, how many entries
	// it ever added and holds.
	Stream                 bool
	First, Last, LastGiven string
	MaxDeleted             string
	Added, Length          int64
	Now                    time.Time

	// SyncedAlive: a replica that holds the cluster's history said so
	// within its MarkSynced's ttl.
	SyncedAlive bool
}

// headScript: KEYS checkpoint hash, stream, synced key. One round trip,
// no entry's data: XINFO STREAM's first and last entries are reduced to
// their IDs, so a forged huge entry costs nothing here.
var headScript = redis.NewScript(`
local h = redis.call('HMGET', KEYS[1], 'id', 'lineage', 'parts_id', 'parts_size')
` + luaCheckpointSize + `
local t = redis.call('TIME')
local out = {h[1] or '', h[2] or '', size, t[1], t[2], 0, '', '', '', '', 0, 0, redis.call('EXISTS', KEYS[3])}
if redis.call('TYPE', KEYS[2]).ok == 'stream' then
  out[6] = 1
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  for i = 1, #info, 2 do
    local k, v = info[i], info[i + 1]
    if k == 'first-entry' and type(v) == 'table' then out[7] = v[1]
    elseif k == 'last-entry' and type(v) == 'table' then out[8] = v[1]
    elseif k == 'last-generated-id' then out[9] = v
    elseif k == 'max-deleted-entry-id' then out[10] = v
    elseif k == 'entries-added' then out[11] = v
    elseif k == 'length' then out[12] = v
    end
  end
end
return out
`)

// Head returns the checkpoint's head and the stream's bounds.
func (s *Client) Head(ctx context.Context) (Head, error) {
	vals, err := headScript.Run(ctx, s.rdb, []string{s.key("checkpoint"), s.key("events"), s.key("synced")}).Slice()
	if err = s.readOutcome(ctx, "checkpoint", err); err != nil {
		return Head{}, fmt.Errorf("store: checkpoint: %w", err)
	}
	if len(vals) != 13 {
		return Head{}, fmt.Errorf("store: checkpoint: %d values in the head, want 13", len(vals))
	}
	str := func(i int) string { v, _ := vals[i].(string); return v }
	num := func(i int) int64 {
		switch v := vals[i].(type) {
		case int64:
			return v
		case string:
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
		return 0
	}
	h := Head{
		HasCheckpoint: str(0) != "", ID: str(0), Lineage: str(1), Size: num(2),
		Now:    time.Unix(num(3), num(4)*1000),
		Stream: num(5) == 1, First: str(6), Last: str(7), LastGiven: str(8), MaxDeleted: str(9),
		Added: num(10), Length: num(11), SyncedAlive: num(12) == 1,
	}
	return h, nil
}

// MarkSynced tells the others, for ttl, that a replica holds the
// cluster's history: one that does not waits for its checkpoint rather
// than start a history of its own.
func (s *Client) MarkSynced(ctx context.Context, ttl time.Duration) error {
	err := s.rdb.Set(ctx, s.key("synced"), s.replica, ttl).Err()
	if err = s.outcome(ctx, "checkpoint", err); err != nil {
		return fmt.Errorf("store: synced: %w", err)
	}
	return nil
}

// ErrCheckpointTooLarge is LoadCheckpoint's answer for a checkpoint over
// its bound: its data was not fetched.
var ErrCheckpointTooLarge = errors.New("store: the checkpoint is larger than its bound")

// loadCheckpointScript: KEYS checkpoint hash, its parts' digests; ARGV
// the bound in bytes, the most parts. The data is sent only within the
// bound: the whole data, or the parts' names and digests (their bytes come
// with ReadParts).
var loadCheckpointScript = redis.NewScript(luaScan + `
local h = redis.call('HMGET', KEYS[1], 'id', 'lineage', 'parts_id', 'parts_size', 'parts_gen')
if not h[1] then return {} end
` + luaCheckpointSize + `
if size > tonumber(ARGV[1]) then return {h[1], h[2] or '', size} end
if h[3] == h[1] then
  local out = {h[1], h[2] or '', size, '', redis.call('HGET', KEYS[1], 'extra') or '', h[5] or '0'}
  if not scan(KEYS[2], out, tonumber(ARGV[2])) then return {h[1], h[2] or '', size} end
  return out
end
local d = redis.call('HMGET', KEYS[1], 'data', 'extra')
return {h[1], h[2] or '', size, d[1] or '', d[2] or ''}
`)

// LoadCheckpoint returns the checkpoint when its data (or parts) and
// extra together are at most maxBytes and it has at most
// MaxCheckpointParts parts (ErrCheckpointTooLarge otherwise, without
// them); ok is false when there is none. The parts' bytes are ReadParts'.
func (s *Client) LoadCheckpoint(ctx context.Context, maxBytes int64) (c Checkpoint, ok bool, err error) {
	vals, err := loadCheckpointScript.Run(ctx, s.rdb, []string{s.key("checkpoint"), s.key("checkpoint", "digests")}, maxBytes, MaxCheckpointParts).Slice()
	if err = s.readOutcome(ctx, "checkpoint", err); err != nil {
		return Checkpoint{}, false, fmt.Errorf("store: checkpoint: %w", err)
	}
	if len(vals) == 0 {
		return Checkpoint{}, false, nil
	}
	str := func(i int) string {
		if i >= len(vals) {
			return ""
		}
		v, _ := vals[i].(string)
		return v
	}
	c = Checkpoint{ID: str(0), Lineage: str(1)}
	switch {
	case len(vals) < 5:
		return c, true, ErrCheckpointTooLarge
	case len(vals) == 5:
		c.Data, c.Extra = []byte(str(3)), []byte(str(4))
		return c, true, nil
	}
	c.Extra = []byte(str(4))
	c.Gen, _ = strconv.ParseInt(str(5), 10, 64)
	c.Parts = make([]Part, 0, (len(vals)-6)/2)
	for i := 6; i+1 < len(vals); i += 2 {
		c.Parts = append(c.Parts, Part{Name: str(i), Digest: str(i + 1)})
	}
	return c, true, nil
}

// luaCheckpointAllowed defines allowed(key, id, lineage, replace): whether
// a checkpoint at id of lineage may be written over the one in the hash
// key. It may when there is none, when the one there is replace's (an ID
// the caller found invalid), or when it is of the same lineage and holds
// no later event. Stream IDs compare as (milliseconds, sequence) pairs of
// numbers: as strings "9-0" would sort after "10-0".
const luaCheckpointAllowed = `
local function allowed(key, id, lineage, replace)
  local nm, ns = string.match(id, '^(%d+)%-(%d+)$')
  if not nm then error('not a stream ID') end
  local cur = redis.call('HMGET', key, 'id', 'lineage')
  if not cur[1] or (replace ~= '' and cur[1] == replace) then return true end
  if (cur[2] or '') ~= lineage then return false end
  local cm, cs = string.match(cur[1], '^(%d+)%-(%d+)$')
  if not cm then return true end
  nm, ns, cm, cs = tonumber(nm), tonumber(ns), tonumber(cm), tonumber(cs)
  return not (nm < cm or (nm == cm and ns < cs))
end
`

// Ahead reports whether stream ID id is more than by after now, or is
// not a stream ID: an ID no event of the store's clock can reach soon.
func Ahead(id string, now time.Time, by time.Duration) bool {
	ms, _, ok := parseID(id)
	limit := now.Add(by).UnixMilli()
	return !ok || limit < 0 || ms > uint64(limit)
}

// Adjacent reports whether b is the ID right after a.
func Adjacent(a, b string) bool {
	x, okA := idOf(a)
	y, okB := idOf(b)
	return okA && okB && next(x, y)
}

// Before reports whether stream ID a comes before b (After(b, a)).
func Before(a, b string) bool { return After(b, a) }
