import { InvalidLedgerInputError, LedgerCorruptError, ResultNotStorableError, type StoredError } from "../errors/index.js";
import { ROW_FORMAT_VERSION, type ClaimRequest, type LedgerRow, type RowBase } from "../ledger.js";
import { checkClaimOrigin } from "../ledger-ops.js";
import { assertClaimId, utf8ByteLength } from "../memory-ledger.js";
import { checkLeaseMs } from "./leases.js";
import { unknownOptionName, type OptionNames } from "./options.js";

/*
 * The ledger adapter toolkit: how every ledger checks a claim's arguments, a stored error and a
 * result, and how it turns a stored row back into a LedgerRow. Each adapter maps its store's
 * columns or fields onto these and keeps only that mapping, so the adapters refuse and decode
 * alike (LEDGER-10, LEDGER-11, LEDGER-21, LEDGER-26, LIST-3).
 */

/** What one store can hold; everything else about a claim is checked the same way everywhere. */
export interface LedgerStoreLimits {
  /** Longest key in UTF-16 code units (an index entry's limit), if the store has one. */
  maxKeyLength?: number;
  /** Largest text value in UTF-8 bytes (a request, a stored error). */
  maxValueBytes?: number;
  /** False when a text value cannot hold U+0000 (PostgreSQL text). */
  storesNul?: boolean;
}

/** Longest tool name and owner a claim may carry: diagnostics, not payloads. */
export const MAX_CLAIM_LABEL_LENGTH = 1024;

/** Whether `value` is text the store keeps byte for byte: well-formed UTF-16 (UTF-8 has no lone surrogate), NUL only where stored. */
function storable(value: string, limits: Pick<LedgerStoreLimits, "storesNul">): boolean {
  return value.isWellFormed() && (limits.storesNul !== false || !value.includes("\u0000"));
}

function textRefusal(limits: Pick<LedgerStoreLimits, "storesNul">): string {
  return limits.storesNul === false ? "without NUL or lone surrogates" : "without lone surrogates";
}

/** Whether `text` is over `maxBytes` of UTF-8; counts bytes only when it could be (a code unit is 1 to 3 bytes). */
function overBytes(text: string, maxBytes: number | undefined): boolean {
  return maxBytes !== undefined && text.length * 3 > maxBytes && utf8ByteLength(text) > maxBytes;
}

/**
 * A label (a key, a tool name, an owner, a reason): a non-empty string of at most `maxLength`
 * characters that the store keeps exactly. Refused with the caller's typed error: ledgers and
 * conversation stores check labels alike.
 */
export function checkLabel(
  field: string,
  value: unknown,
  maxLength: number,
  limits: Pick<LedgerStoreLimits, "storesNul">,
  refuse: (field: string, reason: string) => Error = (f, reason) => new InvalidLedgerInputError(f, reason),
): string {
  if (typeof value !== "string" || value.length === 0 || value.length > maxLength || !storable(value, limits)) {
    throw refuse(field, `must be a non-empty string of at most ${maxLength} characters ${textRefusal(limits)}`);
  }
  return value;
}

/** Longest reason markUnknown() stores: a short word for an operator, not a payload. */
export const MAX_UNKNOWN_REASON_LENGTH = 4096;

/** markUnknown()'s reason: non-empty text the store keeps exactly. */
export function checkUnknownReason(reason: unknown, limits: LedgerStoreLimits = {}): string {
  return checkLabel("reason", reason, MAX_UNKNOWN_REASON_LENGTH, limits);
}

/** A claim key: a non-empty string the store keeps exactly, within its key length. */
export function checkLedgerKey(key: unknown, limits: LedgerStoreLimits = {}): string {
  return checkLabel("key", key, limits.maxKeyLength ?? Number.MAX_SAFE_INTEGER, limits);
}

