import { ROW_FORMAT_VERSION } from "@dispatch-once/core";

/**
 * The Lua scripts that implement every ledger transition. Each touches one row (KEYS[1]) and the
 * in-flight index of the row's hash slot (KEYS[2], a sorted set whose hash tag is chosen to land in
 * the same slot), so it runs unchanged on Redis Cluster, and each is atomic: Redis runs a script
 * to completion before any other command.
 *
 * A row is ONE string value: a JSON header, a newline, and a body kept as raw bytes. The body
 * starts with the stored request (requestBytes UTF-8 bytes, LEDGER-21), followed by the state's text:
 *   {"v":1,"state":"in_flight","fence":F,"claimedAt":C,"requestBytes":N,"leaseExpiresAt":L,"claim":"K","effect":"E","toolName":"T"}\n<request><owner>
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
 * `claim` (K) is a token the adapter makes for each claim call and never shows to the caller: a
 * claim whose reply was lost (timeout, dropped connection) is released by its token (CANCEL_LUA),
 * since its claimant never received the fence and so never ran the tool.
 *
 * Times are milliseconds on the SERVER clock (redis.call('TIME')). In-flight rows carry
 * no TTL; finished and released rows are written with PX retentionMs (LEDGER-13).
 *
 * The header's tail from "toolName" on is copied verbatim by every script: it carries the row's
 * conversationId and turnIndex (LIST-3) when the creating claim gave them:
 *   ...,"toolName":"T","conversationId":"C","turnIndex":N}
 * so re-claims, takeovers, finishes and resolutions keep them without parsing them.
 *
 * The listing indexes (LIST-6): per state, a sorted set in the row's slot (`rows:<state>` under the
 * in-flight index's hash tag), member the row's key, score its last transition (claimedAt in
 * flight, finishedAt after). Every script that changes a row's state moves the member in the same
 * atomic step (relist), best effort like the in-flight index; LIST_ROWS_LUA reads them.
 *
 * The in-flight index: every script that writes an in-flight row adds it (score leaseExpiresAt,
 * member the row's key) and every script that ends one removes it, in the same atomic step, so
 * listExpiredInFlight() reads expired claims without scanning the keyspace. The index writes use
 * pcall: a damaged index key must not fail a transition (the row is the truth); the listing reports it.
 * Every script writes its row at most once and raises only at or before that write, so an error
 * reply always means nothing was written.
 *
 * Retired claim ids (LEDGER-28): per slot, a sorted set `retired` under the in-flight index's hash
 * tag, member `<claim id>:<ledger key>` (a claim id has no ':'), score the time (server clock) until
 * which the id is refused. RETIRE_LUA adds to it and gives the whole set a TTL of the retention
 * (every member's time is at most that far ahead); a claim that carries a claim id reads its one
 * member (ZSCORE) before anything else, and a claim without one never reads it.
 *
 * Replies: {'claimed', fence, leaseExpiresAt, takeover 0|1[, stored request]} | {'existing', value} | {'released_claim', fence}
 *        | {'retired', fence or 0} | {'ok', time} | {'stale'} | {'corrupt', why} | {'released', fence} | {'none'}.
 * A claim that CREATES the row replies without the request: what it stored is the caller's own
 * argument, so sending it back would only double the bytes on the wire.
 */

const V = String(ROW_FORMAT_VERSION);

/** The row, its slot's in-flight index, its audit list, and the server clock (no functions: see WRITERS). */
const CLOCK = `
local key = KEYS[1]
local idx = KEYS[2]
-- The row's audit trail (RESOLVE-7): a list in the row's own slot (KEYS[3]), living as long as the row.
local audit = KEYS[3]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nows = string.format('%d', now)
`;

/**
 * The helpers that write a row and move its index members. Each \`local function\` is a closure
 * made on every run of a script, so the common paths (a claim that creates its row, a finish of
 * the caller's own in-flight row) run before READERS are made, and the claim's writes nothing here.
 */
