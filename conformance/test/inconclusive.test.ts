import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import {
  CheckInconclusive,
  ConformanceFailure,
  INCONCLUSIVE_ATTEMPTS,
  bindLedgerCheck,
  leaseLapsesInRealTime,
  memoryLedgerSubject,
  renderCheckList,
  renderComplianceMatrix,
  renderFailures,
  renderReportJson,
  renderReportTable,
  retentionKept,
  retentionNotRoundedDown,
  runCheck,
  runChecks,
  runWithTimeLimit,
  silentStoreAfterConnecting,
  type Check,
  type LedgerSubject,
  type StoreAddress,
} from "../src/ledger/index.js";
import { gatedSubject, startEchoStore } from "./fixtures/gated-ledger.js";

/**
 * A timing check that cannot conclude (the store answers too slowly, the kit's own process is
 * stalled) says so (CheckInconclusive, CONF-5): it is run again on a fresh fixture, and when it
 * still cannot conclude the report says "inconclusive (no violation found; not certified)", never
 * that the adapter broke the rule and never that it passed. The subjects here are correct stores
 * made slow or stalled; no timing is asserted: the checks' own deadlines are the verdicts.
 */

/** The reference ledger whose reads are answered late (a store on a loaded host), for the first `slowFixtures` fixtures. */
function slowReadsSubject(delayMs: number, slowFixtures = Infinity): LedgerSubject {
  let made = 0;
  const inner = memoryLedgerSubject("ledger-memory, slow reads");
  return {
    ...inner,
    async create(options) {
      const slow = made++ < slowFixtures;
      class SlowReads extends MemoryLedger {
        override async lookup(key: string) {
          if (slow) await new Promise((resolve) => setTimeout(resolve, delayMs));
          return super.lookup(key);
        }
      }
      return memoryLedgerSubject("ledger-memory, slow reads", SlowReads).create(options);
    },
  };
}

/** A check whose runs throw what `outcomes` says, one a run (the last repeated), counting its runs. */
function scripted(rule: string, outcomes: Array<"pass" | "inconclusive" | "fail">): Check & { runs: () => number } {
  let runs = 0;
  return {
    rule,
    name: `scripted ${outcomes.join(", ")}`,
    applicable: true,
    runs: () => runs,
    async run() {
      const outcome = outcomes[Math.min(runs++, outcomes.length - 1)];
      if (outcome === "inconclusive") throw new CheckInconclusive(`run ${runs}: the store answered too slowly for this check to conclude`);
      if (outcome === "fail") throw new ConformanceFailure(`run ${runs}: the row was gone`);
    },
  };
}