/** A lease for claim and renew: whole milliseconds in 0..MAX_LEASE_MS, rounded up (one limit for every ledger). */
export function checkLedgerLeaseMs(leaseMs: unknown): number {
  return checkLeaseMs(leaseMs, (field, reason) => new InvalidLedgerInputError(field, reason));
}

/** Every member a claim request has, named once (a member added to ClaimRequest must be added here). */
const CLAIM_MEMBERS: OptionNames<ClaimRequest> = { key: true, toolName: true, effect: true, owner: true, leaseMs: true, request: true, claimId: true, conversationId: true, turnIndex: true };

/**
 * Every argument of a claim, checked once and alike for every ledger, before anything is sent:
 * refused with invalid_ledger_input naming the field. Returns the lease in whole milliseconds.
 * The request is stored and returned byte for byte (LEDGER-21), so it must be text the store
 * holds exactly; it may be empty.
 */
export function checkClaimRequest(request: ClaimRequest, limits: LedgerStoreLimits = {}): number {
  if (typeof request !== "object" || request === null) throw new InvalidLedgerInputError("request", "a claim request object is required");
  // A misspelt member (conversationID, turnIdx) would be ignored, and the row stored without the
  // conversation or turn an operator lists it by (LIST-3). One pass over a handful of own names.
  const unknownMember = unknownOptionName(request, CLAIM_MEMBERS);
  if (unknownMember !== undefined) throw new InvalidLedgerInputError(unknownMember, `is not a member of a claim request (its members: ${Object.keys(CLAIM_MEMBERS).join(", ")})`);
  checkLedgerKey(request.key, limits);
  checkLabel("toolName", request.toolName, MAX_CLAIM_LABEL_LENGTH, limits);
  checkLabel("owner", request.owner, MAX_CLAIM_LABEL_LENGTH, limits);
  if (request.effect !== "keyed_write" && request.effect !== "unkeyed_write") {
    throw new InvalidLedgerInputError("effect", `must be keyed_write or unkeyed_write, not ${String(request.effect)}`);
  }
  const leaseMs = checkLedgerLeaseMs(request.leaseMs);
  const text = (request as { request?: unknown }).request;
  if (typeof text !== "string" || !storable(text, limits)) {
    throw new InvalidLedgerInputError("request", `must be the call's request as a string ${textRefusal(limits)}`);
  }
  if (overBytes(text, limits.maxValueBytes)) {
    throw new InvalidLedgerInputError("request", `is over the store's ${limits.maxValueBytes} bytes for one value`);
  }
  assertClaimId(request.claimId);
  checkClaimOrigin(request);
  if (request.conversationId !== undefined && !storable(request.conversationId, limits)) {
    throw new InvalidLedgerInputError("conversationId", `must be a string ${textRefusal(limits)}`);
  }
  return leaseMs;
}

/**
 * fail()'s error, checked and serialised: a StoredError ({ name, message, code?, details? })
 * whose JSON text reads back as one (LEDGER-8), within the store's value size. Returns the text.
 */
export function checkStoredError(error: unknown, limits: LedgerStoreLimits = {}, field = "error"): string {
  const e = error as Partial<StoredError> | null;
  if (typeof e !== "object" || e === null || Array.isArray(e) || typeof e.name !== "string" || typeof e.message !== "string" || (e.code !== undefined && typeof e.code !== "string")) {
    throw new InvalidLedgerInputError(field, "must be a StoredError { name: string, message: string, code?: string, details? }");
  }
  let text: string | undefined;
  try {
    text = JSON.stringify(e);
  } catch (cause) {
    throw new InvalidLedgerInputError(field, `is not JSON-serialisable: ${cause instanceof Error ? cause.message : String(cause)}`);
  }
  // JSON.stringify escapes NUL and lone surrogates, so the text is storable; only its size is left.
  if (overBytes(text, limits.maxValueBytes)) throw new InvalidLedgerInputError(field, `is over the store's ${limits.maxValueBytes} bytes for one value`);
  return text;
}

