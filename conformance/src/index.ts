export type {
  LedgerSubject,
  LedgerFixture,
  SubjectCapabilities,
  SubjectCapability,
  Check,
  LedgerCheckOptions,
  CheckStatus,
  CheckResult,
  Counterexample,
  Report,
  RuleSummary,
  RuleRequirement,
} from "./types.js";
export { ledgerChecks, registerLedgerChecks, registerChecks, randomSeed, MODEL_CHECK_PREFIX, type TestRegistrar } from "./ledger/index.js";
export {
  runChecks,
  runCheck,
  summarizeRules,
  conforms,
  renderReportTable,
  renderReportJson,
  renderCheckList,
  renderFailures,
  renderComplianceMatrix,
  patchComplianceMatrix,
  MATRIX_START,
  MATRIX_END,
  type RunChecksOptions,
} from "./report.js";
export { RULES, ruleInfo, compareRuleIds, type RuleInfo } from "./rules.js";
export { ConformanceFailure } from "./failure.js";
export { runScenario, describeStep, type Step } from "./ledger/model.js";
export { BUNDLED_LEDGER_VECTORS, parseVectorFile, runVectorCase, type VectorCase, type VectorFile, type VectorStep } from "./ledger/vectors.js";
export { TRICKY_RESULTS } from "./ledger/checks.js";
export { memoryLedgerSubject } from "./subjects/memory.js";
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
