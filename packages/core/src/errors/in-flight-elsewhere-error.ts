import { DispatchOnceError } from "./dispatch-once-error.js";

/** Another attempt holds a live claim on this key and did not finish within the wait bound (LEDGER-9). */
export class InFlightElsewhereError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "in_flight_elsewhere" as const;
  readonly key: string;
  readonly waitedMs: number;
  constructor(key: string, waitedMs: number) {
    super(
      "in_flight_elsewhere",
      `call ${key} is in flight in another attempt; still unfinished after ${waitedMs} ms`,
    );
    this.key = key;
    this.waitedMs = waitedMs;
  }
}
