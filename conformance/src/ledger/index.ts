/**
 * The ledger level of the kit ("@dispatch-once/conformance/ledger"): certifies a Ledger adapter
 * against spec §6 (CONF-1). It imports @dispatch-once/core and fast-check only (a test scans its
 * import graph), so an adapter author does not install the end-to-end level's mocks.
 */
import type { Check, LedgerCheckOptions, LedgerSubject, SubjectCapability } from "../types.js";
import { runWithTimeLimit } from "../report.js";
import { LEDGER_CHECK_SPECS, type LedgerCheckSpec } from "./checks/index.js";
import { checkContext } from "./context.js";
import { propertyTimeoutMs, resolveLedgerOptions } from "./defaults.js";
import { MODEL_CHECK_NAME, runModelProperty } from "./property.js";
import { RESULT_PROPERTY_NAME, runResultProperty } from "./result-property.js";
import { RETIRE_PROPERTY_NAME, runRetireProperty } from "./retire-property.js";
import { PendingOperations, trackSubject } from "./tracking.js";
import { BUNDLED_LEDGER_VECTORS, parseVectorFile, runVectorCase, vectorNeeds } from "./vectors.js";

export { randomSeed, resolveLedgerOptions, propertyTimeoutMs, endToEndTimeoutMs, END_TO_END_RUNS_PER_CHECK_TIMEOUT, envInteger, ENVIRONMENT, DEFAULT_RUNS, DEFAULT_END_TO_END_RUNS, DEFAULT_CHECK_TIMEOUT_MS, DEFAULT_RUN_TIMEOUT_MS, MAX_CONSECUTIVE_TIMEOUTS, type ResolvedLedgerOptions, type EnvironmentVariable } from "./defaults.js";
export { checkContext, mulberry32, seededKey, type LedgerCheckContext } from "./context.js";
export { PendingOperations, trackSubject } from "./tracking.js";
export { skewProcessClock } from "./skew.js";
export { startSilenceProxy, storeAddressOf, urlVia, type SilenceProxy, type StoreAddress } from "../silent/silence-proxy.js";
export { callSequence, canonicalArgs, mixedResponses, type ResponseCall } from "../one-response.js";
export { runProperty, valueAtPath, failedCase, type PropertyOutcome, type PropertyRunOptions, type FailedOutcome } from "./property-runner.js";
export * from "./checks/index.js";
export { MODEL_CHECK_NAME, runModelProperty, scenarioSteps } from "./property.js";
export { RESULT_PROPERTY_NAME, runResultProperty, resultTexts } from "./result-property.js";
export { RETIRE_PROPERTY_NAME, runRetireProperty, runRetireScenario, retireStepArbitrary, type RetireStep } from "./retire-property.js";
export { runScenario, describeStep, type Step } from "./model.js";
export { BUNDLED_LEDGER_VECTORS, parseVectorFile, runVectorCase, vectorNeeds, type VectorCase, type VectorFile, type VectorStep } from "./vectors.js";
export { memoryLedgerSubject } from "../subjects/memory.js";
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
  ConformanceLevel,
  LevelOptions,
} from "../types.js";
export {
  runChecks,
  runCheck,
  runWithTimeLimit,
  INCONCLUSIVE_ATTEMPTS,
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
} from "../report.js";
export { RULES, ruleInfo, compareRuleIds, type RuleInfo } from "../rules.js";
export { ConformanceFailure, type PropertyInterruption } from "../failure.js";
export { LevelNotInstalledError } from "../errors/level-not-installed.js";
export { CheckInconclusive } from "../errors/check-inconclusive.js";

const CAPABILITY_WORDS: Record<SubjectCapability, string> = {
  sharedAcrossProcesses: "needs sharedAcrossProcesses (one winner across instances)",
  survivesRestart: "needs survivesRestart (a fresh instance sees earlier rows)",
  corruption: "needs corruption (raw.corrupt)",
  unavailability: "needs unavailability (raw.disconnected)",
  silentStore: "needs silentStore (raw.storeAddress and raw.openVia, for the kit's SilenceProxy in front of the store, and limits.operationBoundMs, the adapter's documented bound)",
  clockSkew: "needs clockSkew (raw.skewedInstance: an instance on a skewed process clock)",
  listRows: "the ledger does not offer listRows (capabilities.supports.listRows)",
  resolve: "the ledger does not offer resolve (capabilities.supports.resolve)",
  auditTrail: "the ledger does not offer auditTrail (capabilities.supports.auditTrail)",
  retire: "the ledger does not offer retire (capabilities.supports.retire)",
  listExpiredInFlight: "the subject does not declare listExpiredInFlight (declare it when the ledger offers it: capabilities.supports.listExpiredInFlight)",
};

