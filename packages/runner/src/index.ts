export { CallPhases, isCall, type CallPhase, type CallState, type FailurePosition, type TextPart } from "./phases.js";
export { checkStreamEvent, checkEventPart, checkEventMembers, type EventShape, type EventMemberKind } from "./events.js";
export { readStoredResult, checkUserContent, type CallAnswer, type CommitShape, type StoredTurnView, type StreamProvider, type StreamStep } from "./provider.js";
export {
  classifyCallError,
  summarizeEffects,
  forResumedTurn,
  unansweredCall,
  unansweredOwnCall,
  turnRowsOf,
  readFailedTurnRecord,
  UNLISTED_REASON,
  MAX_RECORDED_INPUT_DEPTH,
  type CallRecord,
  type CallStatus,
  type EffectStatus,
  type FailedTurnRecord,
  type FailedCallRecord,
  type FailedCallStatus,
  type SupersededAttemptRecord,
  type ResumedTurnRecord,
  type UnansweredCallRecord,
  type TurnEffect,
  type ConversationRecord,
} from "./record.js";
export { defaultRetryPolicy, isFinalStop, type AttemptFailure, type RetryPolicy } from "./retry.js";
export { boundedFetch, type BoundedFetchOptions } from "./bounded-fetch.js";
export { errorsGivenBack, inStreamErrorBody } from "./given-back.js";
export { StreamIncompleteError } from "./errors/stream-incomplete.js";
export { InvalidArgumentsJsonError } from "./errors/invalid-arguments-json.js";
export { TurnFailedError, type NotRetriedReason } from "./errors/turn-failed.js";
export { MessageIdReusedError } from "./errors/message-id-reused.js";
export {
  TurnRunner,
  checkRunnerOptions,
  checkOptionValues,
  checkKnownOptions,
  TURN_RUNNER_OPTIONS,
  DEFAULT_RESEND_WINDOW_MS,
  DEFAULT_STREAM_IDLE_TIMEOUT_MS,
  BUSY_LISTING_MS,
  defaultBusyWaitMs,
  type RunnerEvent,
  type TurnRunnerOptions,
  type CallReport,
  type TurnOutcome,
  type SendResult,
} from "./runner.js";
