// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The scripts run on the store, each atomically, and read the time from
// the store's clock (TIME), never from a replica's: replicas' clocks may
// disagree. Times are microseconds since the epoch, below 2^53, so Lua's
// numbers hold them exactly; they are written with %.0f because Lua's
// tostring would round them to 14 digits.
//
// Every script that writes is guarded (deployment.go): its last key and
// last argument are the deployment's key and identity, which the lists of
// KEYS and ARGV below leave out, and it writes only while the store holds
// this deployment's identity. The entries it adds carry the identity.

// luaNow is the store's time in microseconds.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
`

// luaSetTAT stores tat, the key's theoretical arrival time, kept
// budgetKeep past it so that a budget nobody uses disappears.
var luaSetTAT = `
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', string.format('%.0f', math.ceil((tat - now) / 1000) + ` +
	strconv.FormatInt(budgetKeep.Milliseconds(), 10) + `))
`

// luaGetTAT reads the key's next slot into stored (nil when the key is
// missing) and starts tat at now, or at now + restart when the key is
// missing though lost is '1': this replica used the budget within the
// key's lifetime, so the store lost it (a restart or a flush).
const luaGetTAT = `
local stored = tonumber(redis.call('GET', KEYS[1]) or '')
local tat = now
if stored then
  if stored > tat then tat = stored end
elseif lost == '1' then
  tat = now + tonumber(restart)
end
`

// reserveScript is GCRA: the key holds the time the next slot starts;
// taking it moves that time spacing (ARGV[1], µs) on, and the caller waits
// until its slot. A slot more than the horizon (ARGV[2], µs) away is not
// taken. ARGV[3] is lost and ARGV[4] restart (luaGetTAT). The reply is
// {1 when taken, the wait in µs}.
var reserveScript = newGuarded(luaNow + `
local lost, restart = ARGV[3], ARGV[4]
` + luaGetTAT + `
local wait = tat - now
if wait > tonumber(ARGV[2]) then
  if not stored then
` + luaSetTAT + `
  end
  return {0, wait}
end
tat = tat + tonumber(ARGV[1])
` + luaSetTAT + `
return {1, wait}
`)

// pauseScript moves the key's next slot to ARGV[1] µs from now, unless it
// is already later. ARGV[2] is lost and ARGV[3] restart (luaGetTAT).
var pauseScript = newGuarded(luaNow + `
local lost, restart = ARGV[2], ARGV[3]
` + luaGetTAT + `
local paused = now + tonumber(ARGV[1])
if paused > tat then tat = paused end
` + luaSetTAT + `
return 1
`)

// claimScript: KEYS ready hash, claim key; ARGV item, replica, lease (ms),
// urgent ('1' skips the ready time).
var claimScript = newGuarded(`
if ARGV[4] ~= '1' then
  local ready = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '')
  if ready then
` + luaNow + `
    if ready > now then return 0 end
  end
end
if redis.call('SET', KEYS[2], ARGV[2], 'NX', 'PX', ARGV[3]) then return 1 end
return 0
`)

// releaseScript: KEYS ready hash, claim key; ARGV item, replica, ready in
// (µs). The claim goes only when it is still this replica's: after its
// lease ran out another replica may hold it.
var releaseScript = newGuarded(luaNow + `
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])))
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 1
`)

// luaStream has the helpers of the scripts that add to the stream or
// check it. An entry far ahead of the store's clock (more than the ahead
// argument, ms) stalls the stream: XADD * gives every later entry an ID
// after it, and after the largest ID none at all. repair removes such
// entries and moves the stream's last ID back to its top entry, with the
// largest deleted ID reset so that no reader takes the removal for a gap
// it missed. field reads XINFO's flat reply.
//
// Every entry xadd adds names, as prev, the newest ID the stream had given
// before it ("0-0" when there was no stream), read in the same script. A
// reader that applied an entry after prev holds events the store lost
// (restarted from an older save, the stream deleted), however many entries
// follow: trimming never moves the last given ID back, and repair moves it
// back only over entries no reader applies. The last given ID rather than
// the top entry's: an entry removed from the end by XDEL is not taken for
// a rewind. The previous release ignores the field. A caller that just
// added an entry passes its ID as prev (nil: read it), so that a batch
// reads the stream's state once.
const luaStream = `
local function aheadLimit(ahead)
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ahead
end
local function msOf(id) return tonumber(string.match(id, '^(%d+)')) end
local function field(info, name)
  for i = 1, #info - 1, 2 do
    if info[i] == name then return info[i + 1] end
  end
  return nil
end
local function repair(key, limit)
  if redis.call('EXISTS', key) == 0 then return 0 end
  local n = 0
  while true do
    local ahead = redis.call('XRANGE', key, string.format('%.0f', limit + 1), '+', 'COUNT', 100)
    if #ahead == 0 then break end
    for _, e in ipairs(ahead) do
      redis.call('XDEL', key, e[1])
      n = n + 1
    end
  end
  local info = redis.call('XINFO', 'STREAM', key)
  if msOf(field(info, 'last-generated-id')) > limit then
    local top = redis.call('XREVRANGE', key, '+', '-', 'COUNT', 1)
    local id = '0-1'
    if #top > 0 then id = top[1][1] end
    local added = field(info, 'entries-added')
    if added then
      redis.call('XSETID', key, id, 'ENTRIESADDED', added, 'MAXDELETEDID', '0-1')
    else
      redis.call('XSETID', key, id)
    end
    n = n + 1
  end
  return n
end
local function lastGiven(key)
  if redis.call('EXISTS', key) == 0 then return '0-0' end
  return field(redis.call('XINFO', 'STREAM', key), 'last-generated-id')
end
local function xadd(key, limit, maxlen, prev, ...)
  local ok, id = pcall(redis.call, 'XADD', key, 'MAXLEN', '~', maxlen, '*', 'prev', prev or lastGiven(key), ...)
  if ok and msOf(id) <= limit then return id, 0 end
  if ok then redis.call('XDEL', key, id) end
  local n = repair(key, limit)
  return redis.call('XADD', key, 'MAXLEN', '~', maxlen, '*', 'prev', lastGiven(key), ...), n
end
`

