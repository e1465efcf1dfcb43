import { describe, expect, it } from "vitest";
import fc from "fast-check";
import {
  ConformanceFailure,
  PendingOperations,
  ledgerChecks,
  memoryLedgerSubject,
  registerChecks,
  renderFailures,
  runChecks,
  runModelProperty,
  runProperty,
  valueAtPath,
  type Check,
  type LedgerSubject,
} from "../src/index.js";

const never = (): Promise<void> => new Promise(() => {});
const hung = (name: string, pending?: string[]): Check => ({
  rule: "LEDGER-1",
  name,
  applicable: true,
  timeoutMs: 50,
  ...(pending === undefined ? {} : { pending: () => pending }),
  // A ref'd timer keeps the test's loop busy, as a real pool's would.
  run: () => new Promise(() => void setTimeout(() => {}, 10_000).unref()),
});
const ok = (rule: string, name: string): Check => ({ rule, name, applicable: true, run: async () => {} });

describe("runChecks fails closed", () => {
  it("a check over its time limit fails with the rule and what the subject had pending", async () => {
    const report = await runChecks([hung("stuck", ["ledger#1.claim(key 1a2b3c4d, owner a) pending for 50 ms"]), ok("LEDGER-2", "fine")], { subject: "s" });
    const stuck = report.checks[0]!;
    expect(stuck).toMatchObject({ status: "fail", timedOut: "check" });
    expect(stuck.error).toMatch(/^LEDGER-1 timed out after \d+ ms \(its time limit is 50 ms\)\npending when it was stopped:\n {2}ledger#1\.claim\(key 1a2b3c4d, owner a\)/);
    expect(report.checks[1]!.status).toBe("pass");
    expect(report.conforms).toBe(false);
  });

  it("after 3 timeouts in a row the remaining checks fail as not run (a hung subject fails in bounded time)", async () => {
    const checks = [hung("a"), hung("b"), hung("c"), ok("LEDGER-2", "d"), { ...ok("LEDGER-11", "e"), applicable: false, reasonNotApplicable: "needs corruption" }];
    const report = await runChecks(checks, { subject: "s" });
    expect(report.checks.map((c) => c.status)).toEqual(["fail", "fail", "fail", "fail", "not_applicable"]);
    expect(report.checks[3]).toMatchObject({ timedOut: "not_run", error: "not run: 3 checks in a row did not finish, so the subject is taken to be hung" });
    expect(report.rules.find((r) => r.rule === "LEDGER-2")?.status).toBe("fail");
  });

  it("the run's time limit stops the check that runs when it is reached; the rest fail as not run", async () => {
    const slow: Check = { ...ok("LEDGER-3", "slow"), timeoutMs: 5_000, run: () => new Promise((resolve) => setTimeout(resolve, 1_000)) };
    const report = await runChecks([ok("LEDGER-1", "first"), slow, ok("LEDGER-4", "after")], { subject: "s", runTimeoutMs: 200 });
    expect(report.checks[1]).toMatchObject({ status: "fail", timedOut: "run" });
    expect(report.checks[1]!.error).toContain("the run's time limit of 200 ms was reached while this check ran");
    expect(report.checks[2]).toMatchObject({ status: "fail", error: "not run: the run's time limit of 200 ms was reached" });
  });

  it("registerChecks applies a check's time limit itself and gives the runner a longer one, so its message is what a reader sees", async () => {
    const registered: Array<{ name: string; fn: () => Promise<void>; timeout?: number }> = [];
    registerChecks("t", [hung("stuck", ["ledger#1.lookup(key 00000000) pending for 50 ms"])], {
      describe: (_name, fn) => fn(),
      it: (name: string, fn: () => Promise<void>, timeout?: number) => void registered.push({ name, fn, ...(timeout === undefined ? {} : { timeout }) }),
    });
    expect(registered[0]!.timeout).toBeGreaterThan(50);
    await expect(registered[0]!.fn()).rejects.toThrow(/LEDGER-1 timed out after \d+ ms[\s\S]*ledger#1\.lookup/);
  });

  it("the ledger level's checks carry a time limit and report the subject's pending calls", async () => {
    // A subject whose lookup never answers: the check's report names that call.
    const inner = memoryLedgerSubject();
    const stuck: LedgerSubject = {
      ...inner,
      async create(options) {
        const fixture = await inner.create(options);
        fixture.ledger.lookup = never as never;
        return fixture;
      },
    };
    const checks = ledgerChecks(stuck, { runs: 1, seed: 1, checkTimeoutMs: 100 }).filter((c) => c.name === "an absent key has no row until claimed");
    expect(checks[0]!.timeoutMs).toBe(100);
    const report = await runChecks(checks, { subject: "stuck" });
    expect(report.checks[0]!.error).toMatch(/pending when it was stopped:\n {2}fixture#1\/ledger#1\.lookup\(key [0-9a-f]{8}\) pending for \d+ ms/);
  });

  it("a counterexample's note (a shrunk case that passed on replay) is kept in the rendered failure", async () => {
    const flaky: Check = {
      rule: "LEDGER-3",
      name: "model",
      applicable: true,
      run: async () => {
        throw new ConformanceFailure("disagrees\n  t=1 claim k1\n  (the shrunk case passed on replay: the failure is not deterministic)", {
          counterexample: { seed: 1, path: "2:0", timeline: ["t=1 claim k1 -> claimed"], note: "the shrunk case passed on replay: the failure is not deterministic" },
        });
      },
    };
    const text = renderFailures(await runChecks([flaky], { subject: "s" }));
    expect(text).toContain("  note: the shrunk case passed on replay: the failure is not deterministic");
    // A level that only writes the note into its message (the end-to-end level) keeps it too.
    const e2eStyle: Check = { ...flaky, run: async () => { throw new ConformanceFailure("rejects\n  (the shrunk scenario passed on replay: timing-dependent)", { counterexample: { seed: 1, path: "1", timeline: [] } }); } };
    expect(renderFailures(await runChecks([e2eStyle], { subject: "s" }))).toContain("  note: the shrunk scenario passed on replay: timing-dependent");
  });

  it("PendingOperations lists what is in flight and forgets what settled", async () => {
    const pending = new PendingOperations();
    let release!: () => void;
    const slow = pending.track("claim(a)", () => new Promise<void>((resolve) => (release = resolve)));
    await pending.track("lookup(b)", async () => {});
    expect(pending.list()).toEqual([expect.stringMatching(/^claim\(a\) pending for \d+ ms$/)]);
    release();
    await slow;
    expect(pending.list()).toEqual([]);
  });
});

describe("property runs fail closed", () => {
  it("a property interrupted by its time limit is a failure, not a pass", async () => {
    const outcome = await runProperty(fc.nat(), () => new Promise((resolve) => setTimeout(resolve, 20)), { runs: 100, seed: 1, timeLimitMs: 100 });
    expect(outcome.kind).toBe("interrupted");
    const model = runModelProperty(memoryLedgerSubject(), { runs: 100_000, seed: 1, timeLimitMs: 300 });
    await expect(model).rejects.toThrow(/the model-based property was interrupted by its time limit \(300 ms\) after \d+ of 100000 runs: an interrupted run certifies nothing/);
  });

  it("a path names one case: valueAtPath is fast-check's own counterexample, and a replay runs the predicate exactly once", async () => {
    const arbitrary = fc.array(fc.record({ op: fc.constantFrom("a", "b"), n: fc.nat(9) }), { minLength: 1, maxLength: 20 });
    const bad = (xs: Array<{ op: string; n: number }>) => xs.filter((x) => x.op === "b" && x.n > 4).length >= 2;
    const details = await fc.check(fc.asyncProperty(arbitrary, async (xs) => void expect(bad(xs)).toBe(false)), { seed: 42, numRuns: 200 });
    expect(details.failed).toBe(true);
    const path = details.counterexamplePath!;
    expect(await valueAtPath(arbitrary, 42, path)).toEqual(details.counterexample![0]);
    let calls = 0;
    const failing = await runProperty(arbitrary, async (xs) => { calls++; if (bad(xs)) throw new Error("bad"); }, { runs: 200, seed: 42, path, timeLimitMs: 10_000 });
    expect(calls).toBe(1);
    expect(failing).toMatchObject({ kind: "failed", path, replay: true, value: details.counterexample![0] });
    // A passing case at a path is run once too (fast-check given the path would walk on to the next shrinks).
    calls = 0;
    const passing = await runProperty(arbitrary, async () => { calls++; }, { runs: 200, seed: 42, path: path.split(":").slice(0, 2).join(":"), timeLimitMs: 10_000 });
    expect(calls).toBe(1);
    expect(passing.kind).toBe("replayed-passed");
  });
});
