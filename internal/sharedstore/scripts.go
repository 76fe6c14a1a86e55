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
var reserveScript = redis.NewScript(luaNow + `
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
var pauseScript = redis.NewScript(luaNow + `
local lost, restart = ARGV[2], ARGV[3]
` + luaGetTAT + `
local paused = now + tonumber(ARGV[1])
if paused > tat then tat = paused end
` + luaSetTAT + `
return 1
`)

// claimScript: KEYS ready hash, claim key; ARGV item, replica, lease (ms),
// urgent ('1' skips the ready time).
var claimScript = redis.NewScript(`
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
var releaseScript = redis.NewScript(luaNow + `
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])))
if redis.call('GET', KEYS[2]) == ARGV[2] then redis.call('DEL', KEYS[2]) end
return 1
`)

// publishOnceScript: KEYS the stream, then one seen key per event; ARGV
// ttl (ms), max length, origin, then each event's kind and data. Replies
// each event's new ID, or an empty string for a duplicate. One call for a
// whole batch: the store's cost of a script call is paid once.
var publishOnceScript = redis.NewScript(`
local out = {}
for i = 1, #KEYS - 1 do
  if redis.call('SET', KEYS[i + 1], '1', 'NX', 'PX', ARGV[1]) then
    out[i] = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'kind', ARGV[2 + 2 * i], 'origin', ARGV[3], 'data', ARGV[3 + 2 * i])
  else
    out[i] = ''
  end
end
return out
`)

// saveCheckpointScript: KEYS checkpoint hash; ARGV id, data. Stream IDs
// compare as (milliseconds, sequence) pairs of numbers: as strings
// "9-0" would sort after "10-0".
var saveCheckpointScript = redis.NewScript(`
local nm, ns = string.match(ARGV[1], '^(%d+)%-(%d+)$')
if not nm then return redis.error_reply('not a stream ID') end
local cur = redis.call('HGET', KEYS[1], 'id')
if cur then
  local cm, cs = string.match(cur, '^(%d+)%-(%d+)$')
  if cm then
    nm, ns, cm, cs = tonumber(nm), tonumber(ns), tonumber(cm), tonumber(cs)
    if nm < cm or (nm == cm and ns < cs) then return 0 end
  end
end
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'data', ARGV[2])
return 1
`)