/**
 * Why complete() cannot store `result`, or undefined when it can (LEDGER-10): not text, text the
 * store cannot keep byte for byte, or over maxResultBytes. Returned rather than thrown, so each
 * ledger can answer a stale fence first, as the reference ledger does.
 */
export function resultRefusal(key: string, result: unknown, maxResultBytes: number, limits: LedgerStoreLimits = {}): ResultNotStorableError | undefined {
  if (typeof result !== "string") return new ResultNotStorableError(key, "the result is not JSON text (a string)");
  if (overBytes(result, maxResultBytes)) {
    return new ResultNotStorableError(key, `${utf8ByteLength(result)} bytes exceeds the ledger's limit of ${maxResultBytes}`);
  }
  if (!storable(result, limits)) {
    return new ResultNotStorableError(key, `it contains ${limits.storesNul === false ? "NUL or " : ""}a lone surrogate, which the store cannot hold byte for byte`);
  }
  return undefined;
}

/**
 * A stored row as the store gives it: primitive values (strings, numbers, null), not yet
 * trusted. Absent optional values are null or undefined. Each adapter maps its columns or
 * fields onto these names; the state's own text (owner, result, error JSON, reason) goes in its
 * field, as a string: a binary column's bytes (a Buffer) are decoded as UTF-8 first, or the row
 * is refused as corrupt. Whatever else a store keeps (claim id, retention deadline) stays with
 * the adapter and never reaches the row callers see; read it only from a row that decoded.
 */
export interface StoredLedgerFields {
  /** The row format version (LEDGER-11). */
  v: unknown;
  /** The key as stored, when the store keeps it beside the row: it must be the key looked up. */
  key?: unknown;
  state: unknown;
  toolName: unknown;
  effect: unknown;
  fence: unknown;
  claimedAt: unknown;
  request: unknown;
  conversationId?: unknown;
  turnIndex?: unknown;
  owner?: unknown;
  leaseExpiresAt?: unknown;
  result?: unknown;
  /** The stored error's JSON text. */
  error?: unknown;
  reason?: unknown;
  finishedAt?: unknown;
}

export interface DecodeLedgerRowOptions {
  /**
   * The driver returns 64-bit integers as decimal text (pg's bigint): accept canonical digits too.
   * @default false (only numbers are accepted as stored integers)
   * @example decodeLedgerColumns(raw.key, raw, { integersAsText: true })
   */
  integersAsText?: boolean;
}

/** A LedgerCorruptError naming the field; a row that cannot be read is never treated as absent (LEDGER-11). */
function corrupt(key: string, field: string, problem: string, cause?: unknown): LedgerCorruptError {
  return new LedgerCorruptError(key, `field ${field} ${problem}`, cause === undefined ? undefined : { cause });
}

function describe(value: unknown): string {
  if (value === null) return "missing (null)";
  if (value === undefined) return "missing";
  if (typeof value === "string") return `${JSON.stringify(value.length > 40 ? `${value.slice(0, 40)}…` : value)}`;
  if (typeof value === "number") return String(value);
  return `a ${typeof value === "object" ? (Buffer.isBuffer(value) ? "binary value" : "object") : typeof value}`;
}

const DIGITS = /^(0|[1-9][0-9]{0,15})$/;

/** A stored non-negative safe integer (a time, a fence, a turn index): anything else is corruption. */
export function decodeStoredInteger(key: string, field: string, value: unknown, options: DecodeLedgerRowOptions = {}): number {
  const n = typeof value === "number" ? value : options.integersAsText === true && typeof value === "string" && DIGITS.test(value) ? Number(value) : NaN;
  if (!Number.isSafeInteger(n) || n < 0) throw corrupt(key, field, `is ${describe(value)}, expected a non-negative integer`);
  return n;
}

function decodeText(key: string, field: string, value: unknown): string {
  if (typeof value !== "string") throw corrupt(key, field, `is ${describe(value)}, expected text`);
  return value;
}

