// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A checkpoint in parts: the state split in parts (the exporter decides
// which), each a field of the checkpoint's parts hash, with the digest of
// its content in the digests hash. A write sends only the parts whose
// digest the store does not hold, after asking for the store's digests
// (and whether the lineage rule lets it write at all: a refused write
// sends no part); a start reads the parts in pieces of bounded size. A
// write bumps parts_gen: a start that meets another write between two
// pieces begins again (ErrCheckpointMoved).

// MaxCheckpointParts bounds the parts of a checkpoint: a store that holds
// more is not read (LoadCheckpoint), and is written from scratch.
const MaxCheckpointParts = 1 << 14

// partsNote is the checkpoint's data while the state is in parts: the
// previous release reads data as a state snapshot, refuses this one as no
// snapshot, and starts from its own folder.
const partsNote = "breach_exporter checkpoint format 2: the state is in the checkpoint:parts hash, which releases before it cannot read"

// Part is a part of a checkpoint's state: its name and the digest of its
// content.
type Part struct {
	Name, Digest string
}

// ErrCheckpointMoved is ReadParts' answer when another write of the
// checkpoint came after the one the caller read: load it again.
var ErrCheckpointMoved = errors.New("store: the checkpoint was written again while it was read")

// luaCheckpointSize: with h the checkpoint's id, lineage, parts_id and
// parts_size, size is what its state takes: its parts when they are of its
// id, else its data, and its extra.
const luaCheckpointSize = `
local size = redis.call('HSTRLEN', KEYS[1], 'extra')
if h[3] and h[3] == h[1] then size = size + (tonumber(h[4]) or 0) else size = size + redis.call('HSTRLEN', KEYS[1], 'data') end
`

// luaScan defines scan(key, out, max): appends the names and values of
// the hash key to out, and reports false once it holds more than max
// (out then holds part of them). HSCAN, not HGETALL or HLEN: the least
// privilege a deployment grants has it.
const luaScan = `
local function scan(key, out, max)
  local cursor, n = '0', 0
  repeat
    local r = redis.call('HSCAN', key, cursor, 'COUNT', 1000)
    cursor = r[1]
    for i = 1, #r[2] - 1, 2 do
      out[#out + 1] = r[2][i]
      out[#out + 1] = r[2][i + 1]
      n = n + 1
    end
    if n > max then return false end
  until cursor == '0'
  return true
end
`

// partsBaseScript: KEYS checkpoint hash, digests; ARGV id, lineage,
// replace, new, from (luaCheckpointAllowed), the most parts. Replies {0}
// when the lineage rule refuses the write, else {1, gen} and the digests
// the store holds; gen is the write of the parts the store holds, 0 when
// there are none to build on (none, or more than the most, or another
// deployment's): a write then sends every part. Guarded, for the lineage
// rule's identity; it writes nothing else.
var partsBaseScript = newGuarded(luaCheckpointAllowed + luaScan + `
if not allowed(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]) then return {0} end
local gen = tonumber(redis.call('HGET', KEYS[1], 'parts_gen') or '') or 0
local dep = redis.call('HGET', KEYS[1], 'deployment') or ''
if dep ~= '' and dep ~= identity then gen = 0 end
local out = {1, gen}
if gen == 0 or not scan(KEYS[2], out, tonumber(ARGV[6])) then return {1, 0} end
return out
`)

// writePartsScript: KEYS checkpoint hash, parts, digests; ARGV id,
// lineage, replace, new, from (luaCheckpointAllowed), extra, data, gen,
// sig (sign.go: over the names and digests of every part), the count of
// parts sent, then each part's name, digest and bytes, then
// the names of the parts to remove. Replies 1 when written, 0 when the
// lineage rule refuses it, -1 when the parts are no longer those of gen.
// Gen 0 writes the parts from scratch. (The guard's identity is the last
// argument, after the names.)
var writePartsScript = newGuarded(luaCheckpointAllowed + `
if not allowed(KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]) then return 0 end
local gen = tonumber(redis.call('HGET', KEYS[1], 'parts_gen') or '') or 0
local size = tonumber(redis.call('HGET', KEYS[1], 'parts_size') or '') or 0
if ARGV[8] == '0' then
  redis.call('DEL', KEYS[2], KEYS[3])
  size = 0
elseif gen ~= tonumber(ARGV[8]) then
  return -1
end
local i = 11
for _ = 1, tonumber(ARGV[10]) do
  size = size - redis.call('HSTRLEN', KEYS[2], ARGV[i]) + #ARGV[i + 2]
  redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 2])
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
  i = i + 3
end
for j = i, #ARGV - 1 do
  size = size - redis.call('HSTRLEN', KEYS[2], ARGV[j])
  redis.call('HDEL', KEYS[2], ARGV[j])
  redis.call('HDEL', KEYS[3], ARGV[j])
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'lineage', ARGV[2], 'data', ARGV[7], 'extra', ARGV[6], 'deployment', identity, 'sig', ARGV[9],
  'parts_id', ARGV[1], 'parts_gen', string.format('%d', gen + 1), 'parts_size', string.format('%d', size))
return 1
`)

