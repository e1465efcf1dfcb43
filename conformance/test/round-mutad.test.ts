import { describe, expect, it } from "vitest";
import type { Ledger } from "@dispatch-once/core";
import { bindLedgerCheck, sweepRacingClaims, sweepRacingClaimsWide, sweepSparesOldInFlight, type LedgerFixture, type LedgerSubject } from "../src/ledger/index.js";
import { conversationStoreChecks, runChecks } from "../src/index.js";
import { kvSubject, type Bugs } from "./fixtures/kv-ledger.js";
import { kvConversationSubject } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * Mutation round h-mutad: bugs planted in the REAL adapters' SQL and Lua (the survey and its
 * counts: README, "A third mutation round"). Three survivors got checks; these tests keep each
 * check failing on the key-value fixture's model of the bug and passing without it.
 */
const SEED = 20261204;

/**
 * An instance as a client over a network sees it: one connection, so its calls queue, and each
 * waits a turn of the event loop before it reaches the store. Claims sent first then still
 * commit while another instance's sweep runs, as they do against a database server.
 */
function overOneConnection(ledger: Ledger): Ledger {
  let queue: Promise<unknown> = Promise.resolve();
  return new Proxy(ledger, {
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver) as unknown;
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        const call = queue.then(() => new Promise((resolve) => setImmediate(resolve))).then(() => (value as (...a: unknown[]) => unknown).apply(target, args));
        queue = call.catch(() => undefined);
        return call;
      };
    },
  });
}

function networked(bugs: Bugs = {}): LedgerSubject {
  const inner = kvSubject("kv over a network", bugs);
  return {
    ...inner,
    async create(options) {
      const fixture: LedgerFixture = await inner.create(options);
      return { ...fixture, ledger: overOneConnection(fixture.ledger), reopen: async () => overOneConnection(await fixture.reopen()) };
    },
  };
}

describe("mutation round h-mutad: a sweep whose DELETE does not check the row again", () => {
  it("sweepDeletesSelected (deletes each listed row after waiting its turn, without reading it again) fails LEDGER-13's check of a sweep issued just after claims", async () => {
    await expect(bindLedgerCheck(sweepRacingClaimsWide, networked({ sweepDeletesSelected: true }), { seed: SEED }).run()).rejects.toThrow(/the concurrent sweep removed a row after it was claimed again/);
  });

  it("the same ledger without the bug passes it, and the sweep check before it", async () => {
    await bindLedgerCheck(sweepRacingClaimsWide, networked(), { seed: SEED }).run();
    await bindLedgerCheck(sweepRacingClaims, networked(), { seed: SEED }).run();
  });
});

describe("mutation round h-mutad: an in-flight row stored with a time to live", () => {
  it("inFlightTtlLeasePlusRetention (a claim's key expires at lease + retention) fails LEDGER-13's check that sweep and time spare old in-flight rows", async () => {
    await expect(bindLedgerCheck(sweepSparesOldInFlight, kvSubject("kv-ttl", { inFlightTtlLeasePlusRetention: true }), { seed: SEED }).run()).rejects.toThrow(/a 50 ms keyed_write in-flight row claimed 300 ms ago \(retention 200 ms\), after sweep: raw.read finds no stored row/);
  });

  it("the same ledger without the bug passes it", async () => {
    await bindLedgerCheck(sweepSparesOldInFlight, kvSubject("kv-correct"), { seed: SEED }).run();
  });
});

describe("mutation round h-mutad: a turn lease live through its last millisecond", () => {
  const edge = /TURN-10 a turn lease has expired from the instant it ends/;
  for (const [name, bugs, conforms] of [["leaseLiveAtExpiry", { leaseLiveAtExpiry: true }, false], ["no bug", {}, true]] as const) {
    it(`${name}: ${conforms ? "passes" : "fails"} TURN-10's boundary check`, async () => {
      const checks = conversationStoreChecks(kvConversationSubject(`kv-${name}`, bugs), { runs: 30, seed: SEED }).filter((c) => edge.test(`${c.rule} ${c.name}`));
      expect(checks).toHaveLength(1);
      const report = await runChecks(checks, { subject: name, seed: SEED, levels: ["conversation"] });
      expect(report.checks[0]!.status, String(report.checks[0]!.error)).toBe(conforms ? "pass" : "fail");
      if (!conforms) expect(report.checks[0]!.error).toMatch(/a lease is live only before leaseExpiresAt/);
    });
  }
});