/** A stored error's JSON text, read back as the StoredError it was (LEDGER-8), members as stored. */
export function decodeStoredError(key: string, text: unknown): StoredError {
  const source = decodeText(key, "error", text);
  let parsed: unknown;
  try {
    parsed = JSON.parse(source);
  } catch (cause) {
    throw corrupt(key, "error", "is not JSON", cause);
  }
  const e = parsed as Record<string, unknown> | null;
  if (typeof e !== "object" || e === null || Array.isArray(e)) throw corrupt(key, "error", "is not a JSON object");
  if (typeof e.name !== "string" || typeof e.message !== "string") throw corrupt(key, "error", "lacks a string name and message");
  if (e.code !== undefined && typeof e.code !== "string") throw corrupt(key, "error", "has a code that is not a string");
  return e as unknown as StoredError;
}

/**
 * A stored row, checked field by field, as the LedgerRow it was written as. Anything this
 * version did not write (another format version, an unknown state or effect, a fence below 1,
 * a time that is not a non-negative integer, missing text, a NULL request from before LEDGER-21,
 * an error that is not a StoredError) raises LedgerCorruptError naming the field: never
 * "absent" (LEDGER-11). Result and request are returned as stored, never re-serialised
 * (LEDGER-10, LEDGER-21). Decode before asking anything of the row's other columns: a row past
 * its retention (LEDGER-19) is forgotten only once it decoded; one that does not decode is
 * ledger_corrupt whatever its retention column says (a row of another format version, or a
 * damaged one, taken for forgotten is a finished call claimed again).
 */
export function decodeLedgerRow(key: string, fields: StoredLedgerFields, options: DecodeLedgerRowOptions = {}): LedgerRow {
  if (fields.v !== ROW_FORMAT_VERSION && !(options.integersAsText === true && fields.v === String(ROW_FORMAT_VERSION))) {
    throw corrupt(key, "v", `(format version) is ${describe(fields.v)}, not ${ROW_FORMAT_VERSION}`);
  }
  if (fields.key !== undefined && fields.key !== key) throw corrupt(key, "key", `is ${describe(fields.key)}, not the key looked up`);
  const effect = fields.effect;
  if (effect !== "keyed_write" && effect !== "unkeyed_write") throw corrupt(key, "effect", `is ${describe(effect)}, not keyed_write or unkeyed_write`);
  const fence = decodeStoredInteger(key, "fence", fields.fence, options);
  if (fence < 1) throw corrupt(key, "fence", "is 0, expected a positive integer");
  // A row written before the request column existed has none: a re-run could not send the
  // first request, so the row is unreadable, never absent (LEDGER-11, LEDGER-21).
  if (fields.request === null || fields.request === undefined) throw corrupt(key, "request", "is missing (a row written before LEDGER-21 stored requests)");
  // Built member by member, in the order the spread form `{ ...base, state, ... }` had: V8 takes
  // a spread followed by more members on a slow path, which cost ~20 µs a row (loaded machine,
  // against ~0.2 µs this way), on every read and every claim that finds a row.
  const row: RowBase & Record<string, unknown> = {
    key,
    toolName: decodeText(key, "toolName", fields.toolName),
    effect,
    fence,
    claimedAt: decodeStoredInteger(key, "claimedAt", fields.claimedAt, options),
    request: decodeText(key, "request", fields.request),
  };
  // Optional (LIST-3): absent from rows claimed without them or written before they existed.
  if (fields.conversationId !== null && fields.conversationId !== undefined) {
    if (typeof fields.conversationId !== "string" || fields.conversationId.length === 0) {
      throw corrupt(key, "conversationId", `is ${describe(fields.conversationId)}, expected non-empty text`);
    }
    row.conversationId = fields.conversationId;
  }
  if (fields.turnIndex !== null && fields.turnIndex !== undefined) row.turnIndex = decodeStoredInteger(key, "turnIndex", fields.turnIndex, options);
  switch (fields.state) {
    case "in_flight":
      row.state = "in_flight";
      row.owner = decodeText(key, "owner", fields.owner);
      row.leaseExpiresAt = decodeStoredInteger(key, "leaseExpiresAt", fields.leaseExpiresAt, options);
      break;
    case "completed":
      row.state = "completed";
      row.result = decodeText(key, "result", fields.result);
      row.finishedAt = decodeStoredInteger(key, "finishedAt", fields.finishedAt, options);
      break;
    case "failed":
      row.state = "failed";
      row.error = decodeStoredError(key, fields.error);
      row.finishedAt = decodeStoredInteger(key, "finishedAt", fields.finishedAt, options);
      break;
    case "unknown":
      row.state = "unknown";
      row.reason = decodeText(key, "reason", fields.reason);
      row.finishedAt = decodeStoredInteger(key, "finishedAt", fields.finishedAt, options);
      break;
    case "released":
      row.state = "released";
      row.finishedAt = decodeStoredInteger(key, "finishedAt", fields.finishedAt, options);
      break;
    default:
      throw corrupt(key, "state", `is ${describe(fields.state)}, not a row state`);
  }
  return row as unknown as LedgerRow;
}