/**
 * One deterministic check bound to a subject: its keys and random choices come from `seed` and
 * its name, and its calls into the subject are tracked so that a timeout names what was pending.
 */
export function bindLedgerCheck(spec: LedgerCheckSpec, subject: LedgerSubject, options: LedgerCheckOptions = {}): Check {
  const { seed, checkTimeoutMs } = resolveLedgerOptions(options);
  const missing = (spec.needs ?? []).filter((c) => !subject.capabilities[c]);
  const pending = new PendingOperations();
  const tracked = trackSubject(subject, pending);
  const check: Check = {
    rule: spec.rule,
    name: spec.name,
    applicable: missing.length === 0,
    // A check that waits for real time gets that time on top of its limit.
    timeoutMs: checkTimeoutMs + (spec.waitsMs ?? 0),
    pending: () => pending.list(),
    run: () => {
      pending.clear();
      return spec.run(checkContext(tracked, seed, spec.name));
    },
  };
  if (missing.length > 0) check.reasonNotApplicable = missing.map((c) => CAPABILITY_WORDS[c]).join("; ");
  return check;
}

/**
 * Every ledger-level check for a subject: the deterministic checks (one per rule aspect), the
 * model-based property check, and the spec's ledger-transition vectors. Checks that need a
 * capability the subject does not declare are returned with `applicable: false` and a reason.
 * Defaults (runs, seed, time limits) come from resolveLedgerOptions: the CLI uses the same.
 */
export function ledgerChecks(subject: LedgerSubject, options: LedgerCheckOptions = {}): Check[] {
  validateSubject(subject);
  const { runs, seed, path, checkTimeoutMs } = resolveLedgerOptions(options);
  const resolved = { runs, seed, checkTimeoutMs };
  const checks: Check[] = LEDGER_CHECK_SPECS.map((spec) => bindLedgerCheck(spec, subject, resolved));
  const propertyLimit = propertyTimeoutMs(checkTimeoutMs, runs, path !== undefined);
  const property = (rule: string, name: string, run: (tracked: LedgerSubject) => Promise<void>, needs: SubjectCapability[] = []): Check => {
    const pending = new PendingOperations();
    const tracked = trackSubject(subject, pending);
    const missing = needs.filter((c) => !subject.capabilities[c]);
    return {
      rule,
      name: `${name} (${path === undefined ? `${runs} runs` : `replay of path ${path}`}, seed ${seed})`,
      applicable: missing.length === 0,
      ...(missing.length === 0 ? {} : { reasonNotApplicable: missing.map((c) => CAPABILITY_WORDS[c]).join("; ") }),
      timeoutMs: propertyLimit,
      pending: () => pending.list(),
      run: () => {
        pending.clear();
        return run(tracked);
      },
    };
  };
  // fast-check stops starting runs at 90 % of the limit, so a slow but live subject is reported as an
  // interrupted property (a failure) and only a hung one reaches the hard limit.
  const timeLimitMs = Math.floor(propertyLimit * 0.9);
  const propertyOptions = { runs, seed, timeLimitMs, ...(path === undefined ? {} : { path }) };
  checks.push(property("LEDGER-3", MODEL_CHECK_NAME, (tracked) => runModelProperty(tracked, propertyOptions)));
  checks.push(property("LEDGER-10", RESULT_PROPERTY_NAME, (tracked) => runResultProperty(tracked, propertyOptions)));
  checks.push(property("LEDGER-28", RETIRE_PROPERTY_NAME, (tracked) => runRetireProperty(tracked, propertyOptions), ["retire"]));
  const vectors = parseVectorFile(options.vectors ?? BUNDLED_LEDGER_VECTORS);
  for (const vector of vectors.cases) {
    const pending = new PendingOperations();
    const tracked = trackSubject(subject, pending);
    // A case that calls retire (LEDGER-28) applies only to a ledger that offers it.
    const missing = vectorNeeds(vector).filter((c) => !subject.capabilities[c]);
    checks.push({
      rule: vector.rule,
      name: `vector ${vector.id}: ${vector.description}`,
      applicable: missing.length === 0,
      ...(missing.length === 0 ? {} : { reasonNotApplicable: missing.map((c) => CAPABILITY_WORDS[c]).join("; ") }),
      timeoutMs: checkTimeoutMs,
      pending: () => pending.list(),
      run: () => {
        pending.clear();
        return runVectorCase(tracked, vector, { seed });
      },
    });
  }
  return checks;
}

