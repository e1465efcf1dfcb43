export {
  TurnAccumulator,
  type CallState,
  type CallPhase,
  type FailurePosition,
  type AssistantBlock,
} from "./accumulator.js";
// The conversation-store contract lives in core (provider-agnostic); re-exported for convenience.
export {
  MemoryConversationStore,
  type ConversationStore,
  type StoredMessage,
  type StoredTurn,
  type TurnSnapshot,
  type TurnCommit,
  type AppendResult,
} from "@dispatch-once/core";
// The runner's logic, errors, records and result types are shared with every stream side
// (@dispatch-once/runner); re-exported so imports keep working.
export {
  StreamIncompleteError,
  InvalidArgumentsJsonError,
  TurnFailedError,
  MessageIdReusedError,
  defaultRetryPolicy,
  type AttemptFailure,
  type RetryPolicy,
  type CallReport,
  type TurnOutcome,
  type SendResult,
  classifyCallError,
  summarizeEffects,
  forResumedTurn,
  type CallRecord,
  type CallStatus,
  type EffectStatus,
  type FailedTurnRecord,
  type FailedCallRecord,
  type FailedCallStatus,
  type SupersededAttemptRecord,
  type ResumedTurnRecord,
  type UnansweredCallRecord,
  type ConversationRecord,
  // The SDK's tool runner owns its loop, so no streamIdleTimeoutMs bounds its stream: this fetch does (ATR-11).
  boundedFetch,
  type BoundedFetchOptions,
} from "@dispatch-once/runner";
export { type ProviderToolsPolicy } from "./provider-tools.js";
export { ConversationRunner, type RunnerEvent, type ConversationRunnerOptions, type ConversationRunnerParams, type MessagesClient, type UserContent } from "./runner.js";
export {
  createOnceToolRunner,
  rerunMessagesOf,
  OnceToolRunner,
  OnceToolCallError,
  declaredToolError,
  dispatchOnceOf,
  isGenuineUserMessage,
  toolRunnerTurnIndexOf,
  type OnceToolRunnerOptions,
  type OnceToolRunnerTurn,
  type ToolRunnerClient,
  type OnceToolCall,
  type DispatchOnceCallInfo,
  type OnceToolRunContext,
  type UnansweredCalls,
  type UnansweredToolRunnerCall,
} from "./tool-runner.js";
