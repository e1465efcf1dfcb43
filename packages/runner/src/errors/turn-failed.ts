import { DispatchOnceError } from "@dispatch-once/core";
import type { FailedTurnRecord } from "../record.js";

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
  constructor(record: FailedTurnRecord, options: { replayed?: boolean } = {}) {
    super("turn_failed", `turn ${record.turnIndex} of ${record.conversationId} failed (${record.position}): ${record.error.message}`);
    this.record = record;
    this.replayed = options.replayed ?? false;
  }
}
