import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * The call's row is in flight and did not finish within a bound: another attempt holds a live
 * claim on this key past the wait bound (LEDGER-15), or this dispatch's own run did not settle
 * within its run timeout (`runTimeoutMs` set, DISPATCH-18): the run was signalled to stop and its
 * row left in flight under a lease no longer renewed, so the run may still complete it.
 */
export class InFlightElsewhereError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "in_flight_elsewhere" as const;
  readonly key: string;
  readonly waitedMs: number;
  /** Set when this dispatch's own run outlived its bound (DISPATCH-18): the bound, in ms. */
  readonly runTimeoutMs?: number;
  /**
   * Present only when the request in flight is not this call's (IDENT-3): a re-worded call waited
   * on a live claim of the stored request, or its own run of the stored request (a re-run after a
   * release, or a takeover) outlived `runTimeoutMs`. That request is the one whose effect may
   * happen, as an outcome names it (RECORD-10); show it, not the call's arguments.
   */
  declare storedRequest?: JsonValue;
  /** `read`: the run was a read's, which claims nothing, so nothing is left in flight. */
  constructor(key: string, waitedMs: number, options: { runTimeoutMs?: number; read?: boolean } = {}) {
    super(
      "in_flight_elsewhere",
      options.runTimeoutMs === undefined
        ? `call ${key} is in flight in another attempt; still unfinished after ${waitedMs} ms`
        : options.read === true
          ? `call ${key}: the read did not settle within ${options.runTimeoutMs} ms (runTimeoutMs); it was signalled to stop`
          : `call ${key}: its run did not settle within ${options.runTimeoutMs} ms (runTimeoutMs); it was signalled to stop and is left in flight, ` +
            `and may still complete: a re-send with the same key replays it, or settles it once its lease has run out`,
    );
    this.key = key;
    this.waitedMs = waitedMs;
    if (options.runTimeoutMs !== undefined) this.runTimeoutMs = options.runTimeoutMs;
  }
}
