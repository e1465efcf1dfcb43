import { LedgerUnavailableError, ToolDefinitionChangedError, isDispatchOnceError } from "./errors/index.js";
import { checkRowDefinition, type KeyDeriver, type RowDefinitionCheck } from "./internal/row-definition.js";
import { turnRowsOf } from "./internal/turn-rows.js";
import type { Ledger, LedgerRow } from "./ledger.js";
import type { ToolRegistry } from "./registry.js";

/** What the guard needs of its dispatcher. */
export interface DefinitionGuardDeps {
  ledger: Ledger;
  registry: ToolRegistry;
  keyFor: KeyDeriver;
  /** JCS text of a call's validated arguments under the current definition (throws what validation throws). */
  requestCanonical(name: string, input: unknown): string;
  /** Told once per dispatcher that the ledger does not list rows (the guard cannot act). */
  unlisted(): void;
}

interface CheckedRow {
  row: LedgerRow;
  check: Exclude<RowDefinitionCheck, { verdict: "same" }>;
}

/**
 * IDENT-10: the rows of a re-run turn (resumed, TURN-15) made under another definition of their
 * tool, and which of them a call of this run is. One per TurnDispatch; the rows are listed once,
 * at its first write call, never in a turn's first run (the listing is a ledger round trip).
 */
export class DefinitionGuard {
  private listing: Promise<LedgerRow[] | undefined> | undefined;
  /** The keyed-elsewhere rows of each tool, checked at its first call. */
  private readonly elsewhere = new Map<string, CheckedRow[]>();
  /** Rows a call of this run was matched to: another call of the run is not that row's. */
  private readonly adopted = new Set<string>();

  constructor(
    private readonly deps: DefinitionGuardDeps,
    private readonly conversationId: string,
    private readonly turnIndex: number,
    /** The turn index holds several asks' calls (AISDK-17): a matched row may be another ask's, so none is adopted. */
    private readonly shared = false,
  ) {}

  /**
   * The key a write call is dispatched under: its own, or the key of the row made under an
   * earlier definition that the call is (its stored request gives the call's key under the current
   * definition), never one of `excluded`. Throws tool_definition_changed when nothing can tell, and ledger_unavailable
   * (nothing claimed) when the rows cannot be listed.
   */
  async keyOf(toolName: string, ownKey: string, ordinal: number, requestCanonical: string, excluded?: readonly string[]): Promise<string> {
    this.listing ??= turnRowsOf(this.deps.ledger, this.conversationId, this.turnIndex);
    let rows: LedgerRow[] | undefined;
    try {
      rows = await this.listing;
    } catch (error) {
      // A row that cannot be read back is the operator's (LEDGER-11): a re-send would meet it again.
      if (isDispatchOnceError(error, "ledger_corrupt")) throw error;
      // Nothing was claimed: the call did not run, and a re-send lists again.
      if (isDispatchOnceError(error, "ledger_unavailable") && (error as { key?: unknown }).key === ownKey) throw error;
      throw new LedgerUnavailableError(`the rows of this re-run turn could not be listed, so call ${ownKey} to ${toolName} was not run (IDENT-10): ${error instanceof Error ? error.message : String(error)}`, { cause: error, key: ownKey });
    }
    // Everything below is synchronous: calls awaiting the one listing decide in dispatch order.
    if (rows === undefined) {
      this.deps.unlisted();
      return ownKey;
    }
    if (rows.some((row) => row.key === ownKey)) return ownKey;
    // `excluded`: rows this call must never be answered from (TURN-23's slot: those a committed turn
    // answered); this call's alone, not the turn's, so a later carried call still finds its own.
    const elsewhere = this.elsewhereOf(toolName, rows).filter((r) => !this.adopted.has(r.row.key) && excluded?.includes(r.row.key) !== true);
    if (elsewhere.length === 0) return ownKey;
    const context = { conversationId: this.conversationId, turnIndex: this.turnIndex, ordinal };
    let matches = elsewhere.filter((r) => r.check.verdict === "other" && this.derives(toolName, r.check.input, context, ownKey));
    // Calls the identity cannot tell apart (ordinals 0 and 1): the one whose whole request is the row's.
    // None of them (each re-worded outside the identity) tells no more than all of them: still ambiguous.
    if (matches.length > 1) {
      const same = matches.filter((r) => this.sameRequest(toolName, (r.check as { input: unknown }).input, requestCanonical));
      if (same.length > 0) matches = same;
    }
    if (matches.length === 1) {
      const row = matches[0]!.row;
      // A turn index of several asks (AISDK-17): the row may be another ask's, and answering the
      // call from it would tell this ask of that one's effect. Refused, as when several rows match.
      if (this.shared) {
        throw new ToolDefinitionChangedError(ownKey, toolName, row, "ambiguous", "a row of the earlier definition matches it, and this turn index holds several asks' calls (another tab's message, AISDK-17): a row does not say which ask made it");
      }
      this.adopted.add(row.key);
      return row.key;
    }
    const candidates = matches.length > 1 ? matches : elsewhere.filter((r) => r.check.verdict === "refused");
    if (candidates.length === 0) return ownKey; // every such row is another call under the current definition
    const first = candidates[0]!;
    throw matches.length > 1
      ? new ToolDefinitionChangedError(ownKey, toolName, first.row, "ambiguous", `${matches.length} rows of the earlier definition match it: ${matches.map((r) => r.row.key).join(", ")}`)
      : new ToolDefinitionChangedError(ownKey, toolName, first.row, "request_refused", first.check.why);
  }

  private elsewhereOf(toolName: string, rows: LedgerRow[]): CheckedRow[] {
    let checked = this.elsewhere.get(toolName);
    if (checked !== undefined) return checked;
    checked = [];
    for (const row of rows) {
      // KEY-11: only a row of this conversation and turn; a key this scope derives (checkRowDefinition).
      // A row of one of the tool's former names (IDENT-11) is the tool's too.
      if (!this.isOf(toolName, row.toolName) || row.conversationId !== this.conversationId || row.turnIndex !== this.turnIndex) continue;
      const check = checkRowDefinition(this.deps.registry, this.deps.keyFor, row, { messageOrdinals: true });
      if (check !== undefined && check.verdict !== "same") checked.push({ row, check });
    }
    this.elsewhere.set(toolName, checked);
    return checked;
  }

  private isOf(toolName: string, rowTool: string): boolean {
    return rowTool === toolName || this.deps.registry.renamed(rowTool)?.name === toolName;
  }

  private derives(toolName: string, input: unknown, context: { conversationId: string; turnIndex: number; ordinal: number }, key: string): boolean {
    try {
      return this.deps.keyFor({ name: toolName, input }, context) === key;
    } catch {
      return false;
    }
  }

  private sameRequest(toolName: string, input: unknown, requestCanonical: string): boolean {
    try {
      return this.deps.requestCanonical(toolName, input) === requestCanonical;
    } catch {
      return false;
    }
  }
}
