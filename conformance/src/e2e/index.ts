import fc from "fast-check";
import { ConformanceFailure } from "../failure.js";
import { randomSeed, registerChecks, type TestRegistrar } from "../ledger/index.js";
import type { Check, Counterexample, LedgerSubject } from "../types.js";
import { runCase, type CaseOptions } from "./case.js";
import { scenarioArbitrary, type Scenario } from "./scenario.js";
import { startWorld } from "./world.js";

export { scenarioArbitrary, faultFree, type Scenario } from "./scenario.js";
export type { OracleViolation } from "./oracle.js";
export type { DispatcherDefaults } from "./world.js";

export interface EndToEndOptions extends CaseOptions {
  /** End-to-end runs (random scenarios). Default 100; CI certifies with at least 1,000. */
  runs?: number;
  seed?: number;
  path?: string;
  /**
   * Time for the whole property, shrinking included; shrinking stops there and the smallest
   * counterexample found so far is reported. Default 600,000 ms.
   */
  timeLimitMs?: number;
  /** Called once with the counts of what the runs exercised (deaths, 422s, re-asks, ...), summed. */
  onStats?: (stats: Record<string, number>) => void;
}

export const END_TO_END_CHECK_NAME =
  "end to end: random conversations, stream cuts at every position, downstream faults, worker deaths, distinct messages sent together, re-asks and every replay route perform each intent's effects exactly once and tell the truth about them";

/** Runs a certification makes unless told otherwise: CI certifies every ledger with 1,000. */
export const DEFAULT_END_TO_END_RUNS = 1000;

function envInteger(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new Error(`${name} must be an integer, got ${JSON.stringify(raw)}`);
  return n;
}

/** The end-to-end level as checks (issue 6, level 2), named after CONF-2. */
export function endToEndChecks(subject: LedgerSubject, options: EndToEndOptions = {}): Check[] {
  // CI sizes runs and pins seeds through the environment, as the ledger level does.
  const runs = options.runs ?? envInteger("CONFORMANCE_E2E_RUNS") ?? DEFAULT_END_TO_END_RUNS;
  const seed = options.seed ?? envInteger("CONFORMANCE_SEED") ?? randomSeed();
  return [
    {
      rule: "CONF-2",
      name: `${END_TO_END_CHECK_NAME} (${options.path === undefined ? `${runs} runs` : "replay"}, seed ${seed})`,
      applicable: true,
      run: () => runEndToEnd(subject, { ...options, runs, seed }),
    },
  ];
}

/** Registers the end-to-end level with any describe/it runner, as registerLedgerChecks does the ledger level. */
export function registerEndToEndChecks(subject: LedgerSubject, t: TestRegistrar, options: EndToEndOptions = {}): void {
  // Shrinking a failure replays whole conversations; allow for it beyond the runs themselves.
  registerChecks(`${subject.name} end to end (spec CONF-2)`, endToEndChecks(subject, options), t, 1_800_000);
}

export async function runEndToEnd(subject: LedgerSubject, options: EndToEndOptions = {}): Promise<void> {
  const world = await startWorld();
  try {
    const seed = options.seed ?? randomSeed();
    const totals: Record<string, number> = {};
    const property = fc.asyncProperty(scenarioArbitrary(), async (scenario) => {
      const run = await runCase(world, subject, scenario, options);
      for (const [k, v] of Object.entries(run.stats)) totals[k] = (totals[k] ?? 0) + v;
      if (run.violations.length > 0) {
        const [v] = run.violations;
        throw new ConformanceFailure(run.violations.map((x) => `${x.rule}: ${x.message}`).join("\n"), { violates: v!.rule });
      }
    });
    const details = await fc.check(property, {
      numRuns: options.runs ?? 100,
      seed,
      ...(options.path === undefined ? {} : { path: options.path }),
      // Shrinking replays whole conversations over HTTP; keep it bounded.
      endOnFailure: false,
      interruptAfterTimeLimit: options.timeLimitMs ?? 600_000,
    });
    options.onStats?.(totals);
    if (!details.failed) {
      // A certification that ran out of time certifies nothing.
      if (details.interrupted) {
        throw new ConformanceFailure(`the end-to-end property was interrupted by its time limit after ${details.numRuns} of ${options.runs ?? 100} runs`);
      }
      return;
    }
    const report = fc.defaultReportMessage(details) ?? "property failed";
    const shrunk = details.counterexample?.[0] as Scenario | undefined;
    const replay = shrunk === undefined ? undefined : await runCase(world, subject, shrunk, options);
    const violation = replay?.violations[0];
    const violates =
      violation?.rule ?? (details.errorInstance instanceof ConformanceFailure ? details.errorInstance.violates : undefined);
    const timeline = replay?.timeline ?? [];
    const counterexample: Counterexample = {
      seed: details.seed,
      path: details.counterexamplePath ?? "",
      timeline,
      report,
      value: shrunk,
      ...(violates === undefined ? {} : { violates }),
    };
    const found = replay?.violations ?? [];
    const first = found[0]?.message ?? (details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance));
    throw new ConformanceFailure(
      [
        `the end-to-end oracle rejects the run${violates ? ` (breaks ${violates})` : ""}: ${first}`,
        ...(found.length > 1 ? ["every violation of the shrunk scenario:", ...found.slice(0, 12).map((v) => `  ${v.rule}: ${v.message}`)] : []),
        `shrunk scenario after ${details.numRuns} runs and ${details.numShrinks} shrinks: ${JSON.stringify(shrunk)}`,
        "timeline of the shrunk scenario:",
        ...timeline.map((l) => `  ${l}`),
        replay !== undefined && replay.violations.length === 0 ? "  (the shrunk scenario passed on replay: timing-dependent)" : "",
        `seed ${details.seed}, path "${details.counterexamplePath}" (replay: --seed ${details.seed} --path "${details.counterexamplePath}")`,
      ]
        .filter((l) => l !== "")
        .join("\n"),
      { ...(violates === undefined ? {} : { violates }), counterexample },
    );
  } finally {
    await world.close();
  }
}