const WRITERS = `
-- The listing indexes (LIST-6): per state, a sorted set in the row's slot (the in-flight index's
-- hash tag), score the row's last transition (claimedAt in flight, finishedAt after), member the
-- row's key. Moved by every script that changes the row's state, in the same atomic step; best
-- effort like the in-flight index (listRows confirms each member against its row).
local function listidx(state) return string.sub(idx, 1, #idx - 8) .. 'rows:' .. state end
local function relist(from, to, at)
  if from then redis.pcall('ZREM', listidx(from), key) end
  if to then redis.pcall('ZADD', listidx(to), at, key) end
end
-- The in-flight index (see above): best effort, never fails the transition.
local function index(lease) redis.pcall('ZADD', idx, lease, key) end
local function unindex() redis.pcall('ZREM', idx, key) end
-- One concatenation, so a large result is copied once, not once more to prepend the request.
-- A released row keeps the claim token it was released under (claim, else nil): a late copy of
-- that claim is refused (LEDGER-27).
local function finished(state, fence, claimed, nreq, effect, tool, request, text, claim)
  local kept = ''
  if claim then kept = ',"claim":"' .. claim .. '"' end
  return '{"v":${V},"state":"' .. state .. '","fence":' .. fence .. ',"claimedAt":' .. claimed ..
    ',"requestBytes":' .. nreq .. ',"finishedAt":' .. nows .. kept .. ',"effect":"' .. effect .. '","toolName":' .. tool .. '}\\n' ..
    request .. text
end
-- Finished and released rows live retentionMs more (never 0: the adapter refuses a retention below its floor).
-- from: the state the row leaves (its listing index loses it), to: the state written.
-- trail: whether the row may have an audit trail (see FINISH_LUA; every other caller passes true).
local function store_finished(value, retention, from, to, trail)
  redis.call('SET', key, value, 'PX', retention)
  relist(from, to, nows)
  -- A finished row expires retentionMs after finishedAt (its score): older members of this state's
  -- index name rows Redis has removed. Dropped as rows of the state are written (here on every
  -- transition, on one in 8 of FINISH_FAST's), so the index stays about one retention long
  -- (listRows skips any that remain).
  redis.pcall('ZREMRANGEBYSCORE', listidx(to), '-inf', string.format('(%d', now - tonumber(retention)))
  -- The trail expires with the row (a no-op when there is none).
  if trail then redis.call('PEXPIRE', audit, retention) end
end
`;

/** A row's header: state, fence, claimedAt, requestBytes, the rest (READERS' header()). */
const ROW_HEADER = `^{"v":${V},"state":"([%a_]+)","fence":(%d+),"claimedAt":(%d+),"requestBytes":(%d+),(.*)}$`;
/** The rest of an in-flight header: leaseExpiresAt, claim token, effect, toolName and the tail (READERS' inflight()). */
const INFLIGHT_REST = `^"leaseExpiresAt":(%d+),"claim":"([%w%._%-]*)","effect":"(%a+_write)","toolName":(".*)$`;

/** The helpers that read a stored row (and append to its audit trail). */
const READERS = `
-- state, fence, claimedAt, requestBytes (string), rest-of-header, newline position;
-- or nil and why, when the value is not a row this version wrote. A row without
-- requestBytes (written before LEDGER-21) is one of those: corrupt, never absent.
local function header(value)
  local nl = string.find(value, '\\n', 1, true)
  if not nl then return nil, 'no row header' end
  local state, fence, claimed, nreq, rest = string.match(string.sub(value, 1, nl - 1),
    '${ROW_HEADER}')
  if not state then return nil, 'unreadable row header' end
  if #value < nl + tonumber(nreq) then return nil, 'row is shorter than its stored request' end
  return state, fence, claimed, nreq, rest, nl
end
-- The stored request: the first requestBytes bytes of the body (LEDGER-21).
local function request_of(value, nl, nreq)
  return string.sub(value, nl + 1, nl + tonumber(nreq))
end
-- leaseExpiresAt, claim token, effect, toolName (a JSON string) of an in-flight header's rest.
-- "toolName" is the whole tail of the header from the tool name's JSON string on: it carries the
-- row's conversationId and turnIndex when the creating claim gave them (LIST-3), so every script
-- that copies it keeps them. Rows written before LIST-3 have no tail after the tool name.
local function inflight(rest)
  return string.match(rest, '${INFLIGHT_REST}')
end
local function audit_entry(actor, action, from, to, fence, reason, outcome)
  local entry = {at = nows, actor = actor, action = action, fromState = from, toState = to, fence = fence, reason = reason}
  if outcome then entry.outcome = outcome end
  redis.call('RPUSH', audit, cjson.encode(entry))
end
-- finishedAt, effect, toolName (a JSON string) of a finished header's rest.
local function finishedrest(rest)
  return string.match(rest, '^"finishedAt":(%d+),"effect":"(%a+_write)","toolName":(".*)$')
end
-- The same of a released header's rest (it may keep a claim token before the effect).
local function releasedrest(rest)
  return string.match(rest, '^"finishedAt":(%d+),[^{}]-"effect":"(%a+_write)","toolName":(".*)$')
end
`;

