import {
  LedgerCorruptError,
  ROW_FORMAT_VERSION,
  type LedgerEffect,
  type LedgerRow,
  type StoredError,
} from "@dispatch-once/core";

/** A row as better-sqlite3 returns it: column values, not yet trusted. */
export interface RawRow {
  key: unknown;
  v: unknown;
  state: unknown;
  tool_name: unknown;
  effect: unknown;
  fence: unknown;
  claimed_at: unknown;
  owner: unknown;
  lease_expires_at: unknown;
  result: unknown;
  error: unknown;
  reason: unknown;
  finished_at: unknown;
  expires_at: unknown;
  request: unknown;
  conversation_id?: unknown;
  turn_index?: unknown;
}

/** A decoded row plus the retention deadline the adapter keeps beside it. */
export interface DecodedRow {
  row: LedgerRow;
  expiresAt: number | null;
}

function corrupt(key: string, message: string, cause?: unknown): LedgerCorruptError {
  return new LedgerCorruptError(key, message, cause === undefined ? undefined : { cause });
}

function text(key: string, raw: RawRow, column: keyof RawRow): string {
  const value = raw[column];
  if (typeof value !== "string") throw corrupt(key, `column ${column} is ${describe(value)}, expected text`);
  return value;
}

function num(key: string, raw: RawRow, column: keyof RawRow): number {
  const value = raw[column];
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw corrupt(key, `column ${column} is ${describe(value)}, expected a number`);
  }
  return value;
}

function describe(value: unknown): string {
  if (value === null) return "NULL";
  if (Buffer.isBuffer(value)) return "a BLOB";
  return typeof value;
}

function decodeError(key: string, raw: RawRow): StoredError {
  const source = text(key, raw, "error");
  let parsed: unknown;
  try {
    parsed = JSON.parse(source);
  } catch (cause) {
    throw corrupt(key, "column error is not JSON", cause);
  }
  if (
    typeof parsed !== "object" ||
    parsed === null ||
    Array.isArray(parsed) ||
    typeof (parsed as { name?: unknown }).name !== "string" ||
    typeof (parsed as { message?: unknown }).message !== "string"
  ) {
    throw corrupt(key, "column error is not a stored error ({name, message, ...})");
  }
  const code = (parsed as { code?: unknown }).code;
  if (code !== undefined && typeof code !== "string") throw corrupt(key, "stored error code is not a string");
  return parsed as StoredError;
}

/**
 * Decode and validate a stored row. Anything unexpected (another format version, an
 * unknown state or effect, a missing column, a NULL request) raises LedgerCorruptError: a
 * row that cannot be read is never treated as absent (LEDGER-11). The result and request
 * columns are returned as stored, never parsed or re-serialised (LEDGER-10, LEDGER-21).
 */
export function decodeRow(key: string, raw: RawRow): DecodedRow {
  if (raw.v !== ROW_FORMAT_VERSION) {
    throw corrupt(key, `format version ${String(raw.v)} is not ${ROW_FORMAT_VERSION}`);
  }
  const storedKey = text(key, raw, "key");
  if (storedKey !== key) throw corrupt(key, "stored key differs from the key looked up");
  const toolName = text(key, raw, "tool_name");
  const effect = raw.effect;
  if (effect !== "keyed_write" && effect !== "unkeyed_write") {
    throw corrupt(key, `unknown effect ${JSON.stringify(effect)}`);
  }
  const fence = num(key, raw, "fence");
  if (!Number.isSafeInteger(fence) || fence < 1) throw corrupt(key, `fence ${fence} is not a positive integer`);
  const claimedAt = num(key, raw, "claimed_at");
  // A row written before the request column existed has none: the re-run could not send the
  // first request, so the row is unreadable, never absent (LEDGER-11, LEDGER-21).
  if (raw.request === null) throw corrupt(key, "column request is NULL (a row written before the request column existed)");
  const request = text(key, raw, "request");
  const base: { key: string; toolName: string; effect: LedgerEffect; fence: number; claimedAt: number; request: string; conversationId?: string; turnIndex?: number } =
    { key, toolName, effect: effect as LedgerEffect, fence, claimedAt, request };
  // Optional (LIST-3): NULL in rows written without them, or before the columns existed.
  if (raw.conversation_id !== null && raw.conversation_id !== undefined) base.conversationId = text(key, raw, "conversation_id");
  if (raw.turn_index !== null && raw.turn_index !== undefined) base.turnIndex = num(key, raw, "turn_index");
  const expiresAt = raw.expires_at === null ? null : num(key, raw, "expires_at");
  switch (raw.state) {
    case "in_flight":
      return {
        row: {
          ...base,
          state: "in_flight",
          owner: text(key, raw, "owner"),
          leaseExpiresAt: num(key, raw, "lease_expires_at"),
        },
        expiresAt,
      };
    case "completed":
      return {
        row: { ...base, state: "completed", result: text(key, raw, "result"), finishedAt: num(key, raw, "finished_at") },
        expiresAt: requireExpiry(key, expiresAt),
      };
    case "failed":
      return {
        row: { ...base, state: "failed", error: decodeError(key, raw), finishedAt: num(key, raw, "finished_at") },
        expiresAt: requireExpiry(key, expiresAt),
      };
    case "unknown":
      return {
        row: { ...base, state: "unknown", reason: text(key, raw, "reason"), finishedAt: num(key, raw, "finished_at") },
        expiresAt: requireExpiry(key, expiresAt),
      };
    case "released":
      return {
        row: { ...base, state: "released", finishedAt: num(key, raw, "finished_at") },
        expiresAt: requireExpiry(key, expiresAt),
      };
    default:
      throw corrupt(key, `unknown state ${JSON.stringify(raw.state)}`);
  }
}

/** A finished row without a retention deadline would never be swept: refuse it rather than guess. */
function requireExpiry(key: string, expiresAt: number | null): number {
  if (expiresAt === null) throw corrupt(key, "finished row has no expires_at");
  return expiresAt;
}
