import fc from "fast-check";
import { ConformanceFailure } from "../failure.js";

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
  /**
   * Stop starting new runs (and, unless shrinkTimeLimitMs is given, shrinks) after this long; what
   * ran so far is reported, as a failure.
   */
  timeLimitMs: number;
  /**
   * When given, timeLimitMs bounds the search alone (it stops at the first failing case, unshrunk),
   * and shrinking from that case gets this budget of its own: no shrink candidate starts after it,
   * and the one running then is let finish (cut only after timeLimitMs more, for a hung subject).
   * 0 reports the first failing case as found, without running it again. A budget that runs out
   * still reports a failing counterexample (the smallest reached), never "interrupted". When absent,
   * one time limit bounds both (fast-check's own shrinking).
   */
  shrinkTimeLimitMs?: number;
}

/**
 * A ledger-level property's options as runProperty takes them: its time limit defaults to an hour
 * (the checks that register it set their own), the shrink budget and the path only when given.
 */
export function propertyRunOptions(options: { runs: number; seed: number; path?: string; timeLimitMs?: number; shrinkTimeLimitMs?: number }): PropertyRunOptions {
  return {
    runs: options.runs,
    seed: options.seed,
    timeLimitMs: options.timeLimitMs ?? 3_600_000,
    ...(options.shrinkTimeLimitMs === undefined ? {} : { shrinkTimeLimitMs: options.shrinkTimeLimitMs }),
    ...(options.path === undefined ? {} : { path: options.path }),
  };
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
  if (options.shrinkTimeLimitMs !== undefined) return searchThenShrink(arbitrary, predicate, { ...options, shrinkTimeLimitMs: options.shrinkTimeLimitMs });
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

/**
 * The search and the shrinking under separate budgets, as fast-check 4.11 does them in one check:
 * 1. the search stops at the first failing case (endOnFailure), unshrunk, at path "N" (run N);
 * 2. shrinking walks the shrink candidates of that case without running it again: under the same
 *    seed, path "N:0" starts fast-check at the first candidate of case N and goes on through the
 *    others (a path with ":" has no run count), and on a candidate that fails it shrinks from that
 *    one, exactly as it would have after a failure in one check. The path it reports is merged
 *    with "N:0", so it is the full path from the seed ("N:k:..."), and replays the value reported.
 *    When no candidate fails, or the budget runs out before one does, case N itself is reported.
 */
async function searchThenShrink<T>(
  arbitrary: fc.Arbitrary<T>,
  predicate: (value: T) => Promise<void>,
  options: PropertyRunOptions & { shrinkTimeLimitMs: number },
): Promise<PropertyOutcome<T>> {
  const search = await fc.check(fc.asyncProperty(arbitrary, predicate), {
    numRuns: options.runs,
    seed: options.seed,
    endOnFailure: true,
    interruptAfterTimeLimit: options.timeLimitMs,
    markInterruptAsFailure: true,
  });
  if (search.counterexample === null || !search.failed) {
    if (search.interrupted || search.failed) return { kind: "interrupted", numRuns: search.numRuns, timeLimitMs: options.timeLimitMs };
    return { kind: "passed", numRuns: search.numRuns };
  }
  const found = { value: search.counterexample[0] as T, error: search.errorInstance, path: search.counterexamplePath ?? "" };
  let best = found;
  // A budget of 0 is one that ran out before the first candidate: the case may not be the smallest.
  let shrinkingInterrupted = options.shrinkTimeLimitMs <= 0;
  if (options.shrinkTimeLimitMs > 0) {
    // fast-check's interruptAfterTimeLimit abandons the case in flight, which would then run on beside
    // the caller's replay of the counterexample: the budget is kept here instead, before each candidate
    // starts, and fast-check's limit only cuts a candidate that hangs.
    const deadline = Date.now() + options.shrinkTimeLimitMs;
    let outOfTime = false;
    const shrink = await fc.check(
      fc.asyncProperty(arbitrary, async (value) => {
        if (Date.now() >= deadline) {
          outOfTime = true;
          throw new fc.PreconditionFailure(true);
        }
        await predicate(value);
      }),
      {
        numRuns: options.runs,
        seed: options.seed,
        path: `${found.path}:0`,
        interruptAfterTimeLimit: options.shrinkTimeLimitMs + options.timeLimitMs,
        markInterruptAsFailure: true,
      },
    );
    shrinkingInterrupted = shrink.interrupted || outOfTime;
    if (shrink.counterexample !== null && shrink.failed && shrink.counterexamplePath !== null) {
      best = { value: shrink.counterexample[0] as T, error: shrink.errorInstance, path: shrink.counterexamplePath };
    }
  }
  const numShrinks = best.path.split(":").length - 1;
  const report = fc.defaultReportMessage({
    ...search,
    interrupted: shrinkingInterrupted,
    numShrinks,
    counterexample: [best.value] as unknown as typeof search.counterexample,
    counterexamplePath: best.path,
    errorInstance: best.error,
    failures: [],
  } as fc.RunDetails<[T]>);
  return {
    kind: "failed",
    value: best.value,
    error: best.error,
    seed: search.seed,
    path: best.path,
    numRuns: search.numRuns,
    numShrinks,
    report: report ?? "property failed",
    shrinkingInterrupted,
    replay: false,
  };
}

/** A failed property's outcome. */
export type FailedOutcome<T> = Extract<PropertyOutcome<T>, { kind: "failed" }>;

/**
 * The failed case of `outcome`, or undefined when the property passed (or the replayed case did).
 * An interrupted property fails closed, whichever property it is: an interrupted run certifies nothing.
 */
export function failedCase<T>(outcome: PropertyOutcome<T>, property: string, runs: number, howToRaise?: string): FailedOutcome<T> | undefined {
  if (outcome.kind === "passed" || outcome.kind === "replayed-passed") return undefined;
  if (outcome.kind === "interrupted") {
    // A run that failed would have been reported as a counterexample (shrinking cut short or not):
    // "interrupted" means every run made passed, so the report must not read as a broken rule.
    const { numRuns, timeLimitMs } = outcome;
    throw new ConformanceFailure(
      `the ${property} was interrupted by its time limit (${timeLimitMs} ms) after ${numRuns} of ${runs} runs: an interrupted run certifies nothing (interrupted, not violated: none of the ${numRuns} runs made broke a rule)${howToRaise === undefined ? "" : `; ${howToRaise}`}`,
      { interrupted: { numRuns, runs, timeLimitMs } },
    );
  }
  return outcome;
}
