import { LedgerCorruptError, type LedgerRow } from "@dispatch-once/core";
import { decodeLedgerColumns, decodeStoredInteger, type StoredLedgerColumns } from "@dispatch-once/core/internal";

/** A row as better-sqlite3 returns it: column values, not yet trusted. */
export interface RawRow extends StoredLedgerColumns {
  key: unknown;
  expires_at: unknown;
}

/** A decoded row plus the retention deadline the adapter keeps beside it. */
export interface DecodedRow {
  row: LedgerRow;
  expiresAt: number | null;
}

/**
 * Decode and validate a stored row: the columns mapped onto core's toolkit, which refuses
 * anything this version did not write with LedgerCorruptError, never "absent" (LEDGER-11). The
 * result and request columns are returned as stored (LEDGER-10, LEDGER-21).
 */
export function decodeRow(key: string, raw: RawRow): DecodedRow {
  const row = decodeLedgerColumns(key, raw);
  const expiresAt = raw.expires_at === null ? null : decodeStoredInteger(key, "expires_at", raw.expires_at);
  // A finished row without a retention deadline would never be swept: refuse it rather than guess.
  if (expiresAt === null && row.state !== "in_flight") throw new LedgerCorruptError(key, "finished row has no expires_at");
  return { row, expiresAt };
}
