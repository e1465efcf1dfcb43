import type { JsonValue } from "../canonical.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

/** The store could not be reached or refused the operation (LEDGER-12); the effect is assumed to have possibly happened, or known to have happened when `effectHappened` is set (DISPATCH-10). */
export class LedgerUnavailableError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "ledger_unavailable" as const;
  /**
   * The key of the call whose dispatch raised it (absent when a ledger operation raised it
   * outside a dispatch): a failed turn's record lists the call under it (RECORD-2), so that an
   * effect whose record could not be written (DISPATCH-10) is told under the key its row has.
   */
  readonly key?: string;
  /**
   * `true` when the write the dispatcher gave up recorded an effect its run knows happened (the
   * tool returned a result, stored or not storable, or a probe found it performed: DISPATCH-10):
   * `effectOf` answers "yes", and a re-send is not one that can help (ERR-4). Absent when nothing
   * is known of the effect ("possibly"), as for every error of the ledger's own.
   */
  readonly effectHappened?: true;
  /**
   * Present only when the request the dispatch ran is not this call's (IDENT-3): a re-worded call
   * re-ran or took over the stored request, and the ledger was lost while recording it. That
   * request is the one whose effect happened or may have (RECORD-10); show it, not the call's arguments.
   */
  declare storedRequest?: JsonValue;
  constructor(message: string, options?: { cause?: unknown; key?: string; effectHappened?: true }) {
    super("ledger_unavailable", message, options?.cause !== undefined ? { cause: options.cause } : undefined);
    if (options?.key !== undefined) this.key = options.key;
    if (options?.effectHappened === true) this.effectHappened = true;
  }
}
