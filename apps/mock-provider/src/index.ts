export { startMockProvider } from "./provider.js";
export type { MockProvider, MockProviderOptions, HeldStream, WaitOptions } from "./provider.js";
export { MockProviderError } from "./errors.js";
export type { MockProviderErrorCode } from "./errors.js";
export {
  defaultScript,
  scriptFromPlans,
  say,
  toolUse,
  turn,
  lastUserText,
  lastUserPromptIndex,
  lastToolResults,
  forcedByToolChoice,
} from "./script.js";
export type { PlannedStep, PlansOptions, ToolResultSeen } from "./script.js";
export { parseFault, parseFaultRule, parseTiming, errorForStatus } from "./faults.js";
export { validateMessagesRequest, messagesRequestSchema } from "./request-schema.js";
export type { MessagesRequest, MessageParam, ContentBlockParam, RequestValidation } from "./request-schema.js";
export { renderTurn, serialiseArguments } from "./render.js";
export { encodeEventStreamMessage, bedrockChunk, bedrockException } from "./eventstream.js";
export { converseEventOf, converseFrame, converseWhole, messagesFromConverse } from "./converse.js";
export { GeminiChunks, geminiError, geminiSse, geminiWhole, messagesFromGemini } from "./gemini.js";
export { REDACTED_THINKING_TRIGGER, sealRedactedThinking, signThinking, thinkingEnabled } from "./thinking.js";
export type { PingMode, RenderedResponse, RenderedToolUse, PlannedEvent, WhitespaceStyle } from "./render.js";
export type {
  ApiErrorBody,
  AssistantTurn,
  CloudApi,
  CutKind,
  Fault,
  FaultPlan,
  FaultPosition,
  FaultRule,
  FaultSource,
  RequestInfo,
  RequestRecord,
  ResponseOutcome,
  Script,
  ScriptedContent,
  ScriptedStopReason,
  ScriptedText,
  ScriptedToolUse,
  SentEvent,
  Timing,
} from "./types.js";
