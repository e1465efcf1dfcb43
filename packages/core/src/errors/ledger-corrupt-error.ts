import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/** A row exists but cannot be read back; it is never treated as absent (LEDGER-11). */
export class LedgerCorruptError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "ledger_corrupt" as const;
  readonly key: string;
  /**
   * `true` when the row could not be read back (or written) while recording an effect the run
   * knows happened (the tool returned a result, stored or not storable, or a probe found it
   * performed: DISPATCH-10): `effectOf` answers "yes", as for DISPATCH-8's `stale_claim`. Absent
   * when nothing is known of the effect ("possibly"), as for every error of the ledger's own.
   */
  readonly effectHappened?: true;
  /**
   * Present only when the request the dispatch ran or met is not this call's (IDENT-3): a re-worded
   * call re-ran or took over the stored request, and its row could not be read back or written
   * while recording it. That request is the one whose effect happened or may have (RECORD-10).
   */
  declare storedRequest?: JsonValue;
  constructor(key: string, message: string, options?: { cause?: unknown; effectHappened?: true }) {
    super("ledger_corrupt", `ledger row ${key} cannot be read: ${message}`, options?.cause !== undefined ? { cause: options.cause } : undefined);
    this.key = key;
    if (options?.effectHappened === true) this.effectHappened = true;
  }
}
