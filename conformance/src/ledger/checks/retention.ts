/**
 * LEDGER-13 and LEDGER-19: what sweep removes and keeps, and a claim after retention (with the hooks).
 */
import { must, mustEqual, show } from "../../failure.js";
import { claimNew, claimRequest, mustBeClaimed, mustBeExisting, mustBeStored, short, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, finishAs } from "./common.js";

export const sweepRemovesExpired: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: "sweep removes completed, failed, unknown and released rows whose retention passed",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const keys: string[] = [];
      for (const state of ["completed", "failed", "unknown", "released"] as const) {
        const key = ctx.key(state);
        keys.push(key);
        await finishAs(fixture.ledger, key, await claimNew(fixture.ledger, key, "owner-a", "keyed_write"), state);
        await fixture.raw.expireRetention(key);
      }
      // A store that expires rows itself (Redis TTL) may have forgotten them already (LEDGER-19): it may count fewer, never more.
      const removed = await fixture.ledger.sweep();
      must(Number.isSafeInteger(removed) && removed >= 0 && removed <= 4, `sweep reported ${show(removed)} rows removed; 4 had passed retention`);
      for (const key of keys) {
        mustEqual(await fixture.raw.read(key), undefined, `stored row ${short(key)} after sweep`);
        mustEqual(await fixture.ledger.lookup(key), undefined, `lookup ${short(key)} after sweep`);
      }
    }),
};

export const sweepKeepsInFlight: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: "sweep never removes in-flight rows, live or with an expired lease",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const held: Array<[string, number, string]> = [];
      for (const effect of EFFECTS) {
        for (const expired of [false, true]) {
          const key = ctx.key();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          if (expired) await fixture.raw.expireLease(key);
          held.push([key, fence, `${expired ? "expired" : "live"} ${effect}`]);
        }
      }
      const done = ctx.key("done");
      await fixture.ledger.complete(done, await claimNew(fixture.ledger, done, "owner-a", "keyed_write"), "true");
      await fixture.raw.expireRetention(done);
      const removed = await fixture.ledger.sweep();
      must(removed >= 0 && removed <= 1, `sweep reported ${removed} rows removed; only 1 finished row had passed retention`);
      for (const [key, fence, label] of held) {
        await mustBeStored(fixture, key, { state: "in_flight", fence }, `${label} in-flight row after sweep`);
      }
    }),
};

export const sweepKeepsWithinRetention: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: "sweep keeps finished rows whose retention has not passed",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const keys: Array<[string, string]> = [];
      for (const state of ["completed", "failed", "unknown", "released"] as const) {
        const key = ctx.key(state);
        await finishAs(fixture.ledger, key, await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write"), state);
        keys.push([key, state]);
      }
      mustEqual(await fixture.ledger.sweep(), 0, "rows removed by sweep within retention");
      for (const [key, state] of keys) {
        mustEqual((await fixture.ledger.lookup(key))?.state, state, `${state} row after sweep`);
        // An unkeyed_write that completed is still protected: a replay must not run it again.
        if (state !== "released") {
          mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), `claim of ${state} row after sweep`);
        }
      }
    }),
};

export const claimAfterRetentionIsFirst: LedgerCheckSpec = {
  rule: "LEDGER-19",
  name: "after retention and sweep a key is absent and the next claim is a first claim (fence 1)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      await fixture.ledger.complete(key, await claimNew(fixture.ledger, key, "owner-a", "keyed_write"), '"old"');
      await fixture.raw.expireRetention(key);
      const removed = await fixture.ledger.sweep();
      must(removed >= 0 && removed <= 1, `sweep reported ${removed} rows removed; 1 had passed retention`);
      mustEqual(await fixture.ledger.lookup(key), undefined, "lookup after sweep");
      mustEqual(await fixture.raw.read(key), undefined, "stored row after retention and sweep");
      const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "claim after retention");
      must(again.fence === 1 && !again.takeover, `a forgotten key behaves as never claimed: got fence ${again.fence}, takeover ${again.takeover}; expected fence 1, no takeover`);
    }),
};

/** Every check of this file, in order. */
export const RETENTION_CHECKS: readonly LedgerCheckSpec[] = [sweepRemovesExpired, sweepKeepsInFlight, sweepKeepsWithinRetention, claimAfterRetentionIsFirst];
