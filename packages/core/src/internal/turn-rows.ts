import type { JsonValue } from "../canonical.js";
import type { StoredError } from "../errors/index.js";
import { MAX_LIST_LIMIT, type Ledger, type LedgerRow, type RowState } from "../ledger.js";
import { isRecordRowName } from "../record-rows.js";

/**
 * What a ledger row of a turn says of its effect, as a runner's committed-turn record says it
 * (RECORD-8): the form of every listing of a turn's calls that its answer did not tell (RECORD-8,
 * AISDK-14, ATR-12, MCP-15).
 */
export interface TurnRowEffect {
  key: string;
  name: string;
  state: RowState;
  /**
   * `happened` for a completed row and for a `failed` row whose code is `result_not_storable`
   * (the effect happened; its result could not be kept), `not_happened` only for any other
   * `failed` row (a definite failure), `may_have_happened` for an in-flight, unknown or released
   * row (an earlier holder of a released key may still have performed it, RECORD-6).
   */
  effect: "happened" | "not_happened" | "may_have_happened";
  summary: string;
  /** The stored result of a completed row. */
  result?: JsonValue;
  /** The stored error of a failed row. */
  error?: StoredError;
}

/**
 * The arguments a row's claim stored (its request text, as the tool ran with them), for a listing
 * that tells the user which call it was (AISDK-14, ATR-12); nothing when the text is not JSON.
 */
export function turnRowInput(row: LedgerRow): { input?: JsonValue } {
  try {
    return { input: JSON.parse(row.request) as JsonValue };
  } catch {
    return {};
  }
}

/** What a row claimed at a turn index by an earlier run of the turn says of its effect (RECORD-8). */
export function turnRowEffect(row: LedgerRow): TurnRowEffect {
  const base = { key: row.key, name: row.toolName, state: row.state };
  switch (row.state) {
    case "completed": {
      let result: JsonValue | undefined;
      try {
        result = JSON.parse(row.result) as JsonValue;
      } catch {
        result = undefined;
      }
      return {
        ...base,
        effect: "happened",
        summary: "performed by an earlier run of this turn; its result is not in the conversation",
        ...(result !== undefined ? { result } : {}),
      };
    }
    case "failed":
      // result_not_storable is a failure to KEEP the result of an effect that happened (RECON-7).
      if (row.error.code === "result_not_storable") {
        return { ...base, effect: "happened", summary: `performed by an earlier run of this turn, but its result could not be stored: ${row.error.message}`, error: row.error };
      }
      return { ...base, effect: "not_happened", summary: `failed definitely in an earlier run of this turn: ${row.error.message}`, error: row.error };
    case "in_flight":
      return { ...base, effect: "may_have_happened", summary: "claimed by an earlier run of this turn that did not finish; it may have been performed" };
    case "unknown":
      return { ...base, effect: "may_have_happened", summary: "may have been performed by an earlier run of this turn; nobody can confirm it" };
    case "released":
      return { ...base, effect: "may_have_happened", summary: "released by an earlier run of this turn; an earlier holder may have performed it" };
  }
}

/**
 * The ledger rows claimed at one turn index of a conversation (LIST-3), read a page at a time
 * through `listRows` (which filters by conversation only, LIST-1); undefined when the ledger does
 * not list rows (`capabilities.supports.listRows`). A listing that fails throws its error. With
 * `andLater`, the rows of that index and every later one (a busy message's turns, TURN-25). Shared
 * by the runner's committed-turn record (RECORD-8) and the AI SDK, tool-runner and MCP listings of
 * a turn's unanswered calls (AISDK-14, ATR-12, MCP-15).
 *
 * Bookkeeping rows (EFFECT-8: a tool name with RECORD_ROW_PREFIX, such as the AI SDK wrapper's
 * `dispatch-once-turn` row at a turn's index) are left out: they hold no effect, and an app that
 * shares one ledger and conversation id between that wrapper and another dispatcher would have
 * them listed as a turn's effects (a record, a tool runner's or MCP's listing telling the user of
 * a payment-like effect that is none). Every caller lists effects, so they are left out here, once.
 */
export async function turnRowsOf(
  ledger: Partial<Ledger> | undefined,
  conversationId: string,
  turnIndex: number,
  options: { andLater?: boolean } = {},
): Promise<LedgerRow[] | undefined> {
  if (typeof ledger?.listRows !== "function" || ledger.capabilities?.supports?.listRows !== true) return undefined;
  const rows: LedgerRow[] = [];
  let cursor: string | undefined;
  // `andLater`: the rows of every turn index from `turnIndex` on (a message in progress: its first turn and its later ones, TURN-25).
  const wanted = (index: number | undefined) => index !== undefined && (options.andLater === true ? index >= turnIndex : index === turnIndex);
  do {
    const page = await ledger.listRows({ conversationId, limit: MAX_LIST_LIMIT, ...(cursor !== undefined ? { cursor } : {}) });
    for (const row of page.rows) if (wanted(row.turnIndex) && !isRecordRowName(row.toolName)) rows.push(row);
    cursor = page.cursor;
  } while (cursor !== undefined);
  return rows;
}

/** Why nothing was listed, where `turnRowsOf` answered undefined. */
export const UNLISTED_REASON = "the ledger does not list rows (capabilities.supports.listRows)";
