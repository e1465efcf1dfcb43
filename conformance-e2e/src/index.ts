import {
  ConformanceFailure,
  DEFAULT_CHECK_TIMEOUT_MS,
  DEFAULT_END_TO_END_RUNS,
  PendingOperations,
  envInteger,
  endToEndTimeoutMs,
  failedCase,
  randomSeed,
  trackSubject,
  type ConformanceLevel,
  registerChecks,
  runProperty,
  type Check,
  type Counterexample,
  type LedgerSubject,
  type TestRegistrar,
} from "@dispatch-once/conformance/ledger";
import fc from "fast-check";
import { AI_SDK_MODEL_APIS, isCloudModelApi, requireCloudPackage, runAiSdkCase, startAiSdkWorld, type AiSdkAppOptions } from "./ai-sdk-case.js";
import { aiSdkScenarioArbitrary, withoutAiSdkSplices } from "./ai-sdk-scenario.js";
import { runCase, type CaseOptions } from "./case.js";
import { scenarioArbitrary, withClosingSearch, withoutSplices } from "./scenario.js";
import { ANTHROPIC_PLATFORMS, PROVIDERS, type AnthropicPlatform, type ProviderName } from "./provider.js";
import { startWorld } from "./world.js";

export { ANTHROPIC_PLATFORMS, PROVIDERS, RUNNER_PROVIDERS, anthropicPlatformOf, type AnthropicPlatform, type ProviderName, type RunnerProviderName, type CommittedCall, type CommittedResult, type TranscriptReader } from "./provider.js";
export { scenarioArbitrary, faultFree, withClosingSearch, withoutDeferral, withoutSplices, type Scenario, type DeferredCall } from "./scenario.js";
export { aiSdkScenarioArbitrary, messagesOf, withoutAiSdkSplices, withoutCrossTurnRepeats, withoutTabs, type AiSdkCrossTurnRepeat, type AiSdkTab, type AiSdkTabs, type AiSdkScenario, type AiSdkChatPlan, type AiSdkMessagePlan, type AiSdkCut, type AiSdkContinuation, type AiSdkRerunDivergence, type AiSdkSplice } from "./ai-sdk-scenario.js";
export type { AiSdkAppOptions, AiSdkMessage, AiSdkRequest, AiSdkToolSet, AiSdkTurnTools, AiSdkVertexOptions, AiSdkWrapOptions } from "./ai-sdk-case.js";
export type { OracleViolation } from "./oracle.js";
export type { DispatcherDefaults } from "./world.js";

