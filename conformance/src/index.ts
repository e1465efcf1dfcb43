// The ledger level (CONF-1): everything "@dispatch-once/conformance/ledger" exports, which imports
// only @dispatch-once/core and fast-check. Every deterministic check is exported by name.
export * from "./ledger/index.js";
// The conversation-store level (TURN-2, TURN-5, TURN-7, TURN-9..TURN-12, TURN-14, TURN-15, TURN-17..TURN-19, RECORD-4).
export * from "./conversation/index.js";
// The end-to-end level (CONF-2) is the separate package @dispatch-once/conformance-e2e (its mocks
// pull express and better-sqlite3); the CLI loads it for --level e2e through this.
export { loadEndToEndLevel, END_TO_END_PACKAGE } from "./levels.js";
