import fc from "fast-check";

/**
 * How every property check of the ledger level runs fast-check, so that it fails closed:
 * - a run interrupted by its time limit is a failure (fast-check counts it as a pass otherwise);
 * - `path` replays exactly ONE case, the one at that path: fast-check given a path walks on to the
 *   following shrink candidates when the case passes, and shrinks further when it fails, which
 *   reports another case under another path. Here the value at the path is taken once and the
 *   predicate runs on it once.
 */
export interface PropertyRunOptions {
  runs: number;
  seed: number;
  path?: string;
  /** Stop starting new runs (and shrinks) after this long; what ran so far is reported, as a failure. */
  timeLimitMs: number;
}

export type PropertyOutcome<T> =
  | { kind: "passed"; numRuns: number }
  /** The time limit stopped the property before its runs were done: nothing is certified. */
  | { kind: "interrupted"; numRuns: number; timeLimitMs: number }
  | {
      kind: "failed";
      value: T;
      error: unknown;
      seed: number;
      path: string;
      numRuns: number;
      numShrinks: number;
      /** fast-check's own report (seed, path, shrunk value, error). */
      report: string;
      /** The time limit cut shrinking short: the value is a counterexample, maybe not the smallest. */
      shrinkingInterrupted: boolean;
      /** True when this was a replay of one case (`path` given): no run counts or shrinks. */
      replay: boolean;
    }
  /** A replayed case (`path` given) that passed. */
  | { kind: "replayed-passed"; path: string };

const STOP = Symbol("stop after taking the value");

/** The value fast-check generates at `path` under `seed` for `arbitrary` (as fc.check with a property over it). */
export async function valueAtPath<T>(arbitrary: fc.Arbitrary<T>, seed: number, path: string): Promise<T> {
  let taken: { value: T } | undefined;
  await fc.check(
    fc.asyncProperty(arbitrary, async (value) => {
      taken ??= { value };
      throw STOP;
    }),
    { seed, path, numRuns: 1, endOnFailure: true },
  );
  if (taken === undefined) throw new Error(`fast-check produced no value at seed ${seed}, path ${JSON.stringify(path)}`);
  return taken.value;
}

export async function runProperty<T>(
  arbitrary: fc.Arbitrary<T>,
  predicate: (value: T) => Promise<void>,
  options: PropertyRunOptions,
): Promise<PropertyOutcome<T>> {
  if (options.path !== undefined) {
    const value = await valueAtPath(arbitrary, options.seed, options.path);
    try {
      await predicate(value);
    } catch (error) {
      return {
        kind: "failed",
        value,
        error,
        seed: options.seed,
        path: options.path,
        numRuns: 1,
        numShrinks: 0,
        report: `replay of seed ${options.seed}, path "${options.path}": ${error instanceof Error ? error.message : String(error)}`,
        shrinkingInterrupted: false,
        replay: true,
      };
    }
    return { kind: "replayed-passed", path: options.path };
  }
  const details = await fc.check(fc.asyncProperty(arbitrary, predicate), {
    numRuns: options.runs,
    seed: options.seed,
    interruptAfterTimeLimit: options.timeLimitMs,
    markInterruptAsFailure: true,
  });
  if (details.counterexample !== null && details.failed) {
    return {
      kind: "failed",
      value: details.counterexample[0] as T,
      error: details.errorInstance,
      seed: details.seed,
      path: details.counterexamplePath ?? "",
      numRuns: details.numRuns,
      numShrinks: details.numShrinks,
      report: fc.defaultReportMessage(details) ?? "property failed",
      shrinkingInterrupted: details.interrupted,
      replay: false,
    };
  }
  if (details.interrupted || details.failed) return { kind: "interrupted", numRuns: details.numRuns, timeLimitMs: options.timeLimitMs };
  return { kind: "passed", numRuns: details.numRuns };
}
