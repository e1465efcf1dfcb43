import { DispatchOnceError } from "./dispatch-once-error.js";

/** The fencing token presented no longer owns the row (LEDGER-5). */
export class StaleClaimError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "stale_claim" as const;
  readonly key: string;
  readonly fence: number;
  constructor(key: string, fence: number, message = "claim is no longer held") {
    super("stale_claim", `${message}: key ${key}, fence ${fence}`);
    this.key = key;
    this.fence = fence;
  }
}
