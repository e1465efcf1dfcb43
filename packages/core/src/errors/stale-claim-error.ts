import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/** The fencing token presented no longer owns the row (LEDGER-5). */
export class StaleClaimError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "stale_claim" as const;
  readonly key: string;
  readonly fence: number;
  /**
   * `true` when the claim was lost after its run performed the effect (the tool returned a
   * result, or a probe found it performed) and before the outcome was recorded (DISPATCH-8): the
   * effect happened, whatever the row now says (an operator's resolution, RESOLVE-5), and
   * `effectOf` answers "yes". Absent when nothing is known of the effect ("possibly").
   */
  readonly effectHappened?: true;
  /**
   * The request that ran under the key when it was not this call's arguments (IDENT-3: a re-worded
   * call that re-ran or took over the stored request), as an outcome names it (RECORD-10).
   */
  declare storedRequest?: JsonValue;
  constructor(key: string, fence: number, message = "claim is no longer held", options: { effectHappened?: true; cause?: unknown } = {}) {
    super("stale_claim", `${message}: key ${key}, fence ${fence}`, options.cause !== undefined ? { cause: options.cause } : undefined);
    this.key = key;
    this.fence = fence;
    if (options.effectHappened === true) this.effectHappened = true;
  }
}
