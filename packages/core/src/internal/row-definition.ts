import { KEY_HEX_LENGTH } from "../key.js";
import type { LedgerRow } from "../ledger.js";
import type { ToolRegistry } from "../registry.js";

/** The ordinals tried for a row (TURN-4: identical calls before it in one attempt); a row's own ordinal is not stored. */
export const MAX_ORDINAL_TRIED = 64;
/**
 * AISDK-17: a wrapper that takes a turn's ordinals per user message starts the k-th message's at
 * k × MESSAGE_ORDINAL_STRIDE, for at most MAX_TURN_MESSAGES messages of one turn index.
 */
export const MESSAGE_ORDINAL_STRIDE = 1_000_000;
export const MAX_TURN_MESSAGES = 100;

/** A key of a call where a turn index places it: `Dispatcher.keyFor`. */
export type KeyDeriver = (call: { name: string; input: unknown }, context: { conversationId: string; turnIndex: number; ordinal: number }) => string;

/**
 * What the registry's current definition of a row's tool says of the row's key (IDENT-4):
 * - `same`: it derives the row's key again from the row's stored request, at some ordinal;
 * - `refused`: it refuses the stored request (a new required field, a stricter schema);
 * - `other`: it derives other keys from it (its identity or schema changed since the row was
 *   claimed, or the row is of a former name, IDENT-11): a re-run of the row's turn derives a new
 *   key for the row's call and meets no row.
 * `toolName` is the current tool's: the row's own, or the tool that lists the row's as a former name.
 */
export type RowDefinitionCheck =
  | { verdict: "same"; toolName: string }
  | { verdict: "refused"; toolName: string; why: string }
  | { verdict: "other"; toolName: string; input: unknown; why: string };

const DERIVED_KEY = new RegExp(`^[0-9a-f]{${KEY_HEX_LENGTH}}$`);

/**
 * Re-derive a ledger row's key from the registry's definition of its tool: the row's conversation,
 * turn index and stored request, at ordinals 0 to MAX_ORDINAL_TRIED. Undefined for a row it does
 * not check: a tool the registry does not define or that is a read, a tool that refuses differing
 * requests (client-assigned keys, IDENT-6), a row without a conversation and turn or whose key is
 * not a derived key (a key a caller chose itself), a stored request that is not JSON. A row of a
 * tool's former name (IDENT-11) is read under that tool's definition: never `same` (the name is
 * part of every key), `refused` when its schema refuses the stored request. One reading
 * for `dispatch-once audit --ledger` (before a deploy) and the dispatcher's IDENT-10 guard (at run
 * time, on re-runs of a turn).
 */
export function checkRowDefinition(registry: ToolRegistry, keyFor: KeyDeriver, row: LedgerRow, options: { messageOrdinals?: boolean } = {}): RowDefinitionCheck | undefined {
  if (row.conversationId === undefined || row.turnIndex === undefined || !DERIVED_KEY.test(row.key)) return undefined;
  const tool = registry.has(row.toolName) ? registry.get(row.toolName) : registry.renamed(row.toolName);
  if (tool === undefined || tool.effect === "read" || tool.onRequestDiffers === "refuse") return undefined;
  let input: unknown;
  try {
    input = JSON.parse(row.request);
  } catch {
    return undefined;
  }
  const toolName = tool.name;
  const call = { name: toolName, input };
  const renamed = toolName !== row.toolName;
  // `messageOrdinals`: also the ordinals of a turn's later user messages (AISDK-17). Without them the
  // IDENT-10 guard took another tab's row, made under this very definition, for one of another
  // definition, and answered a call with that tab's payment. (Up to 6 500 derivations for a row of
  // another definition: the guard's few rows of a re-run turn, not an audit's whole ledger.)
  const bands = options.messageOrdinals === true ? MAX_TURN_MESSAGES : 1;
  try {
    // A former name's row: the current name is in every key the definition derives, so only whether it takes the request.
    for (let band = 0; band < (renamed ? 1 : bands); band++) {
      for (let n = 0; n <= (renamed ? 0 : MAX_ORDINAL_TRIED); n++) {
        const ordinal = band * MESSAGE_ORDINAL_STRIDE + n;
        if (keyFor(call, { conversationId: row.conversationId, turnIndex: row.turnIndex, ordinal }) === row.key) return { verdict: "same", toolName };
      }
    }
  } catch (error) {
    return { verdict: "refused", toolName, why: `its stored request is refused by the definition now: ${error instanceof Error ? error.message : String(error)}` };
  }
  const why = renamed ? `made under the tool's former name ${row.toolName} (IDENT-11)` : "the definition derives another key from its stored request (identity or schema changed)";
  return { verdict: "other", toolName, input, why };
}
