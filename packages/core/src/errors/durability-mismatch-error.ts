import { DispatchOnceError } from "./dispatch-once-error.js";

/** An unkeyed_write tool registered against a ledger that can lose acknowledged rows (LEDGER-14). */
export class DurabilityMismatchError extends DispatchOnceError {
  readonly tools: string[];
  constructor(tools: string[], message: string) {
    super("durability_mismatch", message);
    this.tools = tools;
  }
}
