import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";
import { recordRowWords } from "../record-rows.js";

/**
 * `resolve` or `reconcile` of a row under a reserved tool name (EFFECT-8): Dispatch-Once's own
 * bookkeeping (the AI SDK wrapper's record of a turn's user messages, of a message's turn, or of a
 * repaired call), which holds no effect. There is nothing downstream to settle, and settling it
 * would change the bookkeeping under the application (a released turn record lets the next request
 * number the turn's messages again, AISDK-17). Nothing was written. Exit 4.
 */
export class RecordRowError extends CliError {
  readonly key: string;
  readonly toolName: string;
  constructor(command: "resolve" | "reconcile", key: string, toolName: string) {
    super(
      "record_row",
      EXIT_CODES.refused,
      `${command} refused for ${key}, nothing was written: its tool ${toolName} is Dispatch-Once's own bookkeeping (${recordRowWords(toolName)}), not an effect: nothing was sent downstream under it, so there is nothing to settle, and settling it would corrupt that bookkeeping (EFFECT-8). Leave it: the application's next request finishes or takes it over, and sweep removes it after its retention`,
    );
    this.key = key;
    this.toolName = toolName;
  }
}