const PRELUDE = CLOCK + WRITERS + READERS;

/** Where the state's text starts in a row header, after '{"v":V,"state":"'. */
const STATE_AT = `{"v":${V},"state":"`.length + 1;

/**
 * The claim's answer to a finished row (a replay) or another claim's live row (the loser of a
 * race), given before any function is made; any other row takes the general path. It accepts
 * exactly the rows the general path's header() and inflight() read as such, without a pattern over
 * the whole header: the head and the state are compared as strings, then each run of fields is
 * checked by an anchored match from where the last ended. A test holds it to the general path.
 */
const CLAIM_FAST = `
  local state, f, nreq, pos, nl = nil, nil, nil, nil, nil
  if string.sub(old, 1, ${STATE_AT - 1}) == '{"v":${V},"state":"' then f = string.find(old, '","fence":', ${STATE_AT}, true) end
  if f then state = string.sub(old, ${STATE_AT}, f - 1) end
  if state == 'completed' or state == 'failed' or state == 'unknown' or state == 'in_flight' then
    -- pos: where the header's rest starts (after requestBytes' comma); it ends with '}' before the newline.
    nreq, pos = string.match(old, '^%d+,"claimedAt":%d+,"requestBytes":(%d+),()', f + 10)
    if pos then nl = string.find(old, '\\n', pos, true) end
    if nl and nl > pos and string.byte(old, nl - 1) == 125 and #old >= nl + tonumber(nreq) then
      if state ~= 'in_flight' then return {'existing', old} end
      -- The in-flight rest: lease, claim token, effect, then the tool name's string (p: after its quote).
      local leaseAt, claim, p = string.match(old, '^"leaseExpiresAt":(%d+),"claim":"([%w%._%-]*)","effect":"%a+_write","toolName":"()', pos)
      if leaseAt and p < nl and claim ~= ARGV[7] and tonumber(leaseAt) > now then return {'existing', old} end
    end
  end
`;

