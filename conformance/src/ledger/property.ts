import fc from "fast-check";
import { ConformanceFailure } from "../failure.js";
import type { Counterexample, LedgerSubject } from "../types.js";
import { runScenario, stepArbitrary, type Step } from "./model.js";
import { failedCase, propertyRunOptions, runProperty } from "./property-runner.js";

export const MODEL_CHECK_NAME = "model-based: random claim/race/contend/complete/fail/markUnknown/release/renew/lookup/expire_lease/sweep/restart sequences agree with the reference model";

export interface PropertyOptions {
  runs: number;
  seed: number;
  path?: string;
  maxSteps?: number;
  /** Time limit of the property (runs and shrinking); reaching it fails the check. */
  timeLimitMs?: number;
  /**
   * A budget of its own for shrinking a failure; timeLimitMs then bounds the search alone
   * (PropertyRunOptions.shrinkTimeLimitMs; 0 reports the first failing case unshrunk).
   */
  shrinkTimeLimitMs?: number;
}

/** The model property's input: what fast-check generates and shrinks (by dropping steps). */
export function scenarioSteps(subject: LedgerSubject, maxSteps = 30): fc.Arbitrary<Step[]> {
  return fc.array(stepArbitrary(subject.capabilities), { minLength: 1, maxLength: maxSteps, size: "max" });
}

/**
 * Drives the subject and the reference model with random step sequences (fast-check, shrinking by
 * dropping steps). On failure, the shrunk sequence is replayed once more to record a readable
 * timeline, and the failure carries seed and path to replay it exactly. The scenario's keys come
 * from the seed, so a replay meets the same keys.
 */
export async function runModelProperty(subject: LedgerSubject, options: PropertyOptions): Promise<void> {
  let last: Awaited<ReturnType<typeof runScenario>> | undefined;
  const outcome = await runProperty(
    scenarioSteps(subject, options.maxSteps),
    async (scenario) => {
      last = await runScenario(subject, scenario, { seed: options.seed });
      if (last.error !== undefined) throw last.error;
    },
    propertyRunOptions(options),
  );
  const failed = failedCase(outcome, "model-based property", options.runs);
  if (failed === undefined) return;
  const shrunk = failed.value;
  // A replay (--path) ran its one case once: that run is the finding. Otherwise the shrunk case runs
  // once more for a clean timeline (and to tell a deterministic failure from a timing-dependent one).
  const replay = failed.replay && last !== undefined ? last : await runScenario(subject, shrunk, { seed: options.seed });
  const original = failed.error;
  const violates = replay.error?.violates ?? (ConformanceFailure.isInstance(original) ? original.violates : undefined);
  const note =
    replay.error === undefined && !failed.replay
      ? "the shrunk case passed on replay: the failure is not deterministic (timing-dependent); replay it a few times"
      : failed.shrinkingInterrupted
        ? "the time limit cut shrinking short: this counterexample may not be the smallest"
        : undefined;
  const counterexample: Counterexample = {
    seed: failed.seed,
    path: failed.path,
    timeline: replay.timeline,
    report: failed.report,
    value: shrunk,
    ...(violates === undefined ? {} : { violates }),
    ...(note === undefined ? {} : { note }),
  };
  const firstLine = replay.error?.message ?? (original instanceof Error ? original.message : String(original));
  throw new ConformanceFailure(
    [
      `the subject disagrees with the reference model${violates ? ` (breaks ${violates})` : ""}: ${firstLine}`,
      failed.replay ? `replayed the one case at seed ${failed.seed}, path "${failed.path}":` : `shrunk counterexample after ${failed.numRuns} runs and ${failed.numShrinks} shrinks:`,
      ...replay.timeline.map((l) => `  ${l}`),
      note === undefined ? "" : `  (${note})`,
      `seed ${failed.seed}, path "${failed.path}" (replay: --seed ${failed.seed} --path "${failed.path}")`,
    ]
      .filter((l) => l !== "")
      .join("\n"),
    { ...(violates === undefined ? {} : { violates }), counterexample },
  );
}