// publishScript: KEYS the stream; ARGV ahead (ms), max length, kind,
// origin, data, sig (sign.go: "" unsigned). Replies the new ID and how many entries a repair removed.
var publishScript = newGuarded(luaStream + `
local id, n = xadd(KEYS[1], aheadLimit(tonumber(ARGV[1])), ARGV[2], nil, 'kind', ARGV[3], 'origin', ARGV[4], 'deployment', identity, 'data', ARGV[5], 'sig', ARGV[6])
return {id, tostring(n)}
`)

// publishOnceScript: KEYS the stream, then one seen key per event; ARGV
// ttl (ms), max length, origin, ahead (ms), then each event's kind, data
// and sig. Replies, per event, its new ID; "=" and the ID when this replica
// added it in an earlier call (a retry); an empty string when another
// replica did, or an event before it in the batch;
// then how many entries a repair removed. One call for a whole batch: the
// store's cost of a script call is paid once, and so is the duplicate
// check's read (MGET, a thousand keys at a time: unpack's bound in the
// store's Lua).
//
// Each event is added before its seen key is written, which holds the
// publisher and the ID: a run-time error in XADD (which Redis does not
// roll back) leaves no seen key that would make the event a duplicate,
// and once a script has written, Redis no longer refuses its writes for
// memory, so the seen key follows its entry.
var publishOnceScript = newGuarded(luaStream + `
local limit = aheadLimit(tonumber(ARGV[4]))
local out, fixed, now, prev = {}, 0, {}, nil
local events = #KEYS - 2
local seen = {}
for from = 2, events + 1, 1000 do
  local part = redis.call('MGET', unpack(KEYS, from, math.min(from + 999, events + 1)))
  for j = 1, #part do seen[from - 2 + j] = part[j] end
end
for i = 1, events do
  if now[KEYS[i + 1]] then
    out[i] = ''
  elseif seen[i] then
    local origin, id = string.match(seen[i], '^(%S+) (%S+)$')
    if origin == ARGV[3] then out[i] = '=' .. id else out[i] = '' end
  else
    now[KEYS[i + 1]] = true
    local id, n = xadd(KEYS[1], limit, ARGV[2], prev, 'kind', ARGV[2 + 3 * i], 'origin', ARGV[3], 'deployment', identity, 'data', ARGV[3 + 3 * i], 'sig', ARGV[4 + 3 * i])
    fixed, prev = fixed + n, id
    redis.call('SET', KEYS[i + 1], ARGV[3] .. ' ' .. id, 'PX', ARGV[1])
    out[i] = id
  end
end
out[events + 1] = tostring(fixed)
return out
`)

// repairScript: KEYS the stream; ARGV ahead (ms). Replies how many
// entries it removed (and 1 more when it moved the last ID back).
var repairScript = newGuarded(luaStream + `
return repair(KEYS[1], aheadLimit(tonumber(ARGV[1])))
`)

// streamStateScript: KEYS the stream. Replies whether it exists, its
// last generated ID, its first entry's ID, the largest ID deleted from it
// (Redis 7 and Valkey; empty before), the store's time in ms, and its
// last entry's ID ("0-0" when it has none). A script, so that a missing
// stream is an answer, not an error; and only IDs leave the store, never
// the first or last entry, which may be huge (read.go).
var streamStateScript = redis.NewScript(luaStream + `
local now = string.format('%.0f', aheadLimit(0))
if redis.call('EXISTS', KEYS[1]) == 0 then return {'0', '0-0', '', '', now, '0-0'} end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
local function idOf(e, none)
  if type(e) == 'table' and e[1] then return e[1] end
  return none
end
return {'1', field(info, 'last-generated-id'), idOf(field(info, 'first-entry'), ''),
  field(info, 'max-deleted-entry-id') or '', now, idOf(field(info, 'last-entry'), '0-0')}
`)

// healthScript: KEYS this replica's alive key; ARGV its expiry (ms), the
// store format this release writes and reads (formats.go; the releases
// before wrote '1'). Guarded: it writes the deployment's identity where
// none is, and nothing where the store holds another's.
var healthScript = newGuarded(`
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return 1
`)

// markSyncedScript: KEYS the synced key; ARGV the replica, the expiry (ms).
var markSyncedScript = newGuarded(`
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

// forgetScript: KEYS a ready hash; ARGV the items to remove from it.
var forgetScript = newGuarded(`
return redis.call('HDEL', KEYS[1], unpack(ARGV, 1, #ARGV - 1))
`)
