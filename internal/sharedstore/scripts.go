// SPDX-License-Identifier: Apache-2.0

package sharedstore

import "github.com/redis/go-redis/v9"

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

// luaSetTAT stores tat, the key's theoretical arrival time, kept two
// minutes past it so that a budget nobody uses disappears.
const luaSetTAT = `
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', string.format('%.0f', math.ceil((tat - now) / 1000) + 120000))
`

// reserveScript is GCRA: the key holds the time the next slot starts;
// taking it moves that time spacing (ARGV[1], µs) on, and the caller waits
// until its slot (the reply, µs from now).
var reserveScript = redis.NewScript(luaNow + `
local tat = now
local stored = tonumber(redis.call('GET', KEYS[1]) or '')
if stored and stored > tat then tat = stored end
local wait = tat - now
tat = tat + tonumber(ARGV[1])
` + luaSetTAT + `
return wait
`)

// pauseScript moves the key's next slot to ARGV[1] µs from now, unless it
// is already later.
var pauseScript = redis.NewScript(luaNow + `
local tat = now + tonumber(ARGV[1])
local stored = tonumber(redis.call('GET', KEYS[1]) or '')
if stored and stored > tat then tat = stored end
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
