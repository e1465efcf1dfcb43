import type { RowState } from "../ledger.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * A call in a re-run of a turn (a resumed turn, TURN-15) whose own key meets no row, while the
 * turn holds a row of the same tool that the tool's current definition no longer keys as the
 * ledger holds it (its identity or schema changed by a deploy, IDENT-4), and nothing can tell
 * whether the call is that row's call: the current schema refuses the row's stored request, or
 * several such rows match the call (spec IDENT-10). Also a call of a later turn of a message while
 * an earlier turn of it left a call of the tool unanswered whose stored request the current schema
 * refuses (`rowTurnIndex`, spec TURN-23). Nothing was claimed and nothing ran for this call; the
 * row may say its effect happened. Re-sending cannot help: the same definition meets the same row.
 * Settle the message by hand (roll the definition back, or resolve the row), or let the model
 * answer without the call.
 */
export class ToolDefinitionChangedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "tool_definition_changed" as const;
  /** The key the call derives under the current definition: nothing was claimed under it. */
  readonly key: string;
  readonly toolName: string;
  /** The row claimed under the earlier definition, whose call this may be. */
  readonly rowKey: string;
  /** That row's state when the turn's rows were listed (`completed`: its effect happened). */
  readonly rowState: RowState;
  /** Why the row cannot be matched: its stored request is refused now, or several rows match. */
  readonly reason: "request_refused" | "ambiguous";
  /**
   * The earlier turn of the message whose unanswered call the row is (TURN-23: its record lists the
   * call as happened or may have happened); absent when the row is of the call's own turn (IDENT-10).
   */
  readonly rowTurnIndex?: number;
  constructor(
    key: string,
    toolName: string,
    row: { key: string; state: RowState },
    reason: "request_refused" | "ambiguous",
    detail: string,
    /** TURN-23: the row is a call an earlier turn of the message left unanswered, at this turn index, whose effect happened or may have. */
    earlier?: { turnIndex: number; effect: "happened" | "may_have_happened" },
  ) {
    super(
      "tool_definition_changed",
      earlier === undefined
        ? `call ${key} to ${toolName} was not run: this turn ran before under another definition of ${toolName}, whose row ${row.key} (${row.state}) ` +
            `may be this call's (${detail}); re-sending cannot help (IDENT-10)`
        : `call ${key} to ${toolName} was not run: turn ${earlier.turnIndex} of this message made a call to ${toolName} under another definition whose effect ` +
            `${earlier.effect === "happened" ? "happened" : "may have happened"} and that the conversation does not answer (row ${row.key}, ${row.state}); ` +
            `it may be this call (${detail}); re-sending cannot help (TURN-23)`,
    );
    this.key = key;
    this.toolName = toolName;
    this.rowKey = row.key;
    this.rowState = row.state;
    this.reason = reason;
    if (earlier !== undefined) this.rowTurnIndex = earlier.turnIndex;
  }
}