/** CLAIM_LUA up to the row it found (ends inside \`if not retired\`), and from there on. */
const CLAIM_HEAD = `${CLOCK}
local lease = string.format('%d', now + tonumber(ARGV[4]))
local function claimed(fence, nreq, request, tool)
  return '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. nows .. ',"requestBytes":' .. nreq ..
    ',"leaseExpiresAt":' .. lease .. ',"claim":"' .. ARGV[7] .. '","effect":"' .. ARGV[2] .. '","toolName":' .. tool ..
    '}\\n' .. request .. ARGV[3]
end
-- A late copy of a claim its dispatch gave up on takes nothing, whatever the row: checked before
-- anything else, before the claim id could be recognised as the row's own (LEDGER-28, LEDGER-26).
local retired = false
if ARGV[8] ~= '' then
  local retiredUntil = redis.pcall('ZSCORE', KEYS[4], ARGV[8])
  if type(retiredUntil) == 'table' and retiredUntil.err then return {'corrupt', 'retired claim ids: ' .. retiredUntil.err} end
  retired = retiredUntil and tonumber(retiredUntil) > now
end
local old = false
if not retired then
  -- One call claims an absent key, or returns the value that is there (WRONGTYPE if not a string).
  -- Only this claim, the one that creates the row, stores the caller's request (#: its UTF-8 bytes).
  old = redis.pcall('SET', key, claimed('1', string.format('%d', #ARGV[6]), ARGV[6], ARGV[1]), 'NX', 'GET')
  -- Only WRONGTYPE says the row is damaged. SET is a write, so the server may also refuse it
  -- whole (OOM under noeviction, READONLY on a replica, MISCONF after a failed snapshot): nothing
  -- was written, and that refusal goes back as the error reply it is (ledger_unavailable), never
  -- as a row that cannot be read (LEDGER-12).
  if type(old) == 'table' and old.err then
    if string.sub(old.err, 1, 9) == 'WRONGTYPE' then return {'corrupt', old.err} end
    return old
  end
  if not old then
    -- The row is new: into the in-flight index and the in-flight listing (WRITERS' index() and
    -- relist(nil, 'in_flight'), written out so that this path makes no more functions).
    redis.pcall('ZADD', idx, lease, key)
    redis.pcall('ZADD', string.sub(idx, 1, #idx - 8) .. 'rows:in_flight', nows, key)
    return {'claimed', '1', lease, 0}
  end
`;
const CLAIM_REST = `end
${WRITERS}${READERS}
if retired then
  local row = redis.pcall('GET', key)
  if type(row) == 'table' and row.err then return {'corrupt', row.err} end
  if not row then return {'retired', '0'} end
  local state, fence = header(row)
  if not state then return {'corrupt', fence} end
  return {'retired', fence}
end
local state, fence, claimedAt, nreq, rest, nl = header(old)
if not state then return {'corrupt', fence} end
local nextFence = string.format('%d', tonumber(fence) + 1)
-- A re-claim keeps the first claim's request and sends it back: the re-run runs with it (LEDGER-21).
-- A plain SET drops a released row's TTL: an in-flight row never expires.
if state == 'released' then
  -- A tombstone is header and request only; anything after is not a row this version wrote.
  if #old ~= nl + tonumber(nreq) then return {'corrupt', 'text after the request of a released row'} end
  -- A late copy of the claim this row was released under: it must not take the row again (LEDGER-27).
  if string.match(rest, '^"finishedAt":%d+,"claim":"([%w%._%-]*)",') == ARGV[7] then return {'released_claim', fence} end
  local _, _, storedTool = releasedrest(rest)
  if not storedTool then return {'corrupt', 'unreadable released header'} end
  local request = request_of(old, nl, nreq)
  -- The stored tool name, conversation and turn are kept (LIST-3), as the request is.
  redis.call('SET', key, claimed(nextFence, nreq, request, storedTool))
  redis.call('PERSIST', audit)  -- an in-flight row never expires, nor does its trail
  index(lease)
  relist('released', 'in_flight', nows)
  return {'claimed', nextFence, lease, 0, request}
end
if state == 'completed' or state == 'failed' or state == 'unknown' then return {'existing', old} end
if state ~= 'in_flight' then return {'corrupt', 'unknown state ' .. state} end
local leaseAt, claim, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
-- The same claim sent again (its reply was lost): it holds the row, live or expired, with its
-- fence; the lease restarts from now and the stored request goes back (LEDGER-26).
if claim == ARGV[7] then
  redis.call('SET', key, '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. claimedAt ..
    ',"requestBytes":' .. nreq .. ',"leaseExpiresAt":' .. lease .. ',"claim":"' .. claim .. '","effect":"' .. effect ..
    '","toolName":' .. tool .. '}\\n' .. string.sub(old, nl + 1))
  index(lease)
  return {'claimed', fence, lease, 0, request_of(old, nl, nreq)}
end
if tonumber(leaseAt) > now then return {'existing', old} end
-- The owner's lease ran out: it died, hung, or lost the store (LEDGER-7).
if effect == 'keyed_write' then
  local request = request_of(old, nl, nreq)
  redis.call('SET', key, claimed(nextFence, nreq, request, tool))
  index(lease)
  relist(nil, 'in_flight', nows)  -- a new claimedAt: the member moves
  return {'claimed', nextFence, lease, 1, request}
end
if effect ~= 'unkeyed_write' then return {'corrupt', 'unknown effect ' .. effect} end
local unknown = finished('unknown', fence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), 'lease_expired')
audit_entry(ARGV[3], 'lease_expired', 'in_flight', 'unknown', fence, 'lease_expired')
store_finished(unknown, ARGV[5], 'in_flight', 'unknown', true)
unindex()
return {'existing', unknown}
`;

/**
 * claim. KEYS: 1 row, 2 in-flight index, 3 audit list, 4 the slot's retired claim ids.
 * ARGV: 1 toolName as a JSON string (followed by the header's conversationId and turnIndex
 * members when the claim gave them: stored by the claim that creates the row, kept by later ones), 2 effect, 3 owner, 4 leaseMs, 5 retentionMs, 6 request, 7 claim token
 * (the caller's claim id when it gave one, LEDGER-26), 8 the retired-set member of the caller's
 * claim id, or '' when it gave none.
 * a retired claim id (LEDGER-28) -> {'retired', the row's fence or 0}, nothing written, whatever the row;
 * in_flight under this very token -> the same claim: claimed with its fence, lease from now;
 * absent -> in_flight (fence 1, stores ARGV[6]); released -> in_flight (fence+1, keeps the stored request);
 * live in_flight or terminal -> existing; released under this very token -> {'released_claim', fence} (LEDGER-27);
 * expired in_flight: keyed_write -> takeover (fence+1, keeps the request), unkeyed_write -> unknown(lease_expired).
 */
