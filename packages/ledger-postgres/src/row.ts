import type { LedgerRow } from "@dispatch-once/core";
import { decodeLedgerColumns } from "@dispatch-once/core/internal";

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

/**
 * Decode a stored row into core's LedgerRow: the columns mapped onto core's toolkit, which
 * refuses anything this version did not write with LedgerCorruptError, never "absent"
 * (LEDGER-11). pg returns bigint columns as decimal text, to_json as numbers: both are read.
 */
export function decodeRow(raw: RawRow): LedgerRow {
  return decodeLedgerColumns(raw.key, raw, { integersAsText: true });
}

/** Whether a finished row's retention has passed (the claim rule treats it as absent). */
export function retentionPassed(raw: RawRow, nowMs: number): boolean {
  return raw.state !== "in_flight" && raw.expires_at !== null && Number(raw.expires_at) <= nowMs;
}

