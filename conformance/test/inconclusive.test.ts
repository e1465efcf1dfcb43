import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import { bindLedgerCheck, memoryLedgerSubject, retentionKept, retentionNotRoundedDown, runCheck, silentStoreAfterConnecting, type LedgerSubject, type StoreAddress } from "../src/ledger/index.js";
import { gatedSubject, startEchoStore } from "./fixtures/gated-ledger.js";

/**
 * A timing check that cannot conclude (the store answers too slowly, the kit's own process is
 * stalled) says so (CheckInconclusive, CONF-7): it is run again on a fresh fixture, and when it
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

describe("LEDGER-13 retention checks on a correct store that answers too slowly", () => {
  it("a finished row kept for its whole retention: reads that end past the retention are inconclusive, not LEDGER-13 broken", async () => {
    const outcome = await bindLedgerCheck(retentionKept, slowReadsSubject(150), { seed: 7 }).run().then(
      () => "passed",
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ name: "CheckInconclusive", message: expect.stringMatching(/too slowly for this check to conclude/) });
  });

  it("a sub-second retention: a read the store answers after the retention ran out is inconclusive on every attempt, so not certified; a transient slowness passes on retry", async () => {
    const persistent = await runCheck(bindLedgerCheck(retentionNotRoundedDown, slowReadsSubject(1_000), { seed: 7 }));
    expect(persistent).toMatchObject({ rule: "LEDGER-13", status: "inconclusive", attempts: 3 });
    expect(persistent.error).toMatch(/^inconclusive \(no violation found; not certified\) after 3 attempts: /);
    const transient = await runCheck(bindLedgerCheck(retentionNotRoundedDown, slowReadsSubject(1_000, 1), { seed: 7 }));
    expect(transient).toMatchObject({ rule: "LEDGER-13", status: "pass", attempts: 2, inconclusive: [expect.stringMatching(/past the retention of 900 ms/)] });
  });
});

let echo: Awaited<ReturnType<typeof startEchoStore>>;
beforeAll(async () => {
  echo = await startEchoStore();
});
afterAll(async () => {
  await echo.close();
});

/** Blocks this process's event loop for `ms` (a starved test process, or an adapter that busy-waits). */
function busyWait(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // spin
  }
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
                    setTimeout(() => ledger.close().then(resolve, reject), 20);
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
    expect(result).toMatchObject({ rule: "LEDGER-12", status: "pass", attempts: 2, inconclusive: [expect.stringMatching(/stalled/)] });
  });
});
