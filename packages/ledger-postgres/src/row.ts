import {
  LedgerCorruptError,
  ROW_FORMAT_VERSION,
  type LedgerEffect,
  type LedgerRow,
  type StoredError,
} from "@dispatch-once/core";

/** A row as pg returns it (bigint columns as strings) or as to_json renders it (as numbers). */
export interface RawRow {
  key: string;
  v: number | null;
  state: string | null;
  tool_name: string | null;
  effect: string | null;
  fence: string | number | null;
  takeover: boolean | null;
  owner: string | null;
  claimed_at: string | number | null;
  lease_expires_at: string | number | null;
  finished_at: string | number | null;
  expires_at: string | number | null;
  result: string | null;
  error: string | null;
  reason: string | null;
  request: string | null;
  conversation_id?: string | null;
  turn_index?: string | number | null;
}

class Corrupt extends Error {}

function int(value: string | number | null, column: string): number {
  if (value === null) throw new Corrupt(`${column} is missing`);
  const n = Number(value);
  if (!Number.isSafeInteger(n)) throw new Corrupt(`${column} ${value} is not a safe integer`);
  return n;
}

function text(value: string | null, column: string): string {
  if (value === null) throw new Corrupt(`${column} is missing`);
  return value;
}

function storedError(json: string | null): StoredError {
  const raw = text(json, "error");
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new Corrupt("error is not JSON");
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new Corrupt("error is not a JSON object");
  }
  const e = parsed as Record<string, unknown>;
  if (typeof e.name !== "string" || typeof e.message !== "string") {
    throw new Corrupt("error lacks a string name and message");
  }
  if (e.code !== undefined && typeof e.code !== "string") throw new Corrupt("error.code is not a string");
  const out: StoredError = { name: e.name, message: e.message };
  if (e.code !== undefined) out.code = e.code;
  if ("details" in e) out.details = e.details;
  return out;
}

/**
 * Decode a stored row into core's LedgerRow. Anything unexpected (another format version,
 * an unknown state or effect, a missing column or request, an error that is not JSON) is
 * corruption: LedgerCorruptError, never "absent" (LEDGER-11).
 */
export function decodeRow(raw: RawRow): LedgerRow {
  try {
    if (raw.v !== ROW_FORMAT_VERSION) throw new Corrupt(`unknown row format version ${String(raw.v)}`);
    const effect = raw.effect;
    if (effect !== "keyed_write" && effect !== "unkeyed_write") {
      throw new Corrupt(`unknown effect ${JSON.stringify(effect)}`);
    }
    const fence = int(raw.fence, "fence");
    if (fence < 1) throw new Corrupt(`fence ${fence} is not positive`);
    // A row written before the request column existed has none: a re-run could not send the
    // first request, so the row is unreadable, never absent (LEDGER-11, LEDGER-21).
    if (raw.request === null || raw.request === undefined) {
      throw new Corrupt("request is missing (a row written before the request column existed)");
    }
    const base = {
      key: raw.key,
      toolName: text(raw.tool_name, "tool_name"),
      effect: effect as LedgerEffect,
      fence,
      claimedAt: int(raw.claimed_at, "claimed_at"),
      request: raw.request,
      // Optional (LIST-3): NULL in rows claimed without them or before the columns existed.
      ...(raw.conversation_id === null || raw.conversation_id === undefined ? {} : { conversationId: raw.conversation_id }),
      ...(raw.turn_index === null || raw.turn_index === undefined ? {} : { turnIndex: int(raw.turn_index, "turn_index") }),
    };
    switch (raw.state) {
      case "in_flight":
        return {
          ...base,
          state: "in_flight",
          owner: text(raw.owner, "owner"),
          leaseExpiresAt: int(raw.lease_expires_at, "lease_expires_at"),
        };
      case "completed":
        return { ...base, state: "completed", result: text(raw.result, "result"), finishedAt: int(raw.finished_at, "finished_at") };
      case "failed":
        return { ...base, state: "failed", error: storedError(raw.error), finishedAt: int(raw.finished_at, "finished_at") };
      case "unknown":
        return { ...base, state: "unknown", reason: text(raw.reason, "reason"), finishedAt: int(raw.finished_at, "finished_at") };
      case "released":
        return { ...base, state: "released", finishedAt: int(raw.finished_at, "finished_at") };
      default:
        throw new Corrupt(`unknown state ${JSON.stringify(raw.state)}`);
    }
  } catch (error) {
    if (error instanceof Corrupt) throw new LedgerCorruptError(raw.key, error.message);
    throw error;
  }
}

/** Whether a finished row's retention has passed (the claim rule treats it as absent). */
export function retentionPassed(raw: RawRow, nowMs: number): boolean {
  return raw.state !== "in_flight" && raw.expires_at !== null && Number(raw.expires_at) <= nowMs;
}

