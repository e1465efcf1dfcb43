import type { JsonValue, StoredError } from "@dispatch-once/core";
import type { FailurePosition } from "./accumulator.js";

/** What happened to one call of a failed turn (spec RECORD-2). */
export type FailedCallStatus =
  /** The stream died before the call's arguments finished: never run (STREAM-3). */
  | "not_run"
  | "completed"
  | "failed"
  | "in_flight_elsewhere"
  | "outcome_unknown"
  /** The call was dispatched and raised something else (a released claim, a ledger error). */
  | "error";

export interface FailedCallRecord {
  index: number;
  callId: string;
  name: string;
  status: FailedCallStatus;
  /** Human-readable, e.g. "not run (connection lost)". */
  summary: string;
  /** The argument text received before the stream died; for the log, never for the conversation. */
  partialArguments?: string;
  key?: string;
  result?: JsonValue;
  error?: StoredError;
}

/**
 * The failed-turn record (spec §9): kept beside the conversation, shown to the user,
 * never written into the conversation itself (RECORD-1).
 */
export interface FailedTurnRecord {
  conversationId: string;
  turnIndex: number;
  attempts: number;
  /** Where the last attempt's stream died, or "call_unresolved" when the stream finished but a call did not. */
  position: FailurePosition | "call_unresolved";
  error: StoredError;
  calls: FailedCallRecord[];
  at: string;
}