export const CLAIM_LUA = `${CLAIM_HEAD}${CLAIM_FAST}${CLAIM_REST}`;

/** CLAIM_LUA without its fast path: what the fast path is held to (tests only, not exported by the package). */
export const CLAIM_GENERAL_LUA = `${CLAIM_HEAD}${CLAIM_REST}`;

/** Shared ownership check: the row must be in_flight AND carry exactly this fence (LEDGER-5). ARGV[1] = fence. */
const OWNED_READ = `
local old = redis.pcall('GET', key)
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'stale'} end
`;
const OWNED_CHECK = `
local state, fence, claimedAt, nreq, rest, nl = header(old)
if not state then return {'corrupt', fence} end
if state ~= 'in_flight' or fence ~= ARGV[1] then return {'stale'} end
local leaseAt, claim, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
`;

/** renew. ARGV: 1 fence, 2 leaseMs. The claim token and the body (request and owner) are copied unchanged. */
export const RENEW_LUA = `${PRELUDE}${OWNED_READ}${OWNED_CHECK}
local lease = string.format('%d', now + tonumber(ARGV[2]))
redis.call('SET', key, '{"v":${V},"state":"in_flight","fence":' .. fence .. ',"claimedAt":' .. claimedAt ..
  ',"requestBytes":' .. nreq .. ',"leaseExpiresAt":' .. lease .. ',"claim":"' .. claim .. '","effect":"' .. effect ..
  '","toolName":' .. tool .. '}\\n' .. string.sub(old, nl + 1))
index(lease)
return {'ok', lease}
`;

/**
 * The common finish, the caller's own row in flight under its fence, finished as completed, failed
 * or released, read without a pattern over the whole header: the head up to claimedAt is compared
 * as one string (state and fence), and each field after it is checked by an anchored find from
 * where the last one ended, which also gives its end. It accepts exactly the in-flight rows header() and
 * inflight() read at fence ARGV[1] (a test holds it to the general path below), and the finished header
 * is spliced from the in-flight one: claimedAt and requestBytes, then effect, toolName and the
 * header's tail with the stored request, each copied as one run of bytes. A row it does not accept
 * goes on to the general path, unchanged. The pattern it replaces cost about 19k of a finish's
 * 139k server instructions, the splice about 6k (bench/script-instructions.mjs).
 */
const FINISH_FAST = `
local head = '{"v":${V},"state":"in_flight","fence":' .. ARGV[1] .. ',"claimedAt":'
if ARGV[2] ~= 'unknown' and string.sub(old, 1, #head) == head and string.find(ARGV[1], '^%d+$') then
  -- Each end is that of the field's text and the separator after it: claimedAt, requestBytes
  -- (ending 18 bytes before b), leaseExpiresAt, the claim token (q: its closing quote), then
  -- effect and the opening quote of the tool name's JSON string (d). None can hold a newline.
  local _, a = string.find(old, '^%d+,"requestBytes":', #head + 1)
  local b, c, q, d, nl
  if a then _, b = string.find(old, '^%d+,"leaseExpiresAt":', a + 1) end
  if b then _, c = string.find(old, '^%d+,"claim":"', b + 1) end
  if c then _, q = string.find(old, '^[%w%._%-]*"', c + 1) end
  if q then _, d = string.find(old, '^,"effect":"%a+_write","toolName":"', q + 1) end
  if d then nl = string.find(old, '\\n', d, true) end
  -- The header ends with '}' after the tool name's string (at least its opening quote).
  if nl and nl > d + 1 and string.byte(old, nl - 1) == 125 then
    local nreq = tonumber(string.sub(old, a + 1, b - 18))
    if #old >= nl + nreq then
      local to = ARGV[2]
      -- A released row keeps the claim token it was released under (LEDGER-27).
      local kept = ''
      if to == 'released' then kept = ',"claim":"' .. string.sub(old, c + 1, q - 1) .. '"' end
      redis.call('SET', key, '{"v":${V},"state":"' .. to .. '","fence":' .. ARGV[1] .. ',"claimedAt":' ..
        string.sub(old, #head + 1, b - 18) .. ',"finishedAt":' .. nows .. kept .. string.sub(old, q + 1, nl + nreq) .. ARGV[4],
        'PX', ARGV[3])
      -- WRITERS' store_finished() and unindex(), written out so that this path makes no functions:
      -- the listing indexes (the finished state's trimmed to one retention), the trail, the in-flight index.
      local lists = string.sub(idx, 1, #idx - 8) .. 'rows:'
      redis.pcall('ZREM', lists .. 'in_flight', key)
      redis.pcall('ZADD', lists .. to, nows, key)
      -- The trim (store_finished's), on one finish in 8, chosen by the microseconds of the server
      -- clock: a ZREMRANGEBYSCORE is about 9k server instructions however few members it drops, and
      -- between two trims the index gains about 8 members past the retention (listRows skips them,
      -- and drops those it meets). The microseconds follow no caller's timer, so no rhythm of calls
      -- can keep missing them; 50 finishes in a row without a trim have a chance of 0.13 %.
      if tonumber(t[2]) % 8 == 0 then
        redis.pcall('ZREMRANGEBYSCORE', lists .. to, '-inf', string.format('(%d', now - tonumber(ARGV[3])))
      end
      -- A row in flight at fence 1 has no audit trail, so there is none to expire: every script that
      -- appends to a trail either writes a finished row (lease_expired, marked_unknown: no claim
      -- takes it back to fence 1) or bumps the fence (resolve), and a released row is claimed again
      -- at the next fence. A trail lives exactly as long as its row (store_finished, PERSIST).
      if ARGV[1] ~= '1' then redis.call('PEXPIRE', audit, ARGV[3]) end
      redis.pcall('ZREM', idx, key)
      return {'ok', nows}
    end
  end
end
`;

