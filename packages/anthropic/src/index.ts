export {
  TurnAccumulator,
  type CallState,
  type CallPhase,
  type FailurePosition,
  type AssistantBlock,
} from "./accumulator.js";
export {
  MemoryConversationStore,
  type ConversationStore,
  type ConversationSnapshot,
  type TurnCommit,
  type AppendResult,
  type UserContent,
} from "./conversation.js";
export type { FailedTurnRecord, FailedCallRecord, FailedCallStatus } from "./record.js";
export {
  ConversationRunner,
  StreamIncompleteError,
  TurnFailedError,
  defaultRetryPolicy,
  type AttemptFailure,
  type RetryPolicy,
  type RunnerEvent,
  type ConversationRunnerOptions,
  type CallReport,
  type TurnOutcome,
  type SendResult,
} from "./runner.js";
