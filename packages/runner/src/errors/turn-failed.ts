import { DispatchOnceError } from "@dispatch-once/core";
import type { FailedTurnRecord } from "../record.js";

/**
 * Why a re-send of a failed message's id ran nothing and only returned its stored failure (TURN-12):
 * - "another_message_bound": another message was bound since; its retry could not run at the
 *   failed turn's index any more.
 * - "past_resend_window": its turn first failed at least the runner's `resendWindowMs` ago on the
 *   conversation store's clock: the ledger may have swept its calls' rows (LEDGER-13), and a retry
 *   would run them again. The record says which effects happened; send a new message to do it again.
 */
export type NotRetriedReason = "another_message_bound" | "past_resend_window";

/**
 * A turn that could not be completed within the retry policy; carries the failed-turn record,
 * which says for every effect the turn asked for whether it happened (RECORD-2, RECORD-5).
 * `replayed` is true when the record was stored earlier and this send() only read it.
 */
export class TurnFailedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "turn_failed" as const;
  readonly record: FailedTurnRecord;
  readonly replayed: boolean;
  /**
   * Present when this send was a re-send of a failed message that ran nothing (TURN-12): why it
   * was not retried. `record.retryable` is then false.
   */
  readonly notRetried?: NotRetriedReason;
  constructor(record: FailedTurnRecord, options: { replayed?: boolean; notRetried?: NotRetriedReason } = {}) {
    super("turn_failed", `turn ${record.turnIndex} of ${record.conversationId} failed (${record.position}): ${record.error.message}${notRetriedText(options.notRetried)}`);
    this.record = record;
    this.replayed = options.replayed ?? false;
    if (options.notRetried !== undefined) this.notRetried = options.notRetried;
  }
}

function notRetriedText(reason: NotRetriedReason | undefined): string {
  switch (reason) {
    case undefined:
      return "";
    case "another_message_bound":
      return "; not retried: another message was bound since (TURN-12)";
    case "past_resend_window":
      return (
        "; not retried: the re-send came after the re-send window, which ends before the ledger's retention " +
        "(LEDGER-13): a retry would meet no row for the calls its attempts made and run them again. " +
        "The record says which effects happened; send a new message to do it again"
      );
  }
}