/** The general finish: every row FINISH_FAST does not take, and the only path of markUnknown. */
const FINISH_GENERAL = `${WRITERS}${READERS}${OWNED_CHECK}
if ARGV[2] == 'unknown' then
  -- The owner's own account of a lost outcome, audited with it (RESOLVE-7); the body is request then owner.
  audit_entry(string.sub(old, nl + 1 + tonumber(nreq)), 'marked_unknown', 'in_flight', 'unknown', fence, ARGV[4])
end
local kept = nil
if ARGV[2] == 'released' then kept = claim end
store_finished(finished(ARGV[2], fence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), ARGV[4], kept), ARGV[3], 'in_flight', ARGV[2], true)
unindex()
return {'ok', nows}
`;

/** complete / fail / markUnknown / release. ARGV: 1 fence, 2 new state, 3 retentionMs, 4 body. Keeps the stored request. */
export const FINISH_LUA = `${CLOCK}${OWNED_READ}${FINISH_FAST}${FINISH_GENERAL}`;

/** FINISH_LUA without its fast path: what the fast path is held to (tests only, not exported by the package). */
export const FINISH_GENERAL_LUA = `${CLOCK}${OWNED_READ}${FINISH_GENERAL}`;

/**
 * resolve (RESOLVE-1..RESOLVE-8). ARGV: 1 expected fence or '', 2 new state (completed | failed |
 * released), 3 retentionMs, 4 body, 5 actor, 6 action, 7 reason, 8 outcome. Acts on an unknown
 * row, or an in-flight one whose lease ran out; bumps the fence, keeps the request, appends the
 * audit entry; a release of an in-flight row keeps its claim token (LEDGER-27). Replies {'ok', row} | {'refused', state} | {'stale', fence} | {'corrupt', why}.
 */
export const RESOLVE_LUA = `${PRELUDE}
local old = redis.pcall('GET', key)
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'refused', 'absent'} end
local state, fence, claimedAt, nreq, rest, nl = header(old)
if not state then return {'corrupt', fence} end
if ARGV[1] ~= '' and fence ~= ARGV[1] then return {'stale', fence} end
local effect, tool, claim
if state == 'unknown' then
  local finishedAt
  finishedAt, effect, tool = finishedrest(rest)
  if not finishedAt then return {'corrupt', 'unreadable unknown header'} end
elseif state == 'in_flight' then
  local leaseAt
  leaseAt, claim, effect, tool = inflight(rest)
  if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
  if tonumber(leaseAt) > now then return {'refused', state} end
else
  return {'refused', state}
end
local nextFence = string.format('%d', tonumber(fence) + 1)
-- Releasing an in-flight row keeps its claim token, as the owner's release does (LEDGER-27): a late
-- copy of the dead owner's claim is then refused. An unknown row's claim is over (LEDGER-26).
local kept = nil
if ARGV[2] == 'released' and state == 'in_flight' then kept = claim end
local value = finished(ARGV[2], nextFence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), ARGV[4], kept)
audit_entry(ARGV[5], ARGV[6], state, ARGV[2], nextFence, ARGV[7], ARGV[8])
store_finished(value, ARGV[3], state, ARGV[2], true)
unindex()
return {'ok', value}
`;

