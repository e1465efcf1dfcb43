import { ROW_FORMAT_VERSION } from "@dispatch-once/core";

/**
 * The Lua scripts that implement every ledger transition. Each touches exactly ONE key
 * (KEYS[1]), so it runs unchanged on Redis Cluster, and each is atomic: Redis runs a
 * script to completion before any other command.
 *
 * A row is ONE string value: a JSON header, a newline, and a body kept as raw bytes. The body
 * starts with the stored request (requestBytes UTF-8 bytes, LEDGER-21), followed by the state's text:
 *   {"v":1,"state":"in_flight","fence":F,"claimedAt":C,"requestBytes":N,"leaseExpiresAt":L,"effect":"E","toolName":"T"}\n<request><owner>
 *   {"v":1,"state":"completed","fence":F,"claimedAt":C,"requestBytes":N,"finishedAt":D,"effect":"E","toolName":"T"}\n<request><result JSON text>
 *   ... "state":"failed" ...\n<request><StoredError JSON>   "state":"unknown" ...\n<request><reason>   "state":"released" ...\n<request>
 * The header is written only by these scripts, always in this field order, so the scripts
 * read it with one anchored pattern; a JSON string cannot contain a raw newline, so the
 * first "\n" ends the header. The request and the result are raw bytes, never escaped or
 * re-serialised, so both come back byte-for-byte; a length (not a separator) splits them,
 * because either may contain any byte.
 * One string instead of a hash: about half the memory per row and fewer server calls
 * per transition (SET ... NX GET claims an absent key and reads a present one at once).
 *
 * Times are milliseconds on the SERVER clock (redis.call('TIME')). In-flight rows carry
 * no TTL; finished and released rows are written with PX retentionMs (LEDGER-13).
 *
 * Replies: {'claimed', fence, leaseExpiresAt, takeover 0|1[, stored request]} | {'existing', value}
 *        | {'ok', time} | {'stale'} | {'corrupt', why}.
 * A claim that CREATES the row replies without the request: what it stored is the caller's own
 * argument, so sending it back would only double the bytes on the wire.
 */

const V = String(ROW_FORMAT_VERSION);

const PRELUDE = `
local key = KEYS[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nows = string.format('%d', now)
-- state, fence, claimedAt, requestBytes (string), rest-of-header, newline position;
-- or nil and why, when the value is not a row this version wrote. A row without
-- requestBytes (written before LEDGER-21) is one of those: corrupt, never absent.
local function header(value)
  local nl = string.find(value, '\\n', 1, true)
  if not nl then return nil, 'no row header' end
  local state, fence, claimed, nreq, rest = string.match(string.sub(value, 1, nl - 1),
    '^{"v":${V},"state":"([%a_]+)","fence":(%d+),"claimedAt":(%d+),"requestBytes":(%d+),(.*)}$')
  if not state then return nil, 'unreadable row header' end
  if #value < nl + tonumber(nreq) then return nil, 'row is shorter than its stored request' end
  return state, fence, claimed, nreq, rest, nl
end
-- The stored request: the first requestBytes bytes of the body (LEDGER-21).
local function request_of(value, nl, nreq)
  return string.sub(value, nl + 1, nl + tonumber(nreq))
end
local function inflight(rest)
  return string.match(rest, '^"leaseExpiresAt":(%d+),"effect":"(%a+_write)","toolName":(".*")$')
end
-- One concatenation, so a large result is copied once, not once more to prepend the request.
local function finished(state, fence, claimed, nreq, effect, tool, request, text)
  return '{"v":${V},"state":"' .. state .. '","fence":' .. fence .. ',"claimedAt":' .. claimed ..
    ',"requestBytes":' .. nreq .. ',"finishedAt":' .. nows .. ',"effect":"' .. effect .. '","toolName":' .. tool .. '}\\n' ..
    request .. text
end
-- Finished rows live retentionMs more; 0 means gone at once.
local function store_finished(value, retention)
  if tonumber(retention) > 0 then redis.call('SET', key, value, 'PX', retention) else redis.call('DEL', key) end
end
`;

