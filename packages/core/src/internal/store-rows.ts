import { canonicalize, type JsonValue } from "../canonical.js";
import { LEASE_GRANT_ID_PATTERN, type CommittedCallKey, type MessageState, type StoredMessage, type StoredTurn } from "../conversation.js";
import { InvalidStoreInputError, StoreCorruptError, isDispatchOnceError } from "../errors/index.js";
import { checkLeaseMs } from "./leases.js";
import { MAX_CLAIM_LABEL_LENGTH, checkLabel } from "./ledger-rows.js";
import { unknownOptionName } from "./options.js";

/*
 * Helpers for conversation-store implementers: one place for what every store that keeps
 * messages and turns as JSON text must do the same way, so the stores agree byte for byte and
 * refuse and decode alike (TURN-7, TURN-14).
 */

/**
 * JSON text of a value a store must give back deep-equal. `canonicalize` refuses exactly what
 * JSON cannot carry (NaN and ±Infinity, lone surrogates, undefined in arrays, bigint, Dates and
 * other class instances, cycles, symbol keys, nesting past 512), so its check is reused; the
 * stored text is JSON.stringify's, which keeps the caller's member order.
 */
export function encodeStoreJson(field: string, value: unknown): string {
  checkStoreJson(field, value);
  return JSON.stringify(value);
}

/** TURN-18's check alone, for a store that keeps values rather than their text (MemoryConversationStore). */
export function checkStoreJson(field: string, value: unknown): void {
  try {
    canonicalize(value);
  } catch (error) {
    if (isDispatchOnceError(error, "not_canonicalizable")) {
      throw new InvalidStoreInputError(field, `cannot be stored as JSON and read back equal: ${error.message}`);
    }
    throw error;
  }
}

/**
 * The value of stored JSON text; text that does not parse is corruption, never "absent". Keep the
 * text in a text column: a driver may hand a JSON column type back parsed (mysql2 does, unless
 * `jsonStrings: true`), which is not text and so `store_corrupt`, and a server's JSON type may
 * refuse what TURN-18 keeps (MariaDB's JSON_VALID check refuses nesting deeper than 32).
 */
export function decodeStoreJson(conversationId: string, what: string, text: unknown): JsonValue {
  if (typeof text !== "string") throw new StoreCorruptError(conversationId, `${what} is not JSON text (${text === null ? "null" : typeof text})`);
  try {
    return JSON.parse(text) as JsonValue;
  } catch (cause) {
    throw new StoreCorruptError(conversationId, `${what} is not valid JSON`, { cause });
  }
}

/** A message row as a driver returns it: column values, not yet trusted. */
export interface StoredMessageRow {
  message_id: string;
  seq: unknown;
  state: unknown;
  content: unknown;
  turn_index: unknown;
  failure: unknown;
  /**
   * The first failure's time (TURN-12), for a store that declares `supports.reopenWindow`: a
   * reopened message's is kept across reopens. Leave it out of a store without the flag.
   */
  first_failed_at?: unknown;
  /** TURN-11's first binding time (store clock, ms); NULL or absent where the store never kept it. */
  bound_at?: unknown;
}

/** A turn row as a driver returns it: column values, not yet trusted. */
export interface StoredTurnRow {
  turn_index: unknown;
  message_id: string;
  assistant: unknown;
  tool_results: unknown;
  stop_reason: unknown;
  /** TURN-24's committed call keys as JSON text, for a store that declares `supports.callKeys`; NULL or absent for a turn committed without them. */
  call_keys?: unknown;
}

const STATES: ReadonlySet<string> = new Set<MessageState>(["queued", "in_progress", "answered", "failed"]);

function isCount(value: unknown, min: number): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= min;
}

/** A stored message, checked field by field: anything unexpected is store_corrupt, never "absent". */
export function decodeStoredMessage(conversationId: string, row: StoredMessageRow): StoredMessage {
  const what = `message ${row.message_id}`;
  if (typeof row.state !== "string" || !STATES.has(row.state)) throw new StoreCorruptError(conversationId, `${what} has state ${String(row.state)}`);
  if (!isCount(row.seq, 1)) throw new StoreCorruptError(conversationId, `${what} has seq ${String(row.seq)}`);
  const out: StoredMessage = {
    id: row.message_id,
    content: decodeStoreJson(conversationId, `content of ${what}`, row.content),
    seq: row.seq,
    state: row.state as MessageState,
  };
  if (row.turn_index !== null) {
    if (!isCount(row.turn_index, 0)) throw new StoreCorruptError(conversationId, `${what} has turn index ${String(row.turn_index)}`);
    out.turnIndex = row.turn_index;
  } else if (row.state !== "queued") {
    throw new StoreCorruptError(conversationId, `${what} is ${row.state} but was never bound to a turn index`);
  }
  if (row.state === "failed") out.failure = decodeStoreJson(conversationId, `failure of ${what}`, row.failure);
  // Shown only while reopened (queued or in progress after a failure): a never-failed message
  // has none, and a failed or answered one is not resumed (TURN-12).
  if ((row.state === "queued" || row.state === "in_progress") && row.first_failed_at !== undefined && row.first_failed_at !== null) {
    out.firstFailedAt = storeTime(conversationId, `${what} has first failure time`, row.first_failed_at);
  }
  // Shown in every state once bound; NULL on a row bound before the store kept it (TURN-11).
  if (row.bound_at !== undefined && row.bound_at !== null) out.boundAt = storeTime(conversationId, `${what} has binding time`, row.bound_at);
  return out;
}