/**
 * cancel: release an in-flight row that a claim whose reply was lost wrote. ARGV: 1 claim token,
 * 2 retentionMs. Acts only while the row is in flight under that token (no later claim took it):
 * the claimant never received the fence, so the tool did not run and a re-run is safe (LEDGER-8).
 * Replies {'released', fence} or {'none'} (absent, finished, or another claim's row).
 */
export const CANCEL_LUA = `${PRELUDE}
local old = redis.pcall('GET', key)
if type(old) == 'table' and old.err then return {'corrupt', old.err} end
if not old then return {'none'} end
local state, fence, claimedAt, nreq, rest, nl = header(old)
if not state then return {'corrupt', fence} end
if state ~= 'in_flight' then return {'none'} end
local leaseAt, claim, effect, tool = inflight(rest)
if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
if claim ~= ARGV[1] then return {'none'} end
store_finished(finished('released', fence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), '', claim), ARGV[2], 'in_flight', 'released', true)
unindex()
return {'released', fence}
`;

/**
 * retire (LEDGER-28). KEYS: 1 row, 2 in-flight index, 3 audit list, 4 the slot's retired claim ids.
 * ARGV: 1 the retired-set member (claim id ':' key), 2 claim id, 3 retentionMs, 4 '1' to release.
 * Retires the claim id until TIME + retentionMs (never shortened: ZADD GT), gives the set the
 * retention as its TTL, drops members already past theirs, and with release releases the row if
 * it is in flight under that claim id, live or expired, as FINISH_LUA's release would (fence and
 * request kept, the claim id kept: LEDGER-27). The row is read before anything is written, so a
 * corrupt reply changes nothing. Replies {'released', fence} | {'retired'} | {'corrupt', why}.
 */
export const RETIRE_LUA = `${PRELUDE}
local retired = KEYS[4]
local release = nil
if ARGV[4] == '1' then
  local old = redis.pcall('GET', key)
  if type(old) == 'table' and old.err then return {'corrupt', old.err} end
  if old then
    local state, fence, claimedAt, nreq, rest, nl = header(old)
    if not state then return {'corrupt', fence} end
    if state == 'in_flight' then
      local leaseAt, claim, effect, tool = inflight(rest)
      if not leaseAt then return {'corrupt', 'unreadable in-flight header'} end
      if claim == ARGV[2] then
        release = {finished('released', fence, claimedAt, nreq, effect, tool, request_of(old, nl, nreq), '', claim), fence}
      end
    end
  end
end
local added = redis.pcall('ZADD', retired, 'GT', string.format('%d', now + tonumber(ARGV[3])), ARGV[1])
if type(added) == 'table' and added.err then return {'corrupt', 'retired claim ids: ' .. added.err} end
redis.call('PEXPIRE', retired, ARGV[3])
redis.call('ZREMRANGEBYSCORE', retired, '-inf', nows)
if not release then return {'retired'} end
store_finished(release[1], ARGV[3], 'in_flight', 'released', true)
unindex()
return {'released', release[2]}
`;

/**
 * listExpiredInFlight on one node. KEYS[1]: one in-flight index key the node serves (it routes
 * the call); ARGV: 1 olderThanMs, 2 limit, 3.. the node's other index keys. Redis refuses declared
 * keys of several slots in one call, but a script flagged allow-cross-slot-keys may read keys of
 * any slot its node serves, so one call reads all of one node's indexes.
 * Reads the node's clock once: cutoff = TIME - olderThanMs, and returns
 * {cutoff, member, score, member, score, ...}: the `limit` entries with the oldest leases at or
 * before cutoff, oldest first; or {'corrupt', key, why} for an index key that is not a sorted set.
 * Read-only (no-writes): it changes nothing.
 */
export const LIST_EXPIRED_LUA = `#!lua flags=no-writes,allow-cross-slot-keys
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = string.format('%d', now - tonumber(ARGV[1]))
local limit = tonumber(ARGV[2])
local found = {}
local function read(k)
  local entries = redis.pcall('ZRANGE', k, '-inf', cutoff, 'BYSCORE', 'LIMIT', 0, limit, 'WITHSCORES')
  if type(entries) == 'table' and entries.err then return entries.err end
  for i = 1, #entries, 2 do found[#found + 1] = {entries[i], tonumber(entries[i + 1]), entries[i + 1]} end
end
local why = read(KEYS[1])
if why then return {'corrupt', KEYS[1], why} end
for i = 3, #ARGV do
  why = read(ARGV[i])
  if why then return {'corrupt', ARGV[i], why} end
end
table.sort(found, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
local out = {cutoff}
for i = 1, math.min(#found, limit) do
  out[#out + 1] = found[i][1]
  out[#out + 1] = found[i][3]
end
return out
`;

