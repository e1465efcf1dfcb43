import type { Check } from "../types.js";
import { randomSeed, registerChecks, type TestRegistrar } from "../ledger/index.js";
import { propertyTimeoutMs } from "../ledger/defaults.js";
import { CONVERSATION_CHECK_SPECS } from "./checks.js";
import { CONVERSATION_MODEL_CHECK_NAME, runConversationModelProperty } from "./model.js";
import type { ConversationCheckOptions, ConversationStoreSubject, ConversationSubjectCapability } from "./types.js";

const CAPABILITY_WORDS: Record<ConversationSubjectCapability, string> = {
  sharedAcrossProcesses: "needs sharedAcrossProcesses (several instances are one store)",
  survivesRestart: "needs survivesRestart (a fresh instance sees earlier writes)",
  corruption: "needs corruption (raw.corrupt)",
  unavailability: "needs unavailability (raw.disconnected)",
  listFailedTurns: "needs listFailedTurns (the store offers listFailedTurns)",
  listStalledMessages: "needs listStalledMessages (the store offers listStalledMessages)",
  recordsWithCommit: "needs recordsWithCommit (a commit keeps its record in the same write)",
  legacyFailedRows: "needs legacyFailedRows (raw.forgetFailedAt writes a failed message as a store from before failedAt left it)",
  leaseGrants: "needs leaseGrants (the store takes lease grant ids: supports.leaseGrants, releaseLeaseGrant)",
  reopenWindow: "needs reopenWindow (appendUserMessage takes reopenWithinMs: supports.reopenWindow)",
  boundAt: "needs boundAt (a bound message shows its first binding's time: supports.boundAt)",
  callKeys: "needs callKeys (a commit keeps its calls' keys with the turn: supports.callKeys)",
  clockSkew: "needs clockSkew (raw.skewedInstance: an instance on a skewed process clock)",
  silentStore: "needs silentStore (raw.storeAddress and raw.openVia, for the kit's SilenceProxy in front of the storage, and limits.operationBoundMs, the store's documented bound)",
};

/**
 * Every conversation-store check for a subject: the deterministic checks (one per rule
 * aspect) and the model-based property against MemoryConversationStore. Checks that need a
 * capability the subject does not declare come back with `applicable: false` and a reason.
 */
export function conversationStoreChecks(subject: ConversationStoreSubject, options: ConversationCheckOptions = {}): Check[] {
  validateConversationStoreSubject(subject);
  const runs = options.runs ?? envInteger("CONFORMANCE_RUNS") ?? 100;
  const seed = options.seed ?? envInteger("CONFORMANCE_SEED") ?? randomSeed();
  const checks: Check[] = CONVERSATION_CHECK_SPECS.map((spec) => {
    const missing = (spec.needs ?? []).filter((c) => !subject.capabilities[c]);
    const check: Check = { rule: spec.rule, name: spec.name, applicable: missing.length === 0, run: () => spec.run(subject) };
    if (missing.length > 0) check.reasonNotApplicable = missing.map((c) => CAPABILITY_WORDS[c]).join("; ");
    return check;
  });
  // As the ledger level's properties: the limit grows with the runs, and fast-check stops starting runs
  // at 90 % of it, so a slow but live store is reported as an interrupted property (a failure) and only
  // a hung one reaches the hard limit.
  const limit = options.checkTimeoutMs === undefined ? undefined : propertyTimeoutMs(options.checkTimeoutMs, runs, options.path !== undefined);
  checks.push({
    rule: "TURN-5",
    name: `${CONVERSATION_MODEL_CHECK_NAME} (${options.path === undefined ? `${runs} runs` : `replay of path ${options.path}`}, seed ${seed})`,
    applicable: true,
    ...(limit === undefined ? {} : { timeoutMs: limit }),
    run: () =>
      runConversationModelProperty(subject, {
        runs,
        seed,
        ...(options.path === undefined ? {} : { path: options.path }),
        ...(options.maxSteps === undefined ? {} : { maxSteps: options.maxSteps }),
        ...(limit === undefined ? {} : { timeLimitMs: Math.floor(limit * 0.9) }),
      }),
  });
  return checks;
}

/**
 * Registers every conversation-store check with any describe/it runner (vitest, mocha,
 * node:test), named `${rule} ${name}`; not-applicable checks are listed as such.
 */
export function registerConversationStoreChecks(subject: ConversationStoreSubject, t: TestRegistrar, options?: ConversationCheckOptions): void {
  // A networked store with fsync on every commit runs about a run of the model per 0.3 s:
  // the per-test timeout grows with the runs so that CONFORMANCE_RUNS=1000 fits.
  const runs = options?.runs ?? envInteger("CONFORMANCE_RUNS") ?? 100;
  registerChecks(`@dispatch-once/conformance conversation store: ${subject.name}`, conversationStoreChecks(subject, options), t, Math.max(300_000, runs * 1_000));
}