export interface EndToEndOptions extends CaseOptions {
  /** End-to-end runs (random scenarios). Default 100; CI certifies with at least 1,000. */
  runs?: number;
  seed?: number;
  path?: string;
  /**
   * Time for the whole property, shrinking included; shrinking stops there and the smallest
   * counterexample found so far is reported. Default: 90 % of the CLI's limit for as many runs
   * (60,000 ms, or CONFORMANCE_CHECK_TIMEOUT_MS, per 20 runs), never under 600,000 ms (1,000 runs:
   * 2,700,000 ms). With `shrinkTimeLimitMs`, the time for the search alone.
   */
  timeLimitMs?: number;
  /**
   * A budget of its own for shrinking a failure, apart from the search: `timeLimitMs` then bounds
   * the search, which stops at the first failing scenario, and shrinking from it starts no
   * candidate after this long (the one running then finishes). The smallest failing scenario
   * reached is reported, with a seed and path that replay it; 0 reports the first failing
   * scenario as found. Whole conversations are slow to shrink, so a short budget keeps a failure
   * cheap and a generous `timeLimitMs` keeps a loaded host from cutting the search.
   * @default undefined: one time limit, `timeLimitMs`, bounds the search and the shrinking together
   * @example { timeLimitMs: 90_000, shrinkTimeLimitMs: 3_000 }
   */
  shrinkTimeLimitMs?: number;
  /**
   * The stream side the workers run: the Anthropic Messages API runner against apps/mock-provider,
   * the OpenAI Responses API runner against apps/mock-openai, or (`"openai-chat"`) the Chat
   * Completions runner (`ChatCompletionsRunner`) against apps/mock-openai's
   * `/v1/chat/completions`, with no splices drawn (the same oracle for the three); or
   * `"ai-sdk"`: an app of the Vercel AI SDK profile (spec §13.2) that drives real `streamText`
   * with tools wrapped by `createOnceTools` against apps/mock-openai, with its own oracle (the
   * effect log against what the app kept).
   * @default "anthropic"
   * @example { provider: "openai" }
   */
  provider?: ProviderName;
  /**
   * Only for `provider: "anthropic"`: every scenario runs its workers' client on this platform
   * (`"messages"`: `Anthropic` at the Messages API; `"bedrock"`: `AnthropicBedrock`; `"vertex"`:
   * `AnthropicVertex`) instead of the one drawn from the scenario (`anthropicPlatformOf`). A forced
   * platform whose SDK is not installed fails the run; a drawn one runs over the Messages API and
   * `onStats` counts it (`anthropic_platform_<platform>_not_installed`).
   * @default undefined: drawn per scenario
   * @example { anthropicPlatform: "bedrock" }
   */
  anthropicPlatform?: AnthropicPlatform;
  /**
   * Only for `provider: "ai-sdk"`: pieces of the app to replace (the kit's tests plant bugs here).
   * @default {}
   */
  aiSdk?: AiSdkAppOptions;
  /** Called once with the counts of what the runs exercised (deaths, 422s, re-asks, ...), summed. */
  onStats?: (stats: Record<string, number>) => void;
}

export const END_TO_END_CHECK_NAME =
  "end to end: random conversations, stream cuts at every position, downstream faults, worker deaths, distinct messages sent together, re-asks and every replay route perform each intent's effects exactly once and tell the truth about them";

/** Runs a certification makes unless told otherwise (CONFORMANCE_E2E_RUNS, else this): 1,000. */
export { DEFAULT_END_TO_END_RUNS };

/** The end-to-end level as checks (issue 6, level 2), named after CONF-2. */
export function endToEndChecks(subject: LedgerSubject, options: EndToEndOptions = {}): Check[] {
  // CI sizes runs and pins seeds through the environment, as the ledger level does.
  const runs = options.runs ?? envInteger("CONFORMANCE_E2E_RUNS", 1) ?? DEFAULT_END_TO_END_RUNS;
  const seed = options.seed ?? envInteger("CONFORMANCE_SEED") ?? randomSeed();
  const provider = checkProvider(options.provider);
  checkStoreOnProvider(provider, options);
  const limits = options.timeLimitMs === undefined ? endToEndTimeLimits(runs, options.path !== undefined) : undefined;
  const timeLimitMs = options.timeLimitMs ?? limits!.timeLimitMs;
  return [
    {
      rule: "CONF-2",
      name: `${END_TO_END_CHECK_NAME} (${options.path === undefined ? `${runs} runs` : `replay of path ${options.path}, one case`}, seed ${seed}) (provider ${provider})`,
      applicable: true,
      ...(limits === undefined ? {} : { timeoutMs: limits.checkTimeoutMs }),
      run: () => runEndToEnd(subject, { ...options, runs, seed, timeLimitMs }),
    },
  ];
}

/** The property's time limit before it was scaled: never less, so that no run of before is cut sooner. */
const FIXED_TIME_LIMIT_MS = 600_000;

/**
 * The end-to-end property's limits when none is given: fast-check stops starting runs at
 * `timeLimitMs`, 90 % of the CLI's limit for as many runs (CONFORMANCE_CHECK_TIMEOUT_MS, else 60 s,
 * per 20 runs) and never under 600 s; a registered check fails at `checkTimeoutMs`, a tenth beyond it.
 * A fixed 600 s cut a healthy ledger's 1,000 runs short (about 11 minutes on a loaded host).
 */
