import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { ConformanceFailure, runModelProperty, runProperty, valueAtPath } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";

/**
 * shrinkTimeLimitMs: the search and the shrinking of a property under separate budgets. A short
 * shrink budget must not turn a found bug into "interrupted", and a short search budget must not
 * cut a shrink that has its own.
 */
const arbitrary = fc.array(fc.nat(100), { minLength: 1, maxLength: 30 });
/** Three elements over 80: found in the first few runs, and shrunk in about a dozen steps to [81, 81, 81]. */
const bad = (xs: number[]) => xs.filter((x) => x > 80).length >= 3;
/** A predicate that waits `ms` per case, counts its calls and how many run at once. */
function slowPredicate(ms: number) {
  const counts = { calls: 0, running: 0 };
  const predicate = async (xs: number[]) => {
    counts.calls++;
    counts.running++;
    try {
      await new Promise((resolve) => setTimeout(resolve, ms));
      if (bad(xs)) throw new Error("three elements over 80");
    } finally {
      counts.running--;
    }
  };
  return { counts, predicate };
}

describe("shrinkTimeLimitMs bounds shrinking apart from the search", () => {
  it("0 reports the first failing case as the search found it: unshrunk, at its run's path, not run again", async () => {
    const first = await fc.check(fc.asyncProperty(arbitrary, async (xs) => void expect(bad(xs)).toBe(false)), { seed: 7, numRuns: 100, endOnFailure: true });
    expect(first.failed).toBe(true);
    const { counts, predicate } = slowPredicate(0);
    const outcome = await runProperty(arbitrary, predicate, { runs: 100, seed: 7, timeLimitMs: 10_000, shrinkTimeLimitMs: 0 });
    expect(outcome).toMatchObject({ kind: "failed", value: first.counterexample![0], path: first.counterexamplePath, numShrinks: 0, numRuns: first.numRuns, replay: false, shrinkingInterrupted: true });
    // The runs of the search, and no replay of the failing one.
    expect(counts.calls).toBe(first.numRuns);
    if (outcome.kind !== "failed") return;
    expect(outcome.path).toMatch(/^\d+$/);
    expect(await valueAtPath(arbitrary, 7, outcome.path)).toEqual(outcome.value);
  });

  it("given the time, shrinking reaches what fast-check reaches in one check: the same value, path and shrinks, without running the found case again", async () => {
    const whole = await fc.check(fc.asyncProperty(arbitrary, async (xs) => void expect(bad(xs)).toBe(false)), { seed: 42, numRuns: 100 });
    expect(whole.failed).toBe(true);
    expect(whole.numShrinks).toBeGreaterThan(2);
    const { counts, predicate } = slowPredicate(0);
    const outcome = await runProperty(arbitrary, predicate, { runs: 100, seed: 42, timeLimitMs: 10_000, shrinkTimeLimitMs: 60_000 });
    expect(outcome).toMatchObject({
      kind: "failed",
      value: whole.counterexample![0],
      path: whole.counterexamplePath,
      numShrinks: whole.numShrinks,
      numRuns: whole.numRuns,
      shrinkingInterrupted: false,
    });
    // fast-check's own check ran the search and every candidate once; so did the two checks here.
    let wholeCalls = 0;
    await fc.check(fc.asyncProperty(arbitrary, async (xs) => { wholeCalls++; expect(bad(xs)).toBe(false); }), { seed: 42, numRuns: 100 });
    expect(counts.calls).toBe(wholeCalls);
    if (outcome.kind !== "failed") return;
    expect(outcome.report).toContain(`path: "${whole.counterexamplePath}"`);
    expect(outcome.report).toContain(`Shrunk ${whole.numShrinks} time(s)`);
  });

  it("a search budget far shorter than the shrinking does not cut the shrinking when the bug is found early", async () => {
    // Seed 42 fails at its 5th run (150 ms of waiting), and shrinking runs about 65 cases more (2 s).
    const { predicate } = slowPredicate(30);
    const started = Date.now();
    const outcome = await runProperty(arbitrary, predicate, { runs: 100, seed: 42, timeLimitMs: 800, shrinkTimeLimitMs: 60_000 });
    expect(Date.now() - started).toBeGreaterThan(800);
    expect(outcome).toMatchObject({ kind: "failed", value: [81, 81, 81], shrinkingInterrupted: false });
  });

  it("a shrink budget that runs out still reports a failing, replayable counterexample, and leaves no case running", async () => {
    const whole = await fc.check(fc.asyncProperty(arbitrary, async (xs) => void expect(bad(xs)).toBe(false)), { seed: 42, numRuns: 100 });
    const { counts, predicate } = slowPredicate(40);
    const outcome = await runProperty(arbitrary, predicate, { runs: 100, seed: 42, timeLimitMs: 60_000, shrinkTimeLimitMs: 150 });
    expect(outcome.kind).toBe("failed");
    if (outcome.kind !== "failed") return;
    expect(counts.running).toBe(0);
    expect(outcome.shrinkingInterrupted).toBe(true);
    expect(bad(outcome.value)).toBe(true);
    expect(outcome.numShrinks).toBeLessThan(whole.numShrinks);
    expect(outcome.numShrinks).toBe(outcome.path.split(":").length - 1);
    expect(await valueAtPath(arbitrary, 42, outcome.path)).toEqual(outcome.value);
    // The printed seed and path replay that one case, which fails.
    const replay = await runProperty(arbitrary, predicate, { runs: 100, seed: 42, path: outcome.path, timeLimitMs: 10_000 });
    expect(replay).toMatchObject({ kind: "failed", replay: true, value: outcome.value });
  });

  it("the search alone is still bounded by timeLimitMs: a bug not found in time is an interrupted property", async () => {
    const outcome = await runProperty(fc.nat(), () => new Promise((resolve) => setTimeout(resolve, 20)), { runs: 100, seed: 1, timeLimitMs: 100, shrinkTimeLimitMs: 5_000 });
    expect(outcome.kind).toBe("interrupted");
  });

  it("the model-based property takes it: a ledger without fencing is reported with its first failing sequence, unshrunk", async () => {
    const failure = await runModelProperty(kvSubject("kv-no-fencing", { noFencing: true }), { runs: 200, seed: 5, timeLimitMs: 60_000, shrinkTimeLimitMs: 0 }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(ConformanceFailure);
    const cx = (failure as ConformanceFailure).counterexample!;
    expect(cx.path).toMatch(/^\d+$/);
    expect((failure as ConformanceFailure).message).toMatch(/shrunk counterexample after \d+ runs and 0 shrinks:/);
  });
});