function envInteger(name: string): number | undefined {
  const text = typeof process === "undefined" ? undefined : process.env[name];
  if (text === undefined || text === "") return undefined;
  const value = Number(text);
  if (!Number.isSafeInteger(value)) throw new TypeError(`${name} must be an integer, got ${JSON.stringify(text)}`);
  return value;
}

/**
 * Throws a TypeError naming what is wrong when `subject` is not a ConversationStoreSubject (its
 * shape only: `create` is not called). conversationStoreChecks runs it first; the CLI runs it on
 * a --store module's default export.
 */
export function validateConversationStoreSubject(subject: ConversationStoreSubject): void {
  if (typeof subject !== "object" || subject === null) throw new TypeError("conversation-store subject: expected an object");
  if (typeof subject.name !== "string" || subject.name === "") throw new TypeError("conversation-store subject: `name` must be a non-empty string");
  if (typeof subject.create !== "function") throw new TypeError(`conversation-store subject ${subject.name}: \`create\` must be a function`);
  if (subject.conversationStore !== undefined && typeof subject.conversationStore !== "function") {
    throw new TypeError(`conversation-store subject ${subject.name}: \`conversationStore\`, when given, must be a function ({ now }) => ConversationStore`);
  }
  const caps = subject.capabilities as unknown as Record<string, unknown> | undefined;
  for (const flag of ["sharedAcrossProcesses", "survivesRestart", "corruption", "unavailability"]) {
    if (typeof caps?.[flag] !== "boolean") {
      throw new TypeError(`conversation-store subject ${subject.name}: capabilities.${flag} must be declared as true or false`);
    }
  }
  // Optional flags: absent is false, anything else but a boolean is a mistake.
  for (const flag of ["listFailedTurns", "listStalledMessages", "recordsWithCommit", "legacyFailedRows", "leaseGrants", "reopenWindow", "boundAt", "callKeys", "clockSkew", "silentStore"]) {
    if (caps?.[flag] !== undefined && typeof caps[flag] !== "boolean") {
      throw new TypeError(`conversation-store subject ${subject.name}: capabilities.${flag}, when given, must be true or false`);
    }
  }
  // The silent-store checks judge against the subject's own bound: without one they could only guess.
  const bound = subject.limits?.operationBoundMs;
  if (caps?.silentStore === true && (typeof bound !== "number" || !Number.isFinite(bound) || bound <= 0)) {
    throw new TypeError(`conversation-store subject ${subject.name}: capabilities.silentStore needs limits.operationBoundMs, the store's documented bound on every method (TURN-21), a positive number of ms; got ${String(bound)}`);
  }
}

export * from "./checks.js";
export { STALLED_MESSAGES_CHECKS, stalledListedExactly, stalledListPagesAndRefuses } from "./stalled-messages.js";
export { FAILED_TURNS_CHECKS, failedListedExactly, failedListedInOrder, failedListLimit, failedListCursor, failedListByConversation, failedListOlderThan, failedListReadOnly, failedListUnknownTime, failedListTiesByCodePoint } from "./failed-turns.js";
export {
  CONVERSATION_MODEL_CHECK_NAME,
  MODEL_CONTENT,
  runConversationModelProperty,
  runConversationScenario,
  conversationStepArbitrary,
  type ConversationStep,
  type ScenarioInstances,
  type ConversationPropertyOptions,
  type FenceRef,
} from "./model.js";
export { REOPEN_WINDOW_CHECKS, BOUND_AT_CHECKS, reopenWithinWindow, reopenWindowNotForOtherBound, reopenWindowFromFirstFailure, listingJudgesReopenWindow, boundShowsBoundAt, reopenWindowFromBinding, boundAtInheritedAtFailedIndex } from "./reopen-window.js";
export { SILENT_CONVERSATION_STORE_CHECKS, silentConversationStoreAfterConnecting, silentConversationStoreBeforeConnecting, declaredConversationBound } from "./silent-store.js";
export { CALL_KEYS_CHECKS, callKeysKept, callKeysRefused } from "./call-keys.js";
export { LEASE_GRANT_CHECKS, grantResentIsSameGrant, grantOtherIdHeld, grantResentAfterTakeoverRefused, grantReleasedByGrantId, grantEarlierRefused, grantIdChecked, grantIdsComparedExactly } from "./lease-grants.js";
export { memoryConversationSubject, memoryRaw, memoryConversationState, monotonicClock } from "./memory-subject.js";
export { LEASE_MS as CONVERSATION_LEASE_MS, TRICKY_CONTENT } from "./support.js";
export { skewStoreProcessClock } from "../ledger/skew.js";
export type * from "./types.js";