export function endToEndTimeLimits(runs: number, replay = false): { timeLimitMs: number; checkTimeoutMs: number } {
  const scaled = endToEndTimeoutMs(envInteger("CONFORMANCE_CHECK_TIMEOUT_MS", 1) ?? DEFAULT_CHECK_TIMEOUT_MS, runs, replay);
  const timeLimitMs = Math.max(FIXED_TIME_LIMIT_MS, Math.floor(scaled * 0.9));
  return { timeLimitMs, checkTimeoutMs: Math.max(scaled, Math.ceil(timeLimitMs / 0.9)) };
}

/** Registers the end-to-end level with any describe/it runner, as registerLedgerChecks does the ledger level. */
export function registerEndToEndChecks(subject: LedgerSubject, t: TestRegistrar, options: EndToEndOptions = {}): void {
  // Shrinking a failure replays whole conversations; allow for it beyond the runs themselves.
  registerChecks(`${subject.name} end to end (spec CONF-2)`, endToEndChecks(subject, options), t, 1_800_000);
}

/**
 * The end-to-end level as the `dispatch-once-conformance` CLI of @dispatch-once/conformance drives
 * it (`--level e2e`), with the same fail-closed treatment as the ledger level: the subject's calls
 * are tracked for the timeout report, the check has a time limit that grows with its runs, and
 * fast-check is told to stop a little before it (an interrupted run is reported as a failure).
 */
export const endToEndLevel: ConformanceLevel = {
  checks: (subject, o) => {
    const pending = new PendingOperations();
    const limit = endToEndTimeoutMs(o.checkTimeoutMs, o.runs, o.path !== undefined);
    const checks = endToEndChecks(trackSubject(subject, pending), {
      runs: o.runs,
      seed: o.seed,
      ...(o.provider === undefined ? {} : { provider: o.provider as ProviderName }),
      timeLimitMs: Math.floor(limit * 0.9),
      ...(o.path === undefined ? {} : { path: o.path }),
      ...(o.conversationStore === undefined ? {} : { conversationStore: o.conversationStore }),
    });
    return checks.map((c) => ({ ...c, timeoutMs: c.timeoutMs ?? limit, pending: c.pending ?? (() => pending.list()) }));
  },
  // The CLI's --store: the store under test runs under the runner (LevelOptions.conversationStore).
  takesConversationStore: true,
  replayable: () => true,
  property: () => "end to end",
};

/** The provider asked for, refused early when it is none the level runs on (a typo must not certify the default). */
function checkProvider(provider: string | undefined): ProviderName {
  if (provider === undefined) return "anthropic";
  if (!(PROVIDERS as readonly string[]).includes(provider)) {
    throw new TypeError(`provider must be one of ${PROVIDERS.join(", ")}, got ${JSON.stringify(provider)}`);
  }
  return provider as ProviderName;
}

/** The AI SDK app owns its loop: no runner, worker or conversation store of the kit's to replace (refused when the checks are made, not when they run). */
function checkStoreOnProvider(provider: ProviderName, options: EndToEndOptions): void {
  if (options.anthropicPlatform !== undefined && provider !== "anthropic") throw new TypeError(`anthropicPlatform applies to provider anthropic only, not ${provider}`);
  if (options.anthropicPlatform !== undefined && !ANTHROPIC_PLATFORMS.includes(options.anthropicPlatform)) {
    throw new TypeError(`anthropicPlatform must be one of ${ANTHROPIC_PLATFORMS.join(", ")}, got ${JSON.stringify(options.anthropicPlatform)}`);
  }
  if (provider === "ai-sdk" && (options.dispatcher !== undefined || options.conversationStore !== undefined || options.runner !== undefined)) {
    throw new TypeError("provider ai-sdk runs the app's own createOnceTools: plant bugs through options.aiSdk, not dispatcher, conversationStore or runner");
  }
}