describe("an inconclusive check in the report (CONF-5)", () => {
  it("is run again up to INCONCLUSIVE_ATTEMPTS times; still inconclusive, it is neither a pass nor a violation, and the subject does not conform", async () => {
    const stuck = scripted("LEDGER-13", ["inconclusive"]);
    const recovers = scripted("LEDGER-12", ["inconclusive", "pass"]);
    const broken = scripted("LEDGER-19", ["fail"]);
    const report = await runChecks([stuck, recovers, broken], { subject: "scripted" });
    expect([stuck.runs(), recovers.runs(), broken.runs()]).toEqual([INCONCLUSIVE_ATTEMPTS, 2, 1]);
    expect(report.checks.map((c) => [c.rule, c.status, c.attempts])).toEqual([
      ["LEDGER-13", "inconclusive", 3],
      ["LEDGER-12", "pass", 2],
      ["LEDGER-19", "fail", undefined],
    ]);
    expect(report.checks[0]!.inconclusiveRuns).toEqual([1, 2, 3].map((n) => `run ${n}: the store answered too slowly for this check to conclude`));
    expect(report.checks[0]!.error).toBe("inconclusive (no violation found; not certified) after 3 attempts: run 3: the store answered too slowly for this check to conclude");
    expect(report.rules.map((r) => [r.rule, r.status, r.failed, r.inconclusive])).toEqual([
      ["LEDGER-12", "pass", 0, undefined],
      ["LEDGER-13", "inconclusive", 0, 1],
      ["LEDGER-19", "fail", 1, undefined],
    ]);
    expect(report.conforms).toBe(false);
    const table = renderReportTable(report);
    expect(table).toMatch(/LEDGER-13 +MUST +INCONCLUSIVE +0 pass, 1 inconclusive /);
    expect(table).toMatch(/DOES NOT CONFORM: LEDGER-19 failed; LEDGER-13 inconclusive \(no violation found; not certified\)$/);
    expect(JSON.parse(renderReportJson(report)).rules[1]).toMatchObject({ rule: "LEDGER-13", status: "inconclusive", inconclusive: 1 });
    expect(renderCheckList(report).split("\n")).toEqual([
      "? LEDGER-13 scripted inconclusive (inconclusive after 3 attempts: no violation found; not certified)",
      "✓ LEDGER-12 scripted inconclusive, pass (passed on attempt 2: the earlier could not conclude)",
      "✗ LEDGER-19 scripted fail",
    ]);
    expect(renderFailures(report)).toMatch(/^\? LEDGER-13 scripted inconclusive\n {2}inconclusive \(no violation found; not certified\):\n {4}attempt 1: run 1: [^\n]*\n {4}attempt 2: [^\n]*\n {4}attempt 3: [^\n]*\n\n✗ LEDGER-19 scripted fail\n {2}run 1: the row was gone$/);
    expect(renderComplianceMatrix({ scripted: report })).toMatch(/\[LEDGER-13\]\(#LEDGER-13\).* \| MUST \| ❔ \|/);
    // Only inconclusive: the verdict names no rule as failed.
    const alone = await runChecks([scripted("LEDGER-13", ["inconclusive"])], { subject: "scripted" });
    expect(renderReportTable(alone)).toMatch(/DOES NOT CONFORM: LEDGER-13 inconclusive \(no violation found; not certified\)$/);
  });

  it("runWithTimeLimit (registerChecks) runs it again too, and rejects with CheckInconclusive when every run was", async () => {
    await runWithTimeLimit(scripted("LEDGER-13", ["inconclusive", "inconclusive", "pass"]), 10_000);
    const stuck = scripted("LEDGER-13", ["inconclusive"]);
    const error = await runWithTimeLimit(stuck, 10_000).then(() => undefined, (e: unknown) => e);
    expect(CheckInconclusive.isInstance(error) && !ConformanceFailure.isInstance(error)).toBe(true);
    expect((error as Error).message).toBe("LEDGER-13 inconclusive (no violation found; not certified) after 3 attempts: run 3: the store answered too slowly for this check to conclude");
    expect(stuck.runs()).toBe(3);
    // A violation is never run again.
    const broken = scripted("LEDGER-19", ["fail", "pass"]);
    await expect(runWithTimeLimit(broken, 10_000)).rejects.toThrow("run 1: the row was gone");
    expect(broken.runs()).toBe(1);
  });
});

describe.concurrent("LEDGER-13 retention checks on a correct store that answers too slowly", () => {
  it("a finished row kept for its whole retention: reads that end past the retention are inconclusive, not LEDGER-13 broken", async ({ expect }) => {
    const outcome = await bindLedgerCheck(retentionKept, slowReadsSubject(150), { seed: 7 }).run().then(
      () => "passed",
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ name: "CheckInconclusive", message: expect.stringMatching(/too slowly for this check to conclude/) });
  });

  it("a sub-second retention: a read the store answers after the retention ran out is inconclusive on every attempt, so not certified; a transient slowness passes on retry", async ({ expect }) => {
    const persistent = await runCheck(bindLedgerCheck(retentionNotRoundedDown, slowReadsSubject(1_000), { seed: 7 }));
    expect(persistent).toMatchObject({ rule: "LEDGER-13", status: "inconclusive", attempts: 3 });
    expect(persistent.error).toMatch(/^inconclusive \(no violation found; not certified\) after 3 attempts: /);
    const transient = await runCheck(bindLedgerCheck(retentionNotRoundedDown, slowReadsSubject(1_000, 1), { seed: 7 }));
    expect(transient).toMatchObject({ rule: "LEDGER-13", status: "pass", attempts: 2, inconclusiveRuns: [expect.stringMatching(/past the retention of 900 ms/)] });
  });
});

describe("LEDGER-7 lease in real time on a correct store that answers too slowly", () => {
  it("a claim meant to land inside the short lease that comes back after it is inconclusive, not LEDGER-6 broken", async () => {
    class SlowSecondClaim extends MemoryLedger {
      override async claim(request: Parameters<MemoryLedger["claim"]>[0]) {
        // The store takes the claim up only once the 600 ms lease has run out.
        if (request.owner === "owner-b") await new Promise((resolve) => setTimeout(resolve, 700));
        return super.claim(request);
      }
    }
    const outcome = await bindLedgerCheck(leaseLapsesInRealTime, memoryLedgerSubject("ledger-memory, slow claims", SlowSecondClaim), { seed: 7 }).run().then(
      () => "passed",
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ name: "CheckInconclusive", message: expect.stringMatching(/came back \d+ ms after it began: the store answers too slowly for this check to conclude/) });
  });
});