/** A store-clock time in ms (a BIGINT may come back as a string of digits), else store_corrupt. */
function storeTime(conversationId: string, what: string, value: unknown): number {
  const at = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
  if (!isCount(at, 0)) throw new StoreCorruptError(conversationId, `${what} ${String(value)}`);
  return at;
}

/** A stored turn, checked field by field. */
export function decodeStoredTurn(conversationId: string, row: StoredTurnRow): StoredTurn {
  if (!isCount(row.turn_index, 0)) throw new StoreCorruptError(conversationId, `a turn has index ${String(row.turn_index)}`);
  const what = `turn ${row.turn_index}`;
  if (row.stop_reason !== null && typeof row.stop_reason !== "string") throw new StoreCorruptError(conversationId, `${what} has a stop reason that is not text`);
  const turn: StoredTurn = {
    turnIndex: row.turn_index,
    messageId: row.message_id,
    assistant: decodeStoreJson(conversationId, `assistant message of ${what}`, row.assistant),
    stopReason: row.stop_reason,
  };
  if (row.tool_results !== null) turn.toolResults = decodeStoreJson(conversationId, `tool results of ${what}`, row.tool_results);
  if (row.call_keys !== undefined && row.call_keys !== null) {
    const keys = decodeStoreJson(conversationId, `call keys of ${what}`, row.call_keys);
    try {
      turn.callKeys = checkCallKeys(keys);
    } catch (cause) {
      // Checked on the way in: anything else read back was changed in storage.
      throw new StoreCorruptError(conversationId, `call keys of ${what} are malformed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    }
  }
  return turn;
}

/** Longest call id and key a committed call's key entry may carry (TURN-24): ids, not payloads (a ledger's MAX_CLAIM_LABEL_LENGTH). */
export const MAX_CALL_KEY_LABEL_LENGTH = MAX_CLAIM_LABEL_LENGTH;

const CALL_KEY_MEMBERS: ReadonlySet<string> = new Set(["callId", "key", "ordinal", "carriedFromTurn"]);

/**
 * A turn commit's `callKeys` (TURN-24), checked before anything is stored: an array of
 * `{ callId, key, ordinal?, carriedFromTurn? }` with non-empty ids the store keeps exactly and
 * counts that are safe integers from 0, nothing else. Refused with `invalid_store_input` naming
 * `callKeys` (and the entry); returns a copy holding only the checked members.
 */
export function checkCallKeys(value: unknown, limits: { storesNul?: boolean } = {}): CommittedCallKey[] {
  const refuse = (field: string, reason: string) => new InvalidStoreInputError(field, reason);
  if (!Array.isArray(value)) throw refuse("callKeys", "expected an array of { callId, key, ordinal?, carriedFromTurn? }");
  return value.map((entry: unknown, i): CommittedCallKey => {
    const field = `callKeys[${i}]`;
    if (typeof entry !== "object" || entry === null || Array.isArray(entry)) throw refuse(field, "expected an object { callId, key, ordinal?, carriedFromTurn? }");
    const unknown = Object.keys(entry).find((name) => !CALL_KEY_MEMBERS.has(name));
    if (unknown !== undefined) throw refuse(`${field}.${unknown}`, "is not a member of a committed call's key (callId, key, ordinal, carriedFromTurn)");
    const e = entry as Record<string, unknown>;
    const out: CommittedCallKey = {
      callId: checkLabel(`${field}.callId`, e.callId, MAX_CALL_KEY_LABEL_LENGTH, limits, refuse),
      key: checkLabel(`${field}.key`, e.key, MAX_CALL_KEY_LABEL_LENGTH, limits, refuse),
    };
    for (const name of ["ordinal", "carriedFromTurn"] as const) {
      const count = e[name];
      if (count === undefined) continue;
      if (!isCount(count, 0)) throw refuse(`${field}.${name}`, `must be a safe integer, 0 or more, got ${describeCount(count)}`);
      out[name] = count;
    }
    return out;
  });
}

/** The JSON text a durable store keeps of `callKeys`, checked (TURN-24); null when absent. */
export function encodeCallKeys(value: unknown, limits: { storesNul?: boolean } = {}): string | null {
  return value === undefined ? null : JSON.stringify(checkCallKeys(value, limits));
}

function describeCount(value: unknown): string {
  return typeof value === "number" ? String(value) : typeof value;
}

/**
 * TURN-15 for stores that keep, per conversation, the turn index begun last and the fence that
 * first began it (`begunTurn`, `begunFence`, both null before any turn was begun): whether
 * beginning `turnIndex` under `fence` resumes an earlier grant's turn, and whether the store
 * must now write (`turnIndex`, `fence`) as the index begun last (only when the index is new:
 * the FIRST fence to begin an index is what later grants are compared with). A fence of 0
 * stands for an unknown earlier grant (rows written before the columns existed).
 */
export function beginTurnIndex(
  conversationId: string,
  begun: { begunTurn: unknown; begunFence: unknown },
  turnIndex: number,
  fence: number,
): { resumed: boolean; write: boolean } {
  const { begunTurn, begunFence } = begun;
  if (begunTurn === null && begunFence === null) return { resumed: false, write: true };
  if (!isCount(begunTurn, 0) || !isCount(begunFence, 0)) {
    throw new StoreCorruptError(conversationId, `the turn begun last is ${String(begunTurn)} under fence ${String(begunFence)}`);
  }
  if (begunTurn === turnIndex) return { resumed: begunFence !== fence, write: false };
  return { resumed: false, write: true };
}

/** Longest turn-lease owner a conversation store accepts: a ledger claim's owner limit. */
export const MAX_LEASE_OWNER_LENGTH = MAX_CLAIM_LABEL_LENGTH;

/**
 * A turn lease's owner, checked alike by every conversation store before it touches its store
 * (TURN-10), as a ledger checks a claim's owner: a non-empty string of at most
 * MAX_LEASE_OWNER_LENGTH characters that the store keeps exactly (well-formed; no NUL where the
 * store's text cannot hold one, `storesNul: false`). Stores that checked this each in their own
 * way disagreed: one configured owner was refused by one store and taken by another.
 */
export function checkLeaseOwner(owner: unknown, limits: { storesNul?: boolean } = {}): string {
  return checkLabel("owner", owner, MAX_LEASE_OWNER_LENGTH, limits, (field, reason) => new InvalidStoreInputError(field, reason));
}

/** A turn lease's length for acquireLease and renewLease: LEDGER-29's one limit (0..MAX_LEASE_MS, rounded up), refused with invalid_store_input. */
export function checkTurnLeaseMs(leaseMs: unknown): number {
  return checkLeaseMs(leaseMs, (field, reason) => new InvalidStoreInputError(field, reason));
}

/**
 * `appendUserMessage`'s options (TURN-12, `supports.reopenWindow`), checked alike by every store
 * that declares the flag, before it touches its store: absent, or an object whose
 * `reopenWithinMs` is absent or a finite number of milliseconds, 0 or more (0: never reopen);
 * refused with invalid_store_input. Returns the window, or undefined for none.
 */
export function checkReopenWithinMs(options: unknown): number | undefined {
  if (options === undefined) return undefined;
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new InvalidStoreInputError("options", "must be an object ({ reopenWithinMs })");
  }
  // A misspelt reopenWithinMs was ignored, and a failed message reopened past its window (TURN-12).
  const unknown = Object.keys(options).find((name) => name !== "reopenWithinMs");
  if (unknown !== undefined) throw new InvalidStoreInputError(`options.${unknown}`, "is not an option of appendUserMessage (its options: reopenWithinMs)");
  const ms = (options as { reopenWithinMs?: unknown }).reopenWithinMs;
  if (ms === undefined) return undefined;
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) {
    throw new InvalidStoreInputError("reopenWithinMs", "must be a finite number of milliseconds, 0 or more");
  }
  return ms;
}

/**
 * A turn lease's grant id (TURN-10), checked alike by every store that declares
 * `supports.leaseGrants`, before it touches its store: absent (undefined) where it is optional
 * (acquireLease), else a string matching LEASE_GRANT_ID_PATTERN; refused with
 * invalid_store_input naming `grantId`.
 */
export function checkLeaseGrantId(grantId: unknown, options: { required?: boolean } = {}): string | undefined {
  if (grantId === undefined && options.required !== true) return undefined;
  if (typeof grantId !== "string" || !LEASE_GRANT_ID_PATTERN.test(grantId)) {
    throw new InvalidStoreInputError("grantId", `must match ${LEASE_GRANT_ID_PATTERN.source} (see newLeaseGrantId), got ${describeGrantId(grantId)}`);
  }
  return grantId;
}

function describeGrantId(value: unknown): string {
  if (typeof value === "string") return value.length > 80 ? `a string of ${value.length} characters` : JSON.stringify(value);
  if (value === null) return "null";
  return typeof value;
}

/**
 * appendUserMessage()'s message: an object of `id` and `content` only, checked before the id and
 * the content are (ERR-1). A member it does not have (a `role`, an `idempotencyKey`) was dropped
 * from the stored message without a word, and a caller that meant it to deduplicate re-sends did
 * not learn that only the id does (TURN-2). Refused with invalid_store_input naming it.
 */
export function checkUserMessage(message: unknown): void {
  if (typeof message !== "object" || message === null || Array.isArray(message)) throw new InvalidStoreInputError("message", "must be an object { id, content }");
  const unknown = unknownOptionName(message, USER_MESSAGE_MEMBERS);
  if (unknown !== undefined) throw new InvalidStoreInputError(`message.${unknown}`, "is not a member of a user message (its members: id, content)");
}

const USER_MESSAGE_MEMBERS: Readonly<Record<string, true>> = { id: true, content: true };
