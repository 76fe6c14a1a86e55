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
// it belongs to), extra (state the previous release's data has no room
// for) and deployment (the identity of the deployment that wrote it). A
// previous release writes id and data only; it reads those two. A
// checkpoint without a deployment is taken as this deployment's.

// Checkpoint is a checkpoint as stored.
type Checkpoint struct {
	ID      string
	Lineage string
	Data    []byte
	Extra   []byte
	// New marks, on a write, the first checkpoint of a lineage the writer
	// started (not read back): it may replace a checkpoint of From, the
	// lineage the writer's state descended from ("" none), or of another
	// lineage that holds an earlier event (writeCheckpointScript).
	New  bool
	From string
}

// Head is what a replica checks about the store without fetching a
// checkpoint's data: the checkpoint's ID, lineage and size, and where the
// stream stands, on the store's clock.
type Head struct {
	HasCheckpoint bool
	ID, Lineage   string
	Size          int64 // of data and extra together
	// Foreign: the checkpoint is another deployment's (counted and
	// logged once): it is not to be loaded, and may be written over.
	Foreign bool

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

// maxHeadBytes bounds each of the checkpoint's id, lineage and
// deployment members as sent by the store: a stream ID has at most 41
// bytes, a lineage 32 and store.deployment 64. One over it is sent as
// luaHead's marker, "(N bytes)": not a stream ID, so the checkpoint is
// found invalid, and the same marker names it when a synced replica
// writes over it (writeCheckpointScript's replace). Data and extra are
// bounded by their own sizes (HSTRLEN) before they are sent.
const maxHeadBytes = 256

// luaHead reads the checkpoint's id, lineage and deployment, each bounded
// by maxHeadBytes, into h.
var luaHead = `
local h = redis.call('HMGET', KEYS[1], 'id', 'lineage', 'deployment')
for i = 1, 3 do
  if h[i] and #h[i] > ` + strconv.Itoa(maxHeadBytes) + ` then h[i] = '(' .. #h[i] .. ' bytes)' end
end
`

// headScript: KEYS checkpoint hash, stream, synced key. One round trip,
// no entry's data: XINFO STREAM's first and last entries are reduced to
// their IDs, so a forged huge entry costs nothing here.
var headScript = redis.NewScript(luaHead + `
local size = redis.call('HSTRLEN', KEYS[1], 'data') + redis.call('HSTRLEN', KEYS[1], 'extra')
local t = redis.call('TIME')
local out = {h[1] or '', h[2] or '', size, t[1], t[2], 0, '', '', '', '', 0, 0, redis.call('EXISTS', KEYS[3]), h[3] or ''}
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
	if len(vals) != 14 {
		return Head{}, fmt.Errorf("store: checkpoint: %d values in the head, want 14", len(vals))
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
	if theirs := str(13); h.HasCheckpoint && !s.of(theirs) {
		h.Foreign = true
		s.foreignCheckpoint(h.ID, theirs)
	}
	return h, nil
}

// MarkSynced tells the others, for ttl, that a replica holds the
// cluster's history: one that does not waits for its checkpoint rather
// than start a history of its own.
func (s *Client) MarkSynced(ctx context.Context, ttl time.Duration) error {
	err := s.run(ctx, markSyncedScript, s.rdb, []string{s.key("synced")}, s.replica, millis(ttl)).Err()
	if err = s.outcome(ctx, "checkpoint", err); err != nil {
		return fmt.Errorf("store: synced: %w", err)
	}
	return nil
}

// ErrCheckpointTooLarge is LoadCheckpoint's answer for a checkpoint over
// its bound: its data was not fetched.
var ErrCheckpointTooLarge = errors.New("store: the checkpoint is larger than its bound")

// ErrForeignCheckpoint is LoadCheckpoint's answer for a checkpoint of
// another deployment: its data was not fetched.
var ErrForeignCheckpoint = errors.New("store: the checkpoint is another deployment's")

// loadCheckpointScript: KEYS checkpoint hash; ARGV the bound in bytes,
// this deployment's identity. The data is sent only within the bound, and
// only of a checkpoint of this deployment (or of none: the previous
// release's).
var loadCheckpointScript = redis.NewScript(luaHead + `
if not h[1] then return {} end
local dep = h[3] or ''
if dep ~= '' and dep ~= ARGV[2] then return {h[1], h[2] or '', dep} end
local size = redis.call('HSTRLEN', KEYS[1], 'data') + redis.call('HSTRLEN', KEYS[1], 'extra')
if size > tonumber(ARGV[1]) then return {h[1], h[2] or '', dep, size} end
local d = redis.call('HMGET', KEYS[1], 'data', 'extra')
return {h[1], h[2] or '', dep, size, d[1] or '', d[2] or ''}
`)

// LoadCheckpoint returns the checkpoint when it is this deployment's
// (ErrForeignCheckpoint otherwise) and its data and extra together are at
// most maxBytes (ErrCheckpointTooLarge otherwise), without the data when
// it is not; ok is false when there is none.
func (s *Client) LoadCheckpoint(ctx context.Context, maxBytes int64) (c Checkpoint, ok bool, err error) {
	vals, err := loadCheckpointScript.Run(ctx, s.rdb, []string{s.key("checkpoint")}, maxBytes, s.identity).Slice()
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
	switch theirs := str(2); {
	case !s.of(theirs):
		s.foreignCheckpoint(c.ID, theirs)
		return c, true, ErrForeignCheckpoint
	case len(vals) < 6:
		return c, true, ErrCheckpointTooLarge
	}
	c.Data, c.Extra = []byte(str(4)), []byte(str(5))
	return c, true, nil
}

// writeCheckpointScript: KEYS checkpoint hash; ARGV id, lineage, data,
// extra, replace, new ('1': c.New), from. It writes when there is no
// checkpoint, when the one there is replace's (an ID the caller found
// invalid, or the one whose history the caller found lost) or another
// deployment's (left behind by a store that lost its identity, which this
// deployment then claimed), when it is of the same lineage and holds no
// later event, or, for a new lineage's first, when it is of the lineage
// the writer descended from, or holds an earlier event (or an ID that is
// none). The last settles replicas that start new lineages at once (the
// stream deleted, the store restarted from an older save) in favour of
// the one that holds the most, whatever the order of their writes: the
// others find a lineage not theirs and load it; of two that hold as much,
// the first written stays. Stream IDs compare as (milliseconds, sequence)
// pairs of numbers: as strings "9-0" would sort after "10-0".
var writeCheckpointScript = newGuarded(luaHead + `
local function before(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  if not am or not bm then return nil end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
if not string.match(ARGV[1], '^(%d+)%-(%d+)$') then return redis.error_reply('not a stream ID') end
local cur = h
local theirs = cur[3] and cur[3] ~= '' and cur[3] ~= identity
if cur[1] and not theirs and not (ARGV[5] ~= '' and cur[1] == ARGV[5]) then
  local lineage = cur[2] or ''
  if lineage == ARGV[2] then
    if before(ARGV[1], cur[1]) then return 0 end
  elseif ARGV[6] ~= '1' then
    return 0
  elseif not (ARGV[7] ~= '' and lineage == ARGV[7]) and before(cur[1], ARGV[1]) == false then
    return 0
  end
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'lineage', ARGV[2], 'data', ARGV[3], 'extra', ARGV[4], 'deployment', identity)
return 1
`)

// WriteCheckpoint stores c, as this deployment's, unless the store holds
// a checkpoint of this deployment of another lineage (unless c.New and it
// is of c.From or holds an earlier event), or a later one of c's, other
// than the one whose ID is replace (empty: none); it reports whether it
// stored it.
func (s *Client) WriteCheckpoint(ctx context.Context, c Checkpoint, replace string) (bool, error) {
	if _, _, ok := parseID(c.ID); !ok {
		return false, fmt.Errorf("store: checkpoint: %q is not a stream ID", c.ID)
	}
	isNew := ""
	if c.New {
		isNew = "1"
	}
	saved, err := s.run(ctx, writeCheckpointScript, s.rdb, []string{s.key("checkpoint")}, c.ID, c.Lineage, c.Data, c.Extra, replace, isNew, c.From).Int64()
	if err = s.outcome(ctx, "checkpoint", err); err != nil {
		return false, fmt.Errorf("store: checkpoint: %w", err)
	}
	return saved == 1, nil
}

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