export async function runEndToEnd(subject: LedgerSubject, options: EndToEndOptions = {}): Promise<void> {
  const provider = checkProvider(options.provider);
  checkStoreOnProvider(provider, options);
  if (provider === "ai-sdk") {
    const api = options.aiSdk?.modelApi;
    if (api !== undefined && !AI_SDK_MODEL_APIS.includes(api)) throw new TypeError(`aiSdk.modelApi must be one of ${AI_SDK_MODEL_APIS.map((a) => `"${a}"`).join(", ")}, got ${JSON.stringify(api)}`);
    const vertex = options.aiSdk?.vertex;
    if (vertex !== undefined) {
      if (api !== "gemini-vertex") throw new TypeError(`aiSdk.vertex applies to aiSdk.modelApi "gemini-vertex" only, not ${JSON.stringify(api ?? "responses")}`);
      for (const [field, value] of Object.entries(vertex)) {
        if (field !== "thoughts" && field !== "responseIdsStripped") throw new TypeError(`aiSdk.vertex has no field ${JSON.stringify(field)} (thoughts, responseIdsStripped)`);
        if (value !== undefined && typeof value !== "boolean") throw new TypeError(`aiSdk.vertex.${field} must be a boolean, got ${JSON.stringify(value)}`);
      }
    }
    if (isCloudModelApi(api)) await requireCloudPackage(api);
    const world = await startAiSdkWorld(api);
    try {
      // Over a Chat Completions model no splice is drawn: the mock has none on that API (a planted one is a 500).
      const scenarios = options.aiSdk?.modelApi === "chat" ? aiSdkScenarioArbitrary().map(withoutAiSdkSplices) : aiSdkScenarioArbitrary();
      await runKitProperty(scenarios, (scenario) => runAiSdkCase(world, subject, scenario, options.aiSdk), options);
    } finally {
      await world.close();
    }
    return;
  }
  const world = await startWorld(provider, options.anthropicPlatform === undefined ? {} : { platform: options.anthropicPlatform });
  // Chat Completions has no splices on the mock (it refuses them): none is drawn there. Its model
  // ends a turn that pays with a read (withClosingSearch), so that a cut can fall after its last
  // payment was dispatched, before the response finished.
  const scenarios = provider === "openai-chat" ? scenarioArbitrary().map((s) => withClosingSearch(withoutSplices(s))) : scenarioArbitrary();
  try {
    await runKitProperty(scenarios, (scenario) => runCase(world, subject, scenario, options), options);
  } finally {
    await world.close();
  }
}

/** A case's verdict, whichever app ran it. */
interface KitCaseRun {
  violations: { rule: string; message: string }[];
  timeline: string[];
  stats: Record<string, number>;
}

/**
 * The property around the cases, shared by every stream side: fast-check over the scenarios,
 * stats summed, and on failure the shrunk scenario with its timeline, seed and path.
 */
