/**
 * The ledger level's deterministic checks, one file per concern, every check exported by name
 * (as @keyv/test-suite and abstract-level export theirs), so an adapter's own suite can run a
 * concern or a single check: `registerChecks("leases", LEASE_LENGTH_CHECKS.map((c) => bindLedgerCheck(c, subject)), t)`.
 */
import { compareRuleIds } from "../../rules.js";
import { ATOMICITY_CHECKS } from "./atomicity.js";
import { AUDIT_CHECKS } from "./audit.js";
import { LIST_ROWS_CHECKS } from "./list-rows.js";
import { RESOLVE_CHECKS } from "./resolve.js";
import { SUPPORTS_CHECKS } from "./supports.js";
import { CAPABILITIES_CHECKS } from "./capabilities.js";
import { CLAIM_BEFORE_RUN_CHECKS } from "./claim-before-run.js";
import { CLAIM_ID_CHECKS } from "./claim-id.js";
import type { LedgerCheckSpec } from "./common.js";
import { CORRUPTION_CHECKS } from "./corruption.js";
import { FAILURES_CHECKS } from "./failures.js";
import { EXPIRED_IN_FLIGHT_CHECKS } from "./expired-in-flight.js";
import { FENCING_CHECKS } from "./fencing.js";
import { KEYS_CHECKS } from "./keys.js";
import { LEASE_LENGTH_CHECKS } from "./lease-length.js";
import { LEASES_CHECKS } from "./leases.js";
import { LIVENESS_CHECKS } from "./liveness.js";
import { RACE_CHECKS } from "./races.js";
import { REQUESTS_CHECKS } from "./requests.js";
import { RESULTS_CHECKS } from "./results.js";
import { RETENTION_LENGTH_CHECKS } from "./retention-length.js";
import { RETENTION_CHECKS } from "./retention.js";
import { RETIRE_CHECKS } from "./retire.js";
import { SILENT_STORE_CHECKS } from "./silent-store.js";
import { STORE_CLOCK_CHECKS } from "./store-clock.js";
import { TRANSITIONS_CHECKS } from "./transitions.js";
import { UNAVAILABILITY_CHECKS } from "./unavailability.js";

export * from "./atomicity.js";
export * from "./audit.js";
export * from "./list-rows.js";
export * from "./resolve.js";
export * from "./supports.js";
export * from "./capabilities.js";
export * from "./claim-before-run.js";
export * from "./claim-id.js";
export * from "./corruption.js";
export * from "./failures.js";
export * from "./expired-in-flight.js";
export * from "./fencing.js";
export * from "./keys.js";
export * from "./lease-length.js";
export * from "./leases.js";
export * from "./liveness.js";
export * from "./races.js";
export * from "./requests.js";
export * from "./results.js";
export * from "./retention-length.js";
export * from "./retention.js";
export * from "./retire.js";
export * from "./silent-store.js";
export * from "./store-clock.js";
export * from "./transitions.js";
export * from "./unavailability.js";
export { type LedgerCheckSpec, TRICKY_RESULTS, TRICKY_REQUESTS, jsonTextOfBytes } from "./common.js";

/** The concerns, each a file of this directory, in the order a report lists them. */
export const LEDGER_CHECKS_BY_CONCERN: Readonly<Record<string, readonly LedgerCheckSpec[]>> = {
  atomicity: ATOMICITY_CHECKS,
  keys: KEYS_CHECKS,
  "claim-before-run": CLAIM_BEFORE_RUN_CHECKS,
  transitions: TRANSITIONS_CHECKS,
  fencing: FENCING_CHECKS,
  leases: LEASES_CHECKS,
  "lease-length": LEASE_LENGTH_CHECKS,
  races: RACE_CHECKS,
  failures: FAILURES_CHECKS,
  results: RESULTS_CHECKS,
  corruption: CORRUPTION_CHECKS,
  unavailability: UNAVAILABILITY_CHECKS,
  "silent-store": SILENT_STORE_CHECKS,
  retention: RETENTION_CHECKS,
  "retention-length": RETENTION_LENGTH_CHECKS,
  capabilities: CAPABILITIES_CHECKS,
  "store-clock": STORE_CLOCK_CHECKS,
  liveness: LIVENESS_CHECKS,
  requests: REQUESTS_CHECKS,
  "claim-id": CLAIM_ID_CHECKS,
  retire: RETIRE_CHECKS,
  "expired-in-flight": EXPIRED_IN_FLIGHT_CHECKS,
  supports: SUPPORTS_CHECKS,
  "list-rows": LIST_ROWS_CHECKS,
  resolve: RESOLVE_CHECKS,
  audit: AUDIT_CHECKS,
};

/** Every deterministic ledger check, in rule order (concern order within a rule). */
export const LEDGER_CHECK_SPECS: readonly LedgerCheckSpec[] = Object.values(LEDGER_CHECKS_BY_CONCERN)
  .flat()
  .map((spec, i) => ({ spec, i }))
  .sort((a, b) => compareRuleIds(a.spec.rule, b.spec.rule) || a.i - b.i)
  .map(({ spec }) => spec);
