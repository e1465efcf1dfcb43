export { ResponsesTurnAccumulator } from "./accumulator.js";
export type { CallPhase, CallState, FailurePosition, OutputItem, StreamErrorReport, TerminalEvent } from "./accumulator.js";
export { ConversationRunner, type ConversationRunnerOptions, type ConversationRunnerParams, type UserContent } from "./runner.js";
export { ChatCompletionsTurnAccumulator, type ChatCallState, type ChatStreamErrorReport } from "./chat-accumulator.js";
export { ChatCompletionsRunner, type ChatCompletionsRunnerOptions, type ChatCompletionsRunnerParams, type ChatUserContent } from "./chat-runner.js";
// The runner's logic, errors, events and records are shared with every stream side (@dispatch-once/runner).
export {
  StreamIncompleteError,
  InvalidArgumentsJsonError,
  TurnFailedError,
  MessageIdReusedError,
  defaultRetryPolicy,
  classifyCallError,
  summarizeEffects,
  forResumedTurn,
  type AttemptFailure,
  type RetryPolicy,
  type RunnerEvent,
  type CallReport,
  type TurnOutcome,
  type SendResult,
  type CallRecord,
  type CallStatus,
  type EffectStatus,
  type FailedTurnRecord,
  type SupersededAttemptRecord,
  type ResumedTurnRecord,
  type UnansweredCallRecord,
  type ConversationRecord,
} from "@dispatch-once/runner";
