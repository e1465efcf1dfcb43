import { KEY_HEX_LENGTH } from "../key.js";
import type { LedgerRow } from "../ledger.js";
import type { ToolRegistry } from "../registry.js";

/** The ordinals tried for a row (TURN-4: identical calls before it in one attempt); a row's own ordinal is not stored. */
export const MAX_ORDINAL_TRIED = 64;

/** A key of a call where a turn index places it: `Dispatcher.keyFor`. */
export type KeyDeriver = (call: { name: string; input: unknown }, context: { conversationId: string; turnIndex: number; ordinal: number }) => string;

/**
 * What the registry's current definition of a row's tool says of the row's key (IDENT-4):
 * - `same`: it derives the row's key again from the row's stored request, at some ordinal;
 * - `refused`: it refuses the stored request (a new required field, a stricter schema);
 * - `other`: it derives other keys from it (its identity or schema changed since the row was
 *   claimed): a re-run of the row's turn derives a new key for the row's call and meets no row.
 */
export type RowDefinitionCheck = { verdict: "same" } | { verdict: "refused"; why: string } | { verdict: "other"; input: unknown; why: string };

const DERIVED_KEY = new RegExp(`^[0-9a-f]{${KEY_HEX_LENGTH}}$`);

/**
 * Re-derive a ledger row's key from the registry's definition of its tool: the row's conversation,
 * turn index and stored request, at ordinals 0 to MAX_ORDINAL_TRIED. Undefined for a row it does
 * not check: a tool the registry does not define or that is a read, a tool that refuses differing
 * requests (client-assigned keys, IDENT-6), a row without a conversation and turn or whose key is
 * not a derived key (a key a caller chose itself), a stored request that is not JSON. One reading
 * for `dispatch-once audit --ledger` (before a deploy) and the dispatcher's IDENT-10 guard (at run
 * time, on re-runs of a turn).
 */
export function checkRowDefinition(registry: ToolRegistry, keyFor: KeyDeriver, row: LedgerRow): RowDefinitionCheck | undefined {
  if (row.conversationId === undefined || row.turnIndex === undefined || !registry.has(row.toolName) || !DERIVED_KEY.test(row.key)) return undefined;
  const tool = registry.get(row.toolName);
  if (tool.effect === "read" || tool.onRequestDiffers === "refuse") return undefined;
  let input: unknown;
  try {
    input = JSON.parse(row.request);
  } catch {
    return undefined;
  }
  const call = { name: row.toolName, input };
  try {
    for (let ordinal = 0; ordinal <= MAX_ORDINAL_TRIED; ordinal++) {
      if (keyFor(call, { conversationId: row.conversationId, turnIndex: row.turnIndex, ordinal }) === row.key) return { verdict: "same" };
    }
  } catch (error) {
    return { verdict: "refused", why: `its stored request is refused by the definition now: ${error instanceof Error ? error.message : String(error)}` };
  }
  return { verdict: "other", input, why: "the definition derives another key from its stored request (identity or schema changed)" };
}
