/**
 * The Lua scripts that implement every ledger transition. Each touches exactly ONE key
 * (KEYS[1], the row's hash), so it runs unchanged on Redis Cluster, and each is atomic:
 * Redis runs a script to completion before any other command.
 *
 * Row layout (one hash per key):
 *   v, state, toolName, effect, fence, claimedAt           always
 *   owner, leaseExpiresAt                                   in_flight only
 *   result | error | reason, finishedAt                     completed | failed | unknown
 *   finishedAt                                              released
 * Times are milliseconds on the SERVER clock (redis.call('TIME')). In-flight rows carry
 * no TTL; finished and released rows get PEXPIRE retentionMs (retention, LEDGER-13).
 *
 * Replies are arrays whose first element says what happened:
 *   {'claimed', fence, leaseExpiresAt, takeover(0|1), claimedAt}
 *   {'existing', {field, value, ...}}
 *   {'ok', time}            renew (time = leaseExpiresAt) and finish (time = finishedAt)
 *   {'stale'}               the fence does not own an in-flight row: nothing changed
 *   {'corrupt', why}        the stored value is not a row this version can read: nothing changed
 */

/** Shared prelude: server clock in ms, integer formatting without exponents. */
const PRELUDE = `
local key = KEYS[1]
local version = ARGV[1]
local function fmt(n) return string.format('%d', n) end
local function servernow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Retention: finished rows expire after retentionMs; 0 means "gone at once".
local function retain(ms)
  if tonumber(ms) > 0 then redis.call('PEXPIRE', key, ms) else redis.call('DEL', key) end
end
`;

/**
 * claim. ARGV: 1 version, 2 toolName, 3 effect, 4 owner, 5 leaseMs, 6 retentionMs.
 * absent/released -> in_flight (fence+1); live in_flight or terminal -> existing;
 * expired in_flight: keyed_write -> takeover, unkeyed_write -> unknown(lease_expired).
 */
export const CLAIM_LUA = `${PRELUDE}
local now = servernow()
local flat = redis.pcall('HGETALL', key)
if type(flat) == 'table' and flat.err then return {'corrupt', flat.err} end
local function claim(fence, takeover)
  local lease = now + tonumber(ARGV[5])
  -- DEL first: drops a released row's TTL and its finishedAt (an in-flight row never expires).
  redis.call('DEL', key)
  redis.call('HSET', key, 'v', version, 'state', 'in_flight', 'toolName', ARGV[2],
    'effect', ARGV[3], 'fence', fmt(fence), 'claimedAt', fmt(now), 'owner', ARGV[4],
    'leaseExpiresAt', fmt(lease))
  return {'claimed', fmt(fence), fmt(lease), takeover, fmt(now)}
end
if #flat == 0 then return claim(1, 0) end
local row = {}
for i = 1, #flat, 2 do row[flat[i]] = flat[i + 1] end
if row.v ~= version then return {'corrupt', 'format version ' .. tostring(row.v)} end
local fence = tonumber(row.fence)
if fence == nil or fence < 1 or fence ~= math.floor(fence) then return {'corrupt', 'bad fence'} end
local state = row.state
if state == 'released' then return claim(fence + 1, 0) end
if state == 'completed' or state == 'failed' or state == 'unknown' then return {'existing', flat} end
if state ~= 'in_flight' then return {'corrupt', 'unknown state ' .. tostring(state)} end
local lease = tonumber(row.leaseExpiresAt)
if lease == nil then return {'corrupt', 'bad leaseExpiresAt'} end
if lease > now then return {'existing', flat} end
-- The owner's lease ran out: it died, hung, or lost the store (LEDGER-7).
if row.effect == 'keyed_write' then return claim(fence + 1, 1) end
if row.effect ~= 'unkeyed_write' then return {'corrupt', 'unknown effect ' .. tostring(row.effect)} end
if row.toolName == nil or tonumber(row.claimedAt) == nil then return {'corrupt', 'missing fields'} end
redis.call('HDEL', key, 'owner', 'leaseExpiresAt')
redis.call('HSET', key, 'state', 'unknown', 'reason', 'lease_expired', 'finishedAt', fmt(now))
retain(ARGV[6])
return {'existing', {'v', version, 'state', 'unknown', 'toolName', row.toolName, 'effect', row.effect,
  'fence', row.fence, 'claimedAt', row.claimedAt, 'reason', 'lease_expired', 'finishedAt', fmt(now)}}
`;

/** Shared ownership check: the row must be in_flight AND carry exactly this fence (LEDGER-5). */
const OWNED = `
local cur = redis.pcall('HMGET', key, 'v', 'state', 'fence')
if cur.err then return {'corrupt', cur.err} end
if not cur[1] and not cur[2] and not cur[3] then return {'stale'} end
if cur[1] ~= version then return {'corrupt', 'format version ' .. tostring(cur[1])} end
if cur[2] ~= 'in_flight' or cur[3] ~= ARGV[2] then return {'stale'} end
`;

/** renew. ARGV: 1 version, 2 fence, 3 leaseMs. */
export const RENEW_LUA = `${PRELUDE}${OWNED}
local lease = servernow() + tonumber(ARGV[3])
redis.call('HSET', key, 'leaseExpiresAt', fmt(lease))
return {'ok', fmt(lease)}
`;

/**
 * complete / fail / markUnknown / release.
 * ARGV: 1 version, 2 fence, 3 new state, 4 retentionMs, 5 field name ('' for release), 6 field value.
 */
export const FINISH_LUA = `${PRELUDE}${OWNED}
local now = servernow()
redis.call('HDEL', key, 'owner', 'leaseExpiresAt')
if ARGV[5] ~= '' then
  redis.call('HSET', key, 'state', ARGV[3], ARGV[5], ARGV[6], 'finishedAt', fmt(now))
else
  redis.call('HSET', key, 'state', ARGV[3], 'finishedAt', fmt(now))
end
retain(ARGV[4])
return {'ok', fmt(now)}
`;