/**
 * claim. ARGV: 1 toolName as a JSON string, 2 effect, 3 owner, 4 leaseMs, 5 retentionMs, 6 request.
 * absent -> in_flight (fence 1, stores ARGV[6]); released -> in_flight (fence+1, keeps the stored request);
 * live in_flight or terminal -> existing;
 * expired in_flight: keyed_write -> takeover (fence+1, keeps the request), unkeyed_write -> unknown(lease_expired).
 */
export const CLAIM_LUA = `${PRELUDE}
local lease = string.format('%d', now + tonumber(ARGV[4]))
local function claimed(fence, nreq, request)
  return '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. nows .. ',"requestBytes":' .. nreq ..
    ',"leaseExpiresAt":' .. lease .. ',"effect":"' .. ARGV[2] .. '","toolName":' .. ARGV[1] .. '}\\n' .. request .. ARGV[3]
end
-- One call claims an absent key, or returns the value that is there (WRONGTYPE if not a string).
-- Only this claim, the one that creates the row, stores the caller's request (#: its UTF-8 bytes).
local old = redis.pcall('SET', key, claimed('1', string.format('%d', #ARGV[6]), ARGV[6]), 'NX', 'GET')
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'claimed', '1', lease, 0} end
local state, fence, claimedAt, nreq, rest, nl = header(old)
if not state then return {'corrupt', fence} end
local nextFence = string.format('%d', tonumber(fence) + 1)
-- A re-claim keeps the first claim's request and sends it back: the re-run runs with it (LEDGER-21).
-- A plain SET drops a released row's TTL: an in-flight row never expires.
if state == 'released' then
  -- A tombstone is header and request only; anything after is not a row this version wrote.
  if #old ~= nl + tonumber(nreq) then return {'corrupt', 'text after the request of a released row'} end
  local request = request_of(old, nl, nreq)
  redis.call('SET', key, claimed(nextFence, nreq, request))
  return {'claimed', nextFence, lease, 0, request}
end
if state == 'completed' or state == 'failed' or state == 'unknown' then return {'existing', old} end
if state ~= 'in_flight' then return {'corrupt', 'unknown state ' .. state} end
local leaseAt, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
if tonumber(leaseAt) > now then return {'existing', old} end
-- The owner's lease ran out: it died, hung, or lost the store (LEDGER-7).
if effect == 'keyed_write' then
  local request = request_of(old, nl, nreq)
  redis.call('SET', key, claimed(nextFence, nreq, request))
  return {'claimed', nextFence, lease, 1, request}
end
if effect ~= 'unkeyed_write' then return {'corrupt', 'unknown effect ' .. effect} end
local unknown = finished('unknown', fence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), 'lease_expired')
store_finished(unknown, ARGV[5])
return {'existing', unknown}
`;

/** Shared ownership check: the row must be in_flight AND carry exactly this fence (LEDGER-5). ARGV[1] = fence. */
const OWNED = `
local old = redis.pcall('GET', key)
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'stale'} end
local state, fence, claimedAt, nreq, rest, nl = header(old)
if not state then return {'corrupt', fence} end
if state ~= 'in_flight' or fence ~= ARGV[1] then return {'stale'} end
local leaseAt, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
`;

/** renew. ARGV: 1 fence, 2 leaseMs. The body (request and owner) is copied unchanged. */
export const RENEW_LUA = `${PRELUDE}${OWNED}
local lease = string.format('%d', now + tonumber(ARGV[2]))
redis.call('SET', key, '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. claimedAt ..
  ',"requestBytes":' .. nreq .. ',"leaseExpiresAt":' .. lease .. ',"effect":"' .. effect .. '","toolName":' .. tool ..
  '}\\n' .. string.sub(old, nl + 1))
return {'ok', lease}
`;

/** complete / fail / markUnknown / release. ARGV: 1 fence, 2 new state, 3 retentionMs, 4 body. Keeps the stored request. */
export const FINISH_LUA = `${PRELUDE}${OWNED}
store_finished(finished(ARGV[2], fence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), ARGV[4]), ARGV[3])
return {'ok', nows}
`;