// writeParts is WriteCheckpoint in parts: it sends the bytes (c.Body) of
// the parts whose digest the store lacks, and removes the parts c does
// not have; a refused write sends none.
func (s *Client) writeParts(ctx context.Context, c Checkpoint, replace string) (bool, error) {
	if len(c.Parts) > MaxCheckpointParts {
		return false, fmt.Errorf("store: checkpoint: %d parts, at most %d", len(c.Parts), MaxCheckpointParts)
	}
	keys := []string{s.key("checkpoint"), s.key("checkpoint", "parts"), s.key("checkpoint", "digests")}
	sig := s.sign(keys[0], checkpointFields(c, s.identity)...)
	// Twice: another replica's write between the digests read and the
	// write asks for a new look; past that, the next snapshot tries.
	for range 2 {
		vals, err := s.run(ctx, partsBaseScript, s.rdb, []string{keys[0], keys[2]}, c.ID, c.Lineage, replace, flag(c.New), c.From, MaxCheckpointParts).Slice()
		if err = s.outcome(ctx, "checkpoint", err); err != nil {
			return false, fmt.Errorf("store: checkpoint: %w", err)
		}
		if len(vals) < 2 {
			return false, nil
		}
		gen, _ := vals[1].(int64)
		held := make(map[string]string, len(vals)/2)
		for i := 2; i+1 < len(vals); i += 2 {
			name, _ := vals[i].(string)
			held[name], _ = vals[i+1].(string)
		}
		args, err := partsArgs(c, replace, sig, gen, held)
		if err != nil {
			return false, fmt.Errorf("store: checkpoint: %w", err)
		}
		saved, err := s.run(ctx, writePartsScript, s.rdb, keys, args...).Int64()
		if err = s.outcome(ctx, "checkpoint", err); err != nil {
			return false, fmt.Errorf("store: checkpoint: %w", err)
		}
		if saved >= 0 {
			return saved == 1, nil
		}
	}
	return false, nil
}

// partsArgs is writePartsScript's ARGV for c over the parts the store
// holds (held: name to digest), signed with sig.
func partsArgs(c Checkpoint, replace, sig string, gen int64, held map[string]string) ([]any, error) {
	args := []any{c.ID, c.Lineage, replace, flag(c.New), c.From, c.Extra, partsNote, gen, sig, 0}
	sent := 0
	for _, p := range c.Parts {
		d, ok := held[p.Name]
		delete(held, p.Name)
		if ok && d == p.Digest {
			continue
		}
		body, err := c.Body(p.Name)
		if err != nil {
			return nil, err
		}
		args = append(args, p.Name, p.Digest, body)
		sent++
	}
	args[9] = sent
	for name := range held {
		args = append(args, name)
	}
	return args, nil
}

// readPartsScript: KEYS checkpoint hash, parts; ARGV gen, the bound in
// bytes, then the names. Replies {-1} when the parts are of another write
// than gen, {-2} when they are larger than the bound, else 0 and each
// part's bytes (false for one that is missing).
var readPartsScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'parts_gen') ~= ARGV[1] then return {-1} end
local size = 0
for i = 3, #ARGV do size = size + redis.call('HSTRLEN', KEYS[2], ARGV[i]) end
if size > tonumber(ARGV[2]) then return {-2} end
local out = redis.call('HMGET', KEYS[2], unpack(ARGV, 3))
table.insert(out, 1, 0)
return out
`)

// ReadParts returns the bytes of the named parts of the write gen of the
// checkpoint (LoadCheckpoint's Gen), when together they are at most
// maxBytes (ErrCheckpointTooLarge otherwise); ErrCheckpointMoved when the
// checkpoint was written again since.
func (s *Client) ReadParts(ctx context.Context, gen int64, names []string, maxBytes int64) ([][]byte, error) {
	args := make([]any, 0, len(names)+2)
	args = append(args, strconv.FormatInt(gen, 10), maxBytes)
	for _, n := range names {
		args = append(args, n)
	}
	vals, err := readPartsScript.Run(ctx, s.rdb, []string{s.key("checkpoint"), s.key("checkpoint", "parts")}, args...).Slice()
	if err = s.readOutcome(ctx, "checkpoint", err); err != nil {
		return nil, fmt.Errorf("store: checkpoint: %w", err)
	}
	if len(vals) == 0 {
		return nil, errors.New("store: checkpoint: no answer for its parts")
	}
	switch code, _ := vals[0].(int64); code {
	case -1:
		return nil, ErrCheckpointMoved
	case -2:
		return nil, ErrCheckpointTooLarge
	}
	if len(vals) != len(names)+1 {
		return nil, fmt.Errorf("store: checkpoint: %d parts for %d names", len(vals)-1, len(names))
	}
	out := make([][]byte, len(names))
	for i, v := range vals[1:] {
		b, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("store: checkpoint: its part %q is missing", names[i])
		}
		out[i] = []byte(b)
	}
	return out, nil
}