/** The name prefix of the model-based check, for filtering (`--only model`). */
export const MODEL_CHECK_PREFIX = "model-based:";

export interface TestRegistrar {
  describe: (name: string, fn: () => void) => void;
  it: ((name: string, fn: () => Promise<void>, timeout?: number) => void) & {
    skip?: (name: string, fn: () => Promise<void>, timeout?: number) => void;
  };
}

/**
 * Registers checks with any describe/it runner (vitest, mocha, node:test). Test names are
 * `${rule} ${name}`; a not-applicable check is registered as a passing test whose name ends
 * with "(not applicable: <reason>)", so it is listed, never silently dropped. A check with a time
 * limit (Check.timeoutMs) fails at it, naming what the subject had pending; the runner's own
 * timeout is set beyond it so that this message, not a bare "timed out", is what a reader sees.
 */
export function registerChecks(title: string, checks: readonly Check[], t: TestRegistrar, timeoutMs = 300_000): void {
  t.describe(title, () => {
    for (const check of checks) {
      if (check.applicable) {
        const limit = check.timeoutMs;
        if (limit === undefined) t.it(`${check.rule} ${check.name}`, () => check.run(), timeoutMs);
        else t.it(`${check.rule} ${check.name}`, () => runWithTimeLimit(check, limit), Math.max(timeoutMs, limit + 10_000));
      } else {
        t.it(`${check.rule} ${check.name} (not applicable: ${check.reasonNotApplicable ?? "capability not declared"})`, async () => {}, timeoutMs);
      }
    }
  });
}

export function registerLedgerChecks(subject: LedgerSubject, t: TestRegistrar, options?: LedgerCheckOptions): void {
  registerChecks(`@dispatch-once/conformance ledger level: ${subject.name}`, ledgerChecks(subject, options), t);
}

function validateSubject(subject: LedgerSubject): void {
  if (typeof subject !== "object" || subject === null) throw new TypeError("ledger subject: expected an object");
  if (typeof subject.name !== "string" || subject.name === "") throw new TypeError("ledger subject: `name` must be a non-empty string");
  if (typeof subject.create !== "function") throw new TypeError(`ledger subject ${subject.name}: \`create\` must be a function`);
  const caps = subject.capabilities as unknown as Record<string, unknown> | undefined;
  for (const flag of ["sharedAcrossProcesses", "survivesRestart", "corruption", "unavailability"]) {
    if (typeof caps?.[flag] !== "boolean") {
      throw new TypeError(`ledger subject ${subject.name}: capabilities.${flag} must be declared as true or false`);
    }
  }
  if (caps?.clockSkew !== undefined && typeof caps.clockSkew !== "boolean") {
    throw new TypeError(`ledger subject ${subject.name}: capabilities.clockSkew, when declared, must be true or false`);
  }
  if (caps?.silentStore !== undefined && typeof caps.silentStore !== "boolean") {
    throw new TypeError(`ledger subject ${subject.name}: capabilities.silentStore, when declared, must be true or false`);
  }
  // The silent-store checks judge against the subject's own bound: without one they could only guess.
  const bound = subject.limits?.operationBoundMs;
  if (caps?.silentStore === true && (typeof bound !== "number" || !Number.isFinite(bound) || bound <= 0)) {
    throw new TypeError(`ledger subject ${subject.name}: capabilities.silentStore needs limits.operationBoundMs, the adapter's documented bound on every operation (LEDGER-12), a positive number of ms; got ${String(bound)}`);
  }
}
