/*
 * @dispatch-once/core/internal: the toolkit for store adapter authors (ledgers, conversation
 * stores). What every adapter must do the same way lives here once, so each adapter keeps only
 * its mapping onto its store. Not for applications: the main entry point is the public API.
 */
export {
  encodeStoreJson,
  checkStoreJson,
  decodeStoreJson,
  decodeStoredMessage,
  decodeStoredTurn,
  checkCallKeys,
  encodeCallKeys,
  MAX_CALL_KEY_LABEL_LENGTH,
  beginTurnIndex,
  checkLeaseOwner,
  checkTurnLeaseMs,
  checkLeaseGrantId,
  checkReopenWithinMs,
  checkUserMessage,
  MAX_LEASE_OWNER_LENGTH,
  type StoredMessageRow,
  type StoredTurnRow,
} from "./store-rows.js";
export { MAX_LEASE_MS, checkLeaseMs } from "./leases.js";
export { openWithin, type PragmaConnection } from "./sqlite-open.js";
export {
  MAX_CLAIM_LABEL_LENGTH,
  checkClaimRequest,
  checkExpiredInFlightOptions,
  checkLedgerKey,
  checkUnknownReason,
  MAX_UNKNOWN_REASON_LENGTH,
  checkLedgerLeaseMs,
  checkStoredError,
  resultRefusal,
  decodeLedgerRow,
  decodeLedgerColumns,
  decodeStoredError,
  decodeStoredInteger,
  type LedgerStoreLimits,
  type StoredLedgerFields,
  type StoredLedgerColumns,
  type DecodeLedgerRowOptions,
} from "./ledger-rows.js";
export { loggerOption } from "./logger.js";
// The same JSON data, member order aside (a store may give members back in another order): the
// dispatcher's and the runner's comparisons of stored data with what a caller sent again.
export { sameJsonData } from "../same-json.js";
export { MAX_TIMER_MS, unknownOptionName, unknownOptionMessage, type OptionNames } from "./options.js";
export { DeadlineError, withDeadline, type Deadline } from "./deadline.js";
// A turn's ledger rows and what each says of its effect: the runner's committed-turn record and
// the AI SDK, tool-runner and MCP listings of a turn's unanswered calls read them the same way.
export { turnRowsOf, turnRowEffect, turnRowInput, UNLISTED_REASON, type TurnRowEffect } from "./turn-rows.js";
// Whether a row's key is one the registry's definition of its tool derives again (IDENT-4): the
// CLI's audit --ledger before a deploy and the dispatcher's guard on re-runs (IDENT-10) read it alike.
export { checkRowDefinition, MAX_ORDINAL_TRIED, MAX_TURN_MESSAGES, MESSAGE_ORDINAL_STRIDE, type KeyDeriver, type RowDefinitionCheck } from "./row-definition.js";
// One timer per distinct bound for many pending operations (the dispatcher's run timeouts, the
// Redis ledger's command bound): a setTimeout made and cleared per operation costs more.
export { RunDeadline, RunDeadlines } from "../run-deadlines.js";
export { markRecordTool } from "../record-rows.js";
