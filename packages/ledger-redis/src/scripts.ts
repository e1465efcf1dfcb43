import { ROW_FORMAT_VERSION } from "@dispatch-once/core";

/**
 * The Lua scripts that implement every ledger transition. Each touches exactly ONE key
 * (KEYS[1]), so it runs unchanged on Redis Cluster, and each is atomic: Redis runs a
 * script to completion before any other command.
 *
 * A row is ONE string value: a JSON header, a newline, and a body kept as raw bytes.
 *   {"v":1,"state":"in_flight","fence":F,"claimedAt":C,"leaseExpiresAt":L,"effect":"E","toolName":"T"}\n<owner>
 *   {"v":1,"state":"completed","fence":F,"claimedAt":C,"finishedAt":D,"effect":"E","toolName":"T"}\n<result JSON text>
 *   ... "state":"failed" ...\n<StoredError JSON>    "state":"unknown" ...\n<reason>    "state":"released" ...\n
 * The header is written only by these scripts, always in this field order, so the scripts
 * read it with one anchored pattern; a JSON string cannot contain a raw newline, so the
 * first "\n" ends the header and the body (the result) is returned byte-for-byte.
 * One string instead of a hash: about half the memory per row and fewer server calls
 * per transition (SET ... NX GET claims an absent key and reads a present one at once).
 *
 * Times are milliseconds on the SERVER clock (redis.call('TIME')). In-flight rows carry
 * no TTL; finished and released rows are written with PX retentionMs (LEDGER-13).
 *
 * Replies: {'claimed', fence, leaseExpiresAt, takeover 0|1} | {'existing', value}
 *        | {'ok', time} | {'stale'} | {'corrupt', why}.
 */

const V = String(ROW_FORMAT_VERSION);

const PRELUDE = `
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nows = string.format('%d', now)
-- state, fence, claimedAt, rest-of-header; nil when the value is not a row this version wrote
local function header(value)
  local nl = string.find(value, '\\n', 1, true)
  if not nl then return nil end
  local state, fence, claimed, rest = string.match(string.sub(value, 1, nl - 1),
    '^{"v":${V},"state":"([%a_]+)","fence":(%d+),"claimedAt":(%d+),(.*)}$')
  return state, fence, claimed, rest, nl
end
local function inflight(rest)
  return string.match(rest, '^"leaseExpiresAt":(%d+),"effect":"(%a+_write)","toolName":(".*")$')
end
local function finished(state, fence, claimed, effect, tool, body)
  return '{"v":${V},"state":"' .. state .. '","fence":' .. fence .. ',"claimedAt":' .. claimed ..
    ',"finishedAt":' .. nows .. ',"effect":"' .. effect .. '","toolName":' .. tool .. '}\\n' .. body
end
-- Finished rows live retentionMs more; 0 means gone at once.
local function store_finished(value, retention)
  if tonumber(retention) > 0 then redis.call('SET', key, value, 'PX', retention) else redis.call('DEL', key) end
end
`;

/**
 * claim. ARGV: 1 toolName as a JSON string, 2 effect, 3 owner, 4 leaseMs, 5 retentionMs.
 * absent/released -> in_flight (fence+1); live in_flight or terminal -> existing;
 * expired in_flight: keyed_write -> takeover (fence+1), unkeyed_write -> unknown(lease_expired).
 */
export const CLAIM_LUA = `${PRELUDE}
local lease = string.format('%d', now + tonumber(ARGV[4]))
local function claimed(fence)
  return '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. nows ..
    ',"leaseExpiresAt":' .. lease .. ',"effect":"' .. ARGV[2] .. '","toolName":' .. ARGV[1] .. '}\\n' .. ARGV[3]
end
-- One call claims an absent key, or returns the value that is there (WRONGTYPE if not a string).
local old = redis.pcall('SET', key, claimed('1'), 'NX', 'GET')
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'claimed', '1', lease, 0} end
local state, fence, claimedAt, rest = header(old)
if not state then return {'corrupt', 'unreadable row header'} end
local nextFence = string.format('%d', tonumber(fence) + 1)
-- A plain SET drops a released row's TTL: an in-flight row never expires.
if state == 'released' then
  redis.call('SET', key, claimed(nextFence))
  return {'claimed', nextFence, lease, 0}
end
if state == 'completed' or state == 'failed' or state == 'unknown' then return {'existing', old} end
if state ~= 'in_flight' then return {'corrupt', 'unknown state ' .. state} end
local leaseAt, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
if tonumber(leaseAt) > now then return {'existing', old} end
-- The owner's lease ran out: it died, hung, or lost the store (LEDGER-7).
if effect == 'keyed_write' then
  redis.call('SET', key, claimed(nextFence))
  return {'claimed', nextFence, lease, 1}
end
if effect ~= 'unkeyed_write' then return {'corrupt', 'unknown effect ' .. effect} end
local unknown = finished('unknown', fence, claimedAt, effect, tool, 'lease_expired')
store_finished(unknown, ARGV[5])
return {'existing', unknown}
`;

/** Shared ownership check: the row must be in_flight AND carry exactly this fence (LEDGER-5). ARGV[1] = fence. */
const OWNED = `
local old = redis.pcall('GET', key)
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'stale'} end
local state, fence, claimedAt, rest, nl = header(old)
if not state then return {'corrupt', 'unreadable row header'} end
if state ~= 'in_flight' or fence ~= ARGV[1] then return {'stale'} end
local leaseAt, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
`;

/** renew. ARGV: 1 fence, 2 leaseMs. */
export const RENEW_LUA = `${PRELUDE}${OWNED}
local lease = string.format('%d', now + tonumber(ARGV[2]))
redis.call('SET', key, '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. claimedAt ..
  ',"leaseExpiresAt":' .. lease .. ',"effect":"' .. effect .. '","toolName":' .. tool .. '}\\n' .. string.sub(old, nl + 1))
return {'ok', lease}
`;

/** complete / fail / markUnknown / release. ARGV: 1 fence, 2 new state, 3 retentionMs, 4 body. */
export const FINISH_LUA = `${PRELUDE}${OWNED}
store_finished(finished(ARGV[2], fence, claimedAt, effect, tool, ARGV[4]), ARGV[3])
return {'ok', nows}
`;
