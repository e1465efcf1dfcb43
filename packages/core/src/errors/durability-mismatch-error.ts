import { DispatchOnceError } from "./dispatch-once-error.js";

/** An unkeyed_write tool registered against a ledger that can lose acknowledged rows (LEDGER-14). */
export class DurabilityMismatchError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "durability_mismatch" as const;
  readonly tools: string[];
  constructor(tools: string[], message: string) {
    super("durability_mismatch", message);
    this.tools = tools;
  }
}