/**
 * listRows on one node (LIST-1, LIST-2, LIST-6). KEYS[1]: one key the node serves (it routes the
 * call). ARGV: 1 olderThanMs, 2 limit, 3 cursor's since or '', 4 cursor's key, 5 toolName or '',
 * 6 conversationId or '', 7 the row-key head (prefix .. ':{'), 8 n, 9..8+n the states, then the
 * slot tags of the node's slots. For each state and slot it reads the state's index in that slot
 * (score = last transition, member = row key) from the cursor up to cutoff = TIME - olderThanMs,
 * confirms each member against its row (present, in that state, same transition time, and the
 * tool and conversation asked for), and keeps the first `limit` matches of each index.
 * Tool and conversation are filtered here, on the row's header: they have no index of their own
 * (one per tool or conversation and slot would cost a write per transition for each), so a
 * filtered listing reads the state index's entries until it finds `limit` matches.
 * Returns {cutoff, n, key, value, ... (n pairs)}: the node's first `limit` matches, ordered by
 * (transition time, key bytes), then index, member pairs of members whose row is gone (Redis
 * expired it), for the caller to drop; or {'corrupt', key, why} for an index that is not a sorted set.
 * Read-only (no-writes): it changes nothing.
 */
export const LIST_ROWS_LUA = `#!lua flags=no-writes,allow-cross-slot-keys
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cutoff = string.format('%d', now - tonumber(ARGV[1]))
local limit = tonumber(ARGV[2])
local after = nil
if ARGV[3] ~= '' then after = tonumber(ARGV[3]) end
local afterKey, tool, conv, head = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local nstates = tonumber(ARGV[8])
-- Byte order, whatever the server's locale (Lua's < on strings uses strcoll).
local function before(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local found, gone = {}, {}
local chunk = math.max(limit, 16)
for s = 1, nstates do
  local state = ARGV[8 + s]
  for i = 9 + nstates, #ARGV do
    local ik = head .. ARGV[i] .. '}:rows:' .. state
    local lo = '-inf'
    if after then lo = string.format('%d', after) end
    local taken, offset = 0, 0
    while taken < limit do
      local entries = redis.pcall('ZRANGE', ik, lo, cutoff, 'BYSCORE', 'LIMIT', offset, chunk, 'WITHSCORES')
      if type(entries) == 'table' and entries.err then return {'corrupt', ik, entries.err} end
      for j = 1, #entries, 2 do
        local member, score = entries[j], tonumber(entries[j + 1])
        local k = string.sub(member, #head + 1, -2)
        if taken < limit and (after == nil or score > after or before(afterKey, k)) then
          local value = redis.pcall('GET', member)
          if value == false or value == nil then
            gone[#gone + 1] = ik
            gone[#gone + 1] = member
          elseif type(value) == 'string' then
            local nl = string.find(value, '\\n', 1, true)
            local ok, h = false, nil
            if nl then ok, h = pcall(cjson.decode, string.sub(value, 1, nl - 1)) end
            if ok and type(h) == 'table' and h.state == state then
              local since = h.finishedAt
              if state == 'in_flight' then since = h.claimedAt end
              if since == score and (tool == '' or h.toolName == tool) and (conv == '' or h.conversationId == conv) then
                found[#found + 1] = {score, k, value}
                taken = taken + 1
              end
            end
          end
        end
      end
      if #entries < chunk * 2 then break end
      offset = offset + chunk
    end
  end
end
table.sort(found, function(a, b) return a[1] < b[1] or (a[1] == b[1] and before(a[2], b[2])) end)
local n = math.min(#found, limit)
local out = {cutoff, n}
for i = 1, n do
  out[#out + 1] = found[i][2]
  out[#out + 1] = found[i][3]
end
for i = 1, #gone do out[#out + 1] = gone[i] end
return out
`;

/** Drop a listing index member whose row is gone. KEYS: 1 the index, 2 the row key (the member). Never touches a row that exists. */
export const FORGET_LISTED_LUA = `
if redis.call('EXISTS', KEYS[2]) == 0 then return redis.pcall('ZREM', KEYS[1], KEYS[2]) end
return 0
`;
