import { ConformanceFailure, DEFAULT_CHECK_TIMEOUT_MS, endToEndTimeoutMs, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { endToEndChecks, endToEndTimeLimits, runEndToEnd } from "../src/index.js";

const memory = memoryLedgerSubject();

/**
 * A certification at the default 1,000 runs took about 11 minutes on a loaded host and was stopped
 * by the property's fixed 600 s limit (the CLI's grows with the runs): the report must say the
 * property was interrupted, not that CONF-2 was violated, and the registered check must get the
 * same run-scaled limit as the CLI's.
 */
describe("an end-to-end property stopped by its time limit", () => {
  it("CONF-2 is reported interrupted, not violated: no rule named, the limit and how to raise it said", async () => {
    const error = await runEndToEnd(memory, { deploys: false, runs: 1000, seed: 5, timeLimitMs: 1_500 }).catch((e: unknown) => e);
    expect(ConformanceFailure.isInstance(error)).toBe(true);
    const failure = error as ConformanceFailure;
    expect(failure.violates).toBeUndefined();
    expect(failure.interrupted).toMatchObject({ runs: 1000, timeLimitMs: 1_500 });
    expect(failure.message).toMatch(
      /^the end-to-end property was interrupted by its time limit \(1500 ms\) after (\d+) of 1000 runs: an interrupted run certifies nothing \(interrupted, not violated: none of the \1 runs made broke a rule\)/,
    );
    expect(failure.message).toContain("timeLimitMs");
  }, 60_000);

  it("CONF-2 the registered check's limit grows with its runs, as the CLI's does (1,000 runs: 3,000 s, not 600 s)", () => {
    const [check] = endToEndChecks(memory, { runs: 1000, seed: 1 });
    expect(check!.timeoutMs).toBe(endToEndTimeoutMs(DEFAULT_CHECK_TIMEOUT_MS, 1000));
    expect(check!.timeoutMs).toBe(3_000_000);
    expect(endToEndTimeLimits(1000).timeLimitMs).toBe(2_700_000);
    // Never shorter than the fixed 600 s of before (CI's 30 runs, a replay's one case).
    expect(endToEndTimeLimits(30)).toEqual({ timeLimitMs: 600_000, checkTimeoutMs: 666_667 });
    const [replay] = endToEndChecks(memory, { runs: 1000, seed: 1, path: "3" });
    expect(replay!.timeoutMs).toBe(666_667);
  });
});
