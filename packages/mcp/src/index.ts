export { META_PREFIX, IDEMPOTENCY_KEY_META, ERROR_META, REPLAYED_META, STORED_ARGUMENTS_META, IDENTITY_META, EFFECT_META, IDEMPOTENCY_KEY_PATTERN, TURN_META, TURN_CALLS_METHOD } from "./meta.js";
export {
  idempotencyKeyFor,
  withIdempotencyKey,
  mcpTurn,
  type McpTurn,
  type McpTurnContext,
  type McpTurnOptions,
  type McpUnansweredCalls,
  type McpKeyOptions,
  type ListedTool,
  type CallToolParams,
  type ToolCallingClient,
} from "./client.js";
export {
  McpToolGuard,
  type McpToolGuardOptions,
  type GuardedToolExtra,
  type GuardedToolCallback,
  type GuardedToolConfig,
  type GuardErrorMeta,
  type McpTurnCall,
  type McpTurnCalls,
  guardConversationId,
} from "./server.js";
export { McpGuardError, type McpGuardErrorCode } from "./errors/base.js";
export { IdempotencyKeyMissingError } from "./errors/idempotency-key-missing.js";
export { IdempotencyKeyMalformedError } from "./errors/idempotency-key-malformed.js";
export { ToolIdentityMismatchError } from "./errors/tool-identity-mismatch.js";
export { ToolResultInvalidError } from "./errors/tool-result-invalid.js";
export { UnguardedCallFailedError } from "./errors/unguarded-call-failed.js";