let echo: Awaited<ReturnType<typeof startEchoStore>>;
beforeAll(async () => {
  echo = await startEchoStore();
});
afterAll(async () => {
  await echo.close();
});

/**
 * Blocks this process's event loop for `ms` (a starved test process, or an adapter that
 * busy-waits). It waits without spinning: to the event loop that is the same block, and on a
 * loaded CI host it leaves the core to the servers and suites beside it.
 */
function busyWait(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/**
 * The correct gated ledger whose instance's close, in the first `stalledFixtures` fixtures, blocks
 * the process's event loop past the window's deadline from a timer before closing correctly.
 */
function stalledCloseSubject(stallMs: number, stalledFixtures = Infinity): LedgerSubject {
  const inner = gatedSubject(echo.address);
  let made = 0;
  return {
    ...inner,
    async create(options) {
      const fixture = await inner.create(options);
      const stalls = made++ < stalledFixtures;
      const openVia = fixture.raw.openVia!.bind(fixture.raw);
      return {
        ...fixture,
        raw: {
          ...fixture.raw,
          async openVia(via: StoreAddress) {
            const ledger = await openVia(via);
            if (!stalls) return ledger;
            return Object.assign(Object.create(ledger) as Ledger, {
              capabilities: ledger.capabilities,
              close: () =>
                new Promise<void>((resolve, reject) => {
                  setTimeout(() => {
                    busyWait(stallMs);
                    // The close itself answers a few ms after the stall: the kit's overdue deadline fires first.
                    setTimeout(() => void ledger.close().then(resolve, reject), 20);
                  }, 10);
                }),
            });
          },
        },
      };
    },
  };
}

describe("LEDGER-12 silent-store window while the kit's process is stalled", () => {
  // The window's deadline is the bound 200 + 1,020 ms slack: a stall longer than it makes any operation late.
  const STALL_MS = 1_600;

  it("an operation late by less than the measured stall of the kit's process is inconclusive, not LEDGER-12 broken", async () => {
    const outcome = await bindLedgerCheck(silentStoreAfterConnecting, stalledCloseSubject(STALL_MS), { seed: 7 }).run().then(
      () => "passed",
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ name: "CheckInconclusive", message: expect.stringMatching(/close \(once the others had settled, the store still silent\) settled .* the kit's own process was stalled/) });
  });

  it("a transient stall: inconclusive on the first attempt, then it passes on a fresh fixture", async () => {
    const result = await runCheck(bindLedgerCheck(silentStoreAfterConnecting, stalledCloseSubject(STALL_MS, 1), { seed: 7 }));
    expect(result).toMatchObject({ rule: "LEDGER-12", status: "pass", attempts: 2, inconclusiveRuns: [expect.stringMatching(/stalled/)] });
  });
});
