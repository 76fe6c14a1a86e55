// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The checkpoint is one hash: id (the last event it holds), data (the
// state), and from the release with lineages on, lineage (which history
// it belongs to), extra (state the previous release's data has no room
// for) and deployment (the identity of the deployment that wrote it). A
// previous release writes id and data only; it reads those two. A
// checkpoint without a deployment is taken as this deployment's.
// From the release with parts on (parts.go), the state may be in parts of
// their own keys instead: data then holds a note the previous release
// refuses, and parts_id says which id the parts hold. A write of the whole
// state (while a replica of an earlier format is alive, formats.go)
// removes parts_id, and so does a previous release's write of id and data
// leave it behind: data is read then.

// Checkpoint is a checkpoint as stored.
type Checkpoint struct {
	ID      string
	Lineage string
	Data    []byte // the state whole, as the previous release writes it
	Extra   []byte
	// New marks, on a write, the first checkpoint of a lineage the writer
	// started (not read back): it may replace a checkpoint of From, the
	// lineage the writer's state descended from ("" none), or of another
	// lineage that holds an earlier event (luaCheckpointAllowed).
	New  bool
	From string
	// Parts is the state in parts (when Data is not): what LoadCheckpoint
	// found, with Gen, the write of the parts they are of (ReadParts); or
	// what WriteCheckpoint writes, sending Body only for the parts whose
	// digest the store does not hold.
	Parts []Part
	Gen   int64
	Body  func(name string) ([]byte, error)
	// Signed marks, on a load, a checkpoint whose signature verified: only
	// such a one may say the deployment is signed only.
	Signed bool
}

