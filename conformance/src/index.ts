// The ledger level (CONF-1): everything "@dispatch-once/conformance/ledger" exports, which imports
// only @dispatch-once/core and fast-check. Every deterministic check is exported by name.
export * from "./ledger/index.js";
export {
  endToEndChecks,
  registerEndToEndChecks,
  runEndToEnd,
  END_TO_END_CHECK_NAME,
  DEFAULT_END_TO_END_RUNS,
  type EndToEndOptions,
} from "./e2e/index.js";
// The conversation-store level (TURN-2, TURN-5, TURN-7, TURN-9..TURN-12, TURN-14, RECORD-4).
export * from "./conversation/index.js";
