import fc from "fast-check";
import { ConformanceFailure } from "../failure.js";
import type { Counterexample, LedgerSubject } from "../types.js";
import { runScenario, stepArbitrary, type Step } from "./model.js";

export const MODEL_CHECK_NAME = "model-based: random claim/race/contend/complete/fail/markUnknown/release/renew/lookup/expire_lease/sweep/restart sequences agree with the reference model";

export interface PropertyOptions {
  runs: number;
  seed: number;
  path?: string;
  maxSteps?: number;
}

/**
 * Drives the subject and the reference model with random step sequences (fast-check,
 * shrinking by dropping steps). On failure, the shrunk sequence is replayed once more to
 * record a readable timeline, and the failure carries seed and path to replay it exactly.
 */
export async function runModelProperty(subject: LedgerSubject, options: PropertyOptions): Promise<void> {
  const steps = fc.array(stepArbitrary(subject.capabilities), { minLength: 1, maxLength: options.maxSteps ?? 30, size: "max" });
  const property = fc.asyncProperty(steps, async (scenario) => {
    const { error } = await runScenario(subject, scenario);
    if (error !== undefined) throw error;
  });
  const details = await fc.check(property, {
    numRuns: options.runs,
    seed: options.seed,
    ...(options.path === undefined ? {} : { path: options.path }),
  });
  if (!details.failed) return;
  const report = fc.defaultReportMessage(details) ?? "property failed";
  if (details.counterexample === null) {
    throw new ConformanceFailure(`${report}`);
  }
  const shrunk = details.counterexample[0] as Step[];
  const replay = await runScenario(subject, shrunk);
  const original = details.errorInstance;
  const violates = replay.error?.violates ?? (original instanceof ConformanceFailure ? original.violates : undefined);
  const counterexample: Counterexample = {
    seed: details.seed,
    path: details.counterexamplePath ?? "",
    timeline: replay.timeline,
    report,
    value: shrunk,
    ...(violates === undefined ? {} : { violates }),
  };
  const firstLine = replay.error?.message ?? (original instanceof Error ? original.message : String(original));
  throw new ConformanceFailure(
    [
      `the subject disagrees with the reference model${violates ? ` (breaks ${violates})` : ""}: ${firstLine}`,
      `shrunk counterexample after ${details.numRuns} runs and ${details.numShrinks} shrinks:`,
      ...replay.timeline.map((l) => `  ${l}`),
      replay.error === undefined ? "  (the shrunk case passed on replay: the failure is not deterministic)" : "",
      `seed ${details.seed}, path "${details.counterexamplePath}" (replay: --seed ${details.seed} --path "${details.counterexamplePath}")`,
    ]
      .filter((l) => l !== "")
      .join("\n"),
    { ...(violates === undefined ? {} : { violates }), counterexample },
  );
}