// Head is what a replica checks about the store without fetching a
// checkpoint's data: the checkpoint's ID, lineage and size, and where the
// stream stands, on the store's clock.
type Head struct {
	HasCheckpoint bool
	ID, Lineage   string
	Size          int64 // of data (or parts) and extra together
	// Parts: the state is in parts only, which the previous release
	// cannot read.
	Parts bool
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

// maxHeadBytes bounds each of the checkpoint's id, lineage, deployment
// and sig members as sent by the store: a stream ID has at most 41 bytes,
// a lineage 32, store.deployment 64 and a sig 98 (an oversized sig
// arrives as the marker, which verifies with no key). One over it is sent as
// luaBounded's marker, "(N bytes)": not a stream ID, so the checkpoint is
// found invalid, and the same marker names it when a synced replica
// writes over it (writeCheckpointScript's replace). Data and extra are
// bounded by their own sizes (HSTRLEN) before they are sent.
const maxHeadBytes = 256

// luaBounded defines bounded(key, ...): the hash key's fields (HMGET),
// each over maxHeadBytes replaced by the marker.
var luaBounded = `
local function bounded(key, ...)
  local h = redis.call('HMGET', key, ...)
  for i = 1, select('#', ...) do
    if h[i] and #h[i] > ` + strconv.Itoa(maxHeadBytes) + ` then h[i] = '(' .. #h[i] .. ' bytes)' end
  end
  return h
end
`

// headScript: KEYS checkpoint hash, stream, synced key. One round trip,
// no entry's data: XINFO STREAM's first and last entries are reduced to
// their IDs, so a forged huge entry costs nothing here.
var headScript = redis.NewScript(luaBounded + `
local h = bounded(KEYS[1], 'id', 'lineage', 'parts_id', 'parts_size', 'deployment')
` + luaCheckpointSize + `
local t = redis.call('TIME')
local out = {h[1] or '', h[2] or '', size, t[1], t[2], 0, '', '', '', '', 0, 0, redis.call('EXISTS', KEYS[3]), h[5] or '', 0}
if h[1] and h[3] == h[1] then out[15] = 1 end
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
	if len(vals) != 15 {
		return Head{}, fmt.Errorf("store: checkpoint: %d values in the head, want 15", len(vals))
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
		Parts: num(14) == 1,
	}
	if theirs := str(13); h.HasCheckpoint && !s.of(theirs) {
		h.Foreign = true
		s.foreignCheckpoint(h.ID, theirs)
	}
	return h, nil
}

// holdsScript: KEYS the stream; ARGV an ID. 1 when the stream holds an
// entry of that ID, else 0; never the entry itself, which may be large.
var holdsScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1]).ok ~= 'stream' then return 0 end
return #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
`)

// Holds reports whether the stream still holds the entry of ID id.
func (s *Client) Holds(ctx context.Context, id string) (bool, error) {
	n, err := holdsScript.Run(ctx, s.rdb, []string{s.key("events")}, id).Int64()
	if err = s.readOutcome(ctx, "read", err); err != nil {
		return false, fmt.Errorf("store: holds: %w", err)
	}
	return n == 1, nil
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

// loadCheckpointScript: KEYS checkpoint hash, its parts' digests; ARGV
// the bound in bytes, the most parts, this deployment's identity. The
// data is sent only within the bound, and only of a checkpoint of this
// deployment (or of none: the previous release's): the whole data, or the
// parts' names and digests (their bytes come with ReadParts).
var loadCheckpointScript = redis.NewScript(luaBounded + luaScan + `
local h = bounded(KEYS[1], 'id', 'lineage', 'parts_id', 'parts_size', 'parts_gen', 'deployment', 'sig')
if not h[1] then return {} end
local dep = h[6] or ''
if dep ~= '' and dep ~= ARGV[3] then return {h[1], h[2] or '', dep} end
` + luaCheckpointSize + `
if size > tonumber(ARGV[1]) then return {h[1], h[2] or '', dep, size} end
local sig = h[7] or ''
if h[3] == h[1] then
  local out = {h[1], h[2] or '', dep, size, '', redis.call('HGET', KEYS[1], 'extra') or '', h[5] or '0', sig}
  if not scan(KEYS[2], out, tonumber(ARGV[2])) then return {h[1], h[2] or '', dep, size} end
  return out
end
local d = redis.call('HMGET', KEYS[1], 'data', 'extra')
return {h[1], h[2] or '', dep, size, d[1] or '', d[2] or '', sig}
`)

// LoadCheckpoint returns the checkpoint when it is this deployment's
// (ErrForeignCheckpoint otherwise) and its data (or parts) and extra
// together are at most maxBytes and it has at most MaxCheckpointParts
// parts (ErrCheckpointTooLarge otherwise), without the data when it is
// not; ok is false when there is none. The parts' bytes are ReadParts'.
func (s *Client) LoadCheckpoint(ctx context.Context, maxBytes int64) (c Checkpoint, ok bool, err error) {
	vals, err := loadCheckpointScript.Run(ctx, s.rdb, []string{s.key("checkpoint"), s.key("checkpoint", "digests")}, maxBytes, MaxCheckpointParts, s.identity).Slice()
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
	theirs := str(2)
	switch {
	case !s.of(theirs):
		s.foreignCheckpoint(c.ID, theirs)
		return c, true, ErrForeignCheckpoint
	case len(vals) < 7:
		return c, true, ErrCheckpointTooLarge
	}
	var sig string
	if len(vals) == 7 {
		c.Data, c.Extra, sig = []byte(str(4)), []byte(str(5)), str(6)
	} else {
		c.Extra, sig = []byte(str(5)), str(7)
		c.Gen, _ = strconv.ParseInt(str(6), 10, 64)
		c.Parts = make([]Part, 0, (len(vals)-8)/2)
		for i := 8; i+1 < len(vals); i += 2 {
			c.Parts = append(c.Parts, Part{Name: str(i), Digest: str(i + 1)})
		}
	}
	v := s.verify(sig, s.key("checkpoint"), checkpointFields(c, theirs)...)
	if v == unverified {
		// The previous release writes id and data over a checkpoint of
		// this one and leaves its sig, which then signs another: read as
		// unsigned, which a signed-only deployment refuses all the same.
		v = unsigned
	}
	if !s.accepted(v, unverifiedCheckpoint, c.ID) {
		return c, true, ErrUnverifiedCheckpoint
	}
	c.Signed = v == verified
	return c, true, nil
}

// ErrUnverifiedCheckpoint is LoadCheckpoint's answer for a checkpoint whose
// signature the deployment does not accept (sign.go): not loaded, and
// written over like an invalid one.
var ErrUnverifiedCheckpoint = errors.New("store: the checkpoint's signature does not verify with this deployment's keys")

// checkpointFields are the signed fields of checkpoint c of deployment:
// its data whole, or the names and digests of its parts (the exporter
// checks each part's bytes against its digest), in the order of their
// names.
func checkpointFields(c Checkpoint, deployment string) []string {
	if c.Parts == nil {
		return []string{"id", c.ID, "lineage", c.Lineage, "data", string(c.Data), "extra", string(c.Extra), entryDeployment, deployment}
	}
	parts := slices.SortedFunc(slices.Values(c.Parts), func(x, y Part) int { return strings.Compare(x.Name, y.Name) })
	fields := make([]string, 0, 10+2*len(parts))
	fields = append(fields, "id", c.ID, "lineage", c.Lineage, "extra", string(c.Extra), entryDeployment, deployment, "parts", strconv.Itoa(len(parts)))
	for _, p := range parts {
		fields = append(fields, p.Name, p.Digest)
	}
	return fields
}

// luaCheckpointAllowed defines allowed(key, id, lineage, replace, new,
// from): whether a checkpoint at id of lineage may be written over the one
// in the hash key (a guarded script's: identity is this deployment's). It
// may when there is none, when the one there is replace's (an ID the
// caller found invalid, or the one whose history the caller found lost)
// or another deployment's (left behind by a store that lost its identity,
// which this deployment then claimed), when it is of the same lineage and
// holds no later event, or, for a new lineage's first (new '1'), when it
// is of the lineage the writer descended from (from), or holds an earlier
// event (or an ID that is none). The last settles replicas that start new
// lineages at once (the stream deleted, the store restarted from an older
// save) in favour of the one that holds the most, whatever the order of
// their writes: the others find a lineage not theirs and load it; of two
// that hold as much, the first written stays. Stream IDs compare as
// (milliseconds, sequence) pairs of numbers: as strings "9-0" would sort
// after "10-0".
var luaCheckpointAllowed = luaBounded + `
local function before(a, b)
  local am, as = string.match(a, '^(%d+)%-(%d+)$')
  local bm, bs = string.match(b, '^(%d+)%-(%d+)$')
  if not am or not bm then return nil end
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local function allowed(key, id, lineage, replace, new, from)
  if not string.match(id, '^(%d+)%-(%d+)$') then error('not a stream ID') end
  local cur = bounded(key, 'id', 'lineage', 'deployment')
  local theirs = cur[3] and cur[3] ~= '' and cur[3] ~= identity
  if not cur[1] or theirs or (replace ~= '' and cur[1] == replace) then return true end
  local held = cur[2] or ''
  if held == lineage then return not before(id, cur[1]) end
  if new ~= '1' then return false end
  return (from ~= '' and held == from) or before(cur[1], id) ~= false
end
`

// writeCheckpointScript: KEYS checkpoint hash; ARGV id, lineage, data,
// extra, replace, new ('1': c.New), from, sig (sign.go). It writes the state whole, as
// the previous release reads it, when luaCheckpointAllowed allows it, and
// removes parts_id: the parts the store may hold are of an earlier write
// (kept: a write in parts after it sends only what changed).
var writeCheckpointScript = newGuarded(luaCheckpointAllowed + `
if not allowed(KEYS[1], ARGV[1], ARGV[2], ARGV[5], ARGV[6], ARGV[7]) then return 0 end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'lineage', ARGV[2], 'data', ARGV[3], 'extra', ARGV[4], 'deployment', identity, 'sig', ARGV[8])
redis.call('HDEL', KEYS[1], 'parts_id')
return 1
`)

// WriteCheckpoint stores c, as this deployment's, in parts when c.Parts
// is set (writeParts), else whole, unless the store holds a checkpoint of
// this deployment of another lineage (unless c.New and it is of c.From or
// holds an earlier event), or a later one of c's, other than the one
// whose ID is replace (empty: none); it reports whether it stored it.
func (s *Client) WriteCheckpoint(ctx context.Context, c Checkpoint, replace string) (bool, error) {
	if _, _, ok := parseID(c.ID); !ok {
		return false, fmt.Errorf("store: checkpoint: %q is not a stream ID", c.ID)
	}
	if c.Parts != nil {
		return s.writeParts(ctx, c, replace)
	}
	sig := s.sign(s.key("checkpoint"), checkpointFields(c, s.identity)...)
	saved, err := s.run(ctx, writeCheckpointScript, s.rdb, []string{s.key("checkpoint")}, c.ID, c.Lineage, c.Data, c.Extra, replace, flag(c.New), c.From, sig).Int64()
	if err = s.outcome(ctx, "checkpoint", err); err != nil {
		return false, fmt.Errorf("store: checkpoint: %w", err)
	}
	return saved == 1, nil
}

// flag is a boolean as a script's argument.
func flag(b bool) string {
	if b {
		return "1"
	}
	return ""
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

// ParseID splits a stream ID into its milliseconds and sequence number;
// false for one that is not an ID.
func ParseID(id string) (ms, seq uint64, ok bool) { return parseID(id) }

// IDAt is the first stream ID of t's millisecond ("0-0" before 1970).
func IDAt(t time.Time) string {
	return strconv.FormatInt(max(t.UnixMilli(), 0), 10) + "-0"
}
