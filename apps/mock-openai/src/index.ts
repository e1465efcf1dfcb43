export { startMockOpenAI, parseFault, responsesView } from "./provider.js";
export type { HeldStream, MockOpenAI, MockOpenAIOptions, WaitOptions } from "./provider.js";
export { MockOpenAIError } from "./errors.js";
export type { MockOpenAIErrorCode } from "./errors.js";
export { scriptFromPlans, say, text, call, reasoning, respond, lastUserText, forcedByToolChoice } from "./script.js";
export { renderResponse, renderChatCompletion, groupChatCalls, resolvePosition, CHAT_DONE, CHAT_DIALECTS } from "./render.js";
export type { PlannedEvent, RenderedResponse } from "./render.js";
export type {
  Api,
  ChatDialect,
  CutKind,
  Fault,
  FaultPlan,
  FaultPosition,
  RenderedCall,
  RequestInfo,
  RequestRecord,
  ResponseOutcome,
  ResponsesRequest,
  Script,
  ScriptedFunctionCall,
  ScriptedOutput,
  ScriptedReasoning,
  ScriptedResponse,
  ScriptedText,
  SentEvent,
  Timing,
} from "./types.js";
