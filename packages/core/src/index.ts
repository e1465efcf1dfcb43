export { canonicalize, MAX_CANONICAL_DEPTH, type JsonValue } from "./canonical.js";
export {
  deriveKey,
  keyMaterial,
  CONVERSATION_ID_PATTERN,
  TOOL_NAME_PATTERN,
  KEY_HEX_LENGTH,
  type KeyInput,
} from "./key.js";
export * from "./errors/index.js";
export * from "./ledger.js";
export { checkClaimOrigin, checkListQuery, checkResolveRequest, checkRetireRequest, decodeListCursor, encodeListCursor, rowSince } from "./ledger-ops.js";
export { MemoryLedger, assertClaimId, assertStorableResult, releasedClaimError, retiredClaimError, utf8ByteLength, type MemoryLedgerOptions } from "./memory-ledger.js";
export {
  defineTool,
  ToolRegistry,
  type ToolDefinition,
  type ToolRunContext,
  type ReconcileContext,
  type ReconcileCause,
  type ReconcileVerdict,
  type ToolAuditEntry,
  type ProviderToolSchema,
} from "./registry.js";
export {
  Dispatcher,
  UnguardedDispatcher,
  type DispatcherOptions,
  type CallDispatcher,
  type TurnDispatch,
  type TurnDispatchOptions,
  type TurnContext,
  type ToolCall,
  type DispatchOutcome,
  type DispatchEvent,
  type RecordWrite,
  type RunEffect,
  type DispatchLogger,
  type ReconcileReport,
  type ReconcileUnknownOptions,
  DEFAULT_PROBE_TIMEOUT_MS,
  DEFAULT_RUN_TIMEOUT_MS,
  type ProbeVerdict,
  RECONCILE_ACTOR,
} from "./dispatcher.js";
export type {
  ConversationStore,
  ConversationStoreCapabilities,
  ConversationStoreSupports,
  MessageState,
  StoredMessage,
  StoredTurn,
  CommittedCallKey,
  AppendResult,
  AppendOptions,
  LeaseResult,
  TurnSnapshot,
  TurnCommit,
  FailedTurn,
  FailedTurnsQuery,
  FailedTurnsPage,
  StalledMessage,
  StalledMessagesQuery,
  StalledMessagesPage,
} from "./conversation.js";
export { DEFAULT_FAILED_TURNS_LIMIT, MAX_FAILED_TURNS_LIMIT, LEASE_GRANT_ID_PATTERN, LEASE_GRANT_RETENTION_MS, newLeaseGrantId } from "./conversation.js";
export {
  checkFailedTurnsQuery,
  checkStalledMessagesQuery,
  encodeFailedTurnsCursor,
  decodeFailedTurnsCursor,
  isAfterPosition,
  compareStoreIds,
  type FailedTurnPosition,
} from "./failed-turns.js";
export {
  MemoryConversationStore,
  checkMessageId,
  type MemoryConversationStoreOptions,
} from "./memory-conversation-store.js";
export { toJsonData, MAX_RESULT_DEPTH } from "./json-data.js";
export {
  ERROR_CATALOGUE,
  catalogueEntry,
  effectOf,
  retryableOf,
  type ErrorCatalogueEntry,
  type EffectKnowledge,
  type Retryable,
} from "./error-catalogue.js";
export { tenantConversationId, TENANT_PATTERN } from "./tenant.js";
export { RECORD_ROW_PREFIX, isRecordRowName } from "./record-rows.js";