/**
 * A row of a SQL ledger table as its driver returns it, in the column names both SQL ledgers
 * use (snake_case); columns added later (conversation_id, turn_index) may be absent.
 */
export interface StoredLedgerColumns {
  key?: unknown;
  v: unknown;
  state: unknown;
  tool_name: unknown;
  effect: unknown;
  fence: unknown;
  claimed_at: unknown;
  request: unknown;
  conversation_id?: unknown;
  turn_index?: unknown;
  owner: unknown;
  lease_expires_at: unknown;
  result: unknown;
  error: unknown;
  reason: unknown;
  finished_at: unknown;
}

/** decodeLedgerRow for a SQL ledger's columns. */
export function decodeLedgerColumns(key: string, c: StoredLedgerColumns, options: DecodeLedgerRowOptions = {}): LedgerRow {
  return decodeLedgerRow(
    key,
    {
      v: c.v,
      key: c.key,
      state: c.state,
      toolName: c.tool_name,
      effect: c.effect,
      fence: c.fence,
      claimedAt: c.claimed_at,
      request: c.request,
      conversationId: c.conversation_id,
      turnIndex: c.turn_index,
      owner: c.owner,
      leaseExpiresAt: c.lease_expires_at,
      result: c.result,
      error: c.error,
      reason: c.reason,
      finishedAt: c.finished_at,
    },
    options,
  );
}

const EXPIRED_IN_FLIGHT_MEMBERS: Readonly<Record<string, true>> = { olderThanMs: true, limit: true };

/**
 * listExpiredInFlight()'s options: an object of `olderThanMs?` and `limit?` only. A misspelt
 * `olderThan` read as absent lists claims whose lease ran out a moment ago, and a tool that
 * releases what it lists as abandoned (after a grace it meant to ask for) would release a
 * paused owner's claim with no grace at all. Refused with invalid_ledger_input naming it.
 * Member names only: the values (`olderThanMs` a non-negative integer, `limit` an integer from 1 to 10,000 as the memory ledger takes it, default
 * 100) are the adapter's to refuse, with invalid_ledger_input naming the field.
 */
export function checkExpiredInFlightOptions(options: unknown): void {
  if (typeof options !== "object" || options === null || Array.isArray(options)) throw new InvalidLedgerInputError("options", "expected { olderThanMs?, limit? }");
  const unknown = unknownOptionName(options, EXPIRED_IN_FLIGHT_MEMBERS);
  if (unknown !== undefined) throw new InvalidLedgerInputError(unknown, "is not an option of listExpiredInFlight (its options: olderThanMs, limit)");
}