async function runKitProperty<S>(arbitrary: fc.Arbitrary<S>, runOne: (scenario: S) => Promise<KitCaseRun>, options: EndToEndOptions): Promise<void> {
  const seed = options.seed ?? randomSeed();
  const runs = options.runs ?? 100;
  const timeLimitMs = options.timeLimitMs ?? endToEndTimeLimits(runs, options.path !== undefined).timeLimitMs;
  const totals: Record<string, number> = {};
  let cases = 0;
  let last: KitCaseRun | undefined;
  // The rule the first failing scenario broke. Shrinking keeps to it: a smaller scenario that breaks
  // only another rule is another counterexample, and taking it would print a rule and a timeline that
  // depend on the host's speed (which scenario a time-bounded search and its shrinking reach first).
  let target: string | undefined;
  const predicate = async (scenario: S) => {
    cases++;
    const run = await runOne(scenario);
    last = run;
    for (const [k, v] of Object.entries(run.stats)) totals[k] = (totals[k] ?? 0) + v;
    const kept = target === undefined ? run.violations : run.violations.filter((x) => x.rule === target);
    if (kept.length > 0) {
      target ??= kept[0]!.rule;
      const ordered = [...kept, ...run.violations.filter((x) => !kept.includes(x))];
      throw new ConformanceFailure(ordered.map((x) => `${x.rule}: ${x.message}`).join("\n"), { violates: target });
    }
  };
  // As the ledger level: an interrupted run is a failure, and a path replays exactly the one
  // scenario at that path, once (fast-check given a path walks on, or shrinks on under a new path).
  const property = await runProperty(arbitrary, predicate, {
    runs,
    seed,
    timeLimitMs,
    ...(options.shrinkTimeLimitMs === undefined ? {} : { shrinkTimeLimitMs: options.shrinkTimeLimitMs }),
    ...(options.path === undefined ? {} : { path: options.path }),
  });
  options.onStats?.({ ...totals, property_cases: cases, ...(property.kind === "replayed-passed" ? { replayed_passed: 1 } : {}) });
  // A replayed case that passes passes, as at the ledger level; the check's name says it was one
  // replayed case, and onStats counts it (replayed_passed), so nobody mistakes it for a certification.
  // A certification that ran out of time certifies nothing: failedCase throws it as interrupted, not
  // as a violation of CONF-2 (no run made failed), with the knobs that give it more time.
  const outcome = failedCase(property, "end-to-end property", runs, "give it more time (timeLimitMs; the CLI's --check-timeout or CONFORMANCE_CHECK_TIMEOUT_MS, per 20 runs) or fewer runs");
  if (outcome === undefined) return;
  const shrunk = outcome.value;
  // The shrunk scenario once more, for its timeline (a replay already ran it once: that is the run).
  const replay = outcome.replay && last !== undefined ? last : await runOne(shrunk);
  const error = outcome.error;
  const fromError = ConformanceFailure.isInstance(error) ? error.violates : undefined;
  const found = target !== undefined ? [...replay.violations.filter((x) => x.rule === target), ...replay.violations.filter((x) => x.rule !== target)] : replay.violations;
  const violates = found[0]?.rule ?? fromError;
  const timeline = replay.timeline;
  const passedOnReplay = replay.violations.length === 0;
  const note = passedOnReplay ? "the shrunk scenario passed on replay: timing-dependent" : undefined;
  const counterexample: Counterexample = {
    seed: outcome.seed,
    path: outcome.path,
    timeline,
    report: outcome.report,
    value: shrunk,
    ...(violates === undefined ? {} : { violates }),
    ...(note === undefined ? {} : { note }),
  };
  // A scenario that passed on replay is reported from the run's own error, whose message leads with its
  // rule ("CONF-2: ..."): said once, so the first line reads the same either way.
  const raised = error instanceof Error ? error.message : String(error);
  const first = found[0]?.message ?? (violates !== undefined && raised.startsWith(`${violates}: `) ? raised.slice(violates.length + 2) : raised);
  throw new ConformanceFailure(
    [
      `the end-to-end oracle rejects the run${violates ? ` (breaks ${violates})` : ""}: ${first}`,
      ...(found.length > 1 ? ["every violation of the shrunk scenario:", ...found.slice(0, 12).map((v) => `  ${v.rule}: ${v.message}`)] : []),
      outcome.replay
        ? `replayed scenario (one case, seed ${outcome.seed}, path "${outcome.path}"): ${JSON.stringify(shrunk)}`
        : `shrunk scenario after ${outcome.numRuns} runs and ${outcome.numShrinks} shrinks${outcome.shrinkingInterrupted ? ` (shrinking cut short by ${options.shrinkTimeLimitMs === undefined ? "the time limit" : `its budget, ${options.shrinkTimeLimitMs} ms`})` : ""}: ${JSON.stringify(shrunk)}`,
      "timeline of the shrunk scenario:",
      ...timeline.map((l) => `  ${l}`),
      note === undefined ? "" : `  (${note})`,
      `seed ${outcome.seed}, path "${outcome.path}" (replay: --seed ${outcome.seed} --path "${outcome.path}")`,
    ]
      .filter((l) => l !== "")
      .join("\n"),
    { ...(violates === undefined ? {} : { violates }), counterexample },
  );
}
