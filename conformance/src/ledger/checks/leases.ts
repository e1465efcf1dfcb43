/**
 * LEDGER-6, LEDGER-7, LEDGER-9, LEDGER-15, LEDGER-17 and LEDGER-18: what a lease protects, and what happens when it runs out (with the hooks).
 */
import type { LedgerEffect } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, mustRejectWith } from "../../failure.js";
import { LEASE_MS, TOOL_FOR, claimNew, claimRequest, describeRow, mustBeClaimed, mustBeExisting, mustBeStored, rowEssence, short, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, lookupMust, leaseOf } from "./common.js";

export const liveRowSeenByClaimants: LedgerCheckSpec = {
  rule: "LEDGER-6",
  name: "a live in-flight row is returned to other claimants as existing in_flight with owner, fence and lease",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect)), "claim");
        for (const owner of ["owner-b", "owner-c"]) {
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, owner, effect)), `claim by ${owner}`);
          mustEqual(
            rowEssence(row),
            { key, state: "in_flight", fence: claimed.fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" },
            `row seen by ${owner}`,
          );
          mustEqual(leaseOf(row), claimed.leaseExpiresAt, `lease seen by ${owner}`);
        }
      }
    }),
};

export const liveRowSeenViaOtherInstance: LedgerCheckSpec = {
  rule: "LEDGER-6",
  name: "a live in-flight row is seen from another instance",
  needs: ["sharedAcrossProcesses"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const other = await fixture.reopen();
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        const row = mustBeExisting(await other.claim(claimRequest(key, "owner-b", effect)), "claim via another instance");
        mustEqual(rowEssence(row)?.fence, fence, "fence seen via another instance");
        mustEqual(row.state, "in_flight", "state seen via another instance");
      }
    }),
};

export const inFlightSurvivesRestart: LedgerCheckSpec = {
  rule: "LEDGER-6",
  name: "an in-flight row survives a restart: the fresh instance returns it and does not claim",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        const reopened = await fixture.reopen();
        const result = await reopened.claim(claimRequest(key, "owner-after-restart", effect));
        if (result.outcome === "claimed") {
          throw new ConformanceFailure(
            `after restart a claim of ${short(key)} won (fence ${result.fence}) although owner-a holds it in flight (fence ${fence}): the in-flight row was lost`,
          );
        }
        mustEqual(rowEssence(result.row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, "row after restart");
        // The first owner can still finish through the new instance.
        await reopened.complete(key, fence, '"done"');
      }
    }),
};

export const expiredKeyedTakenOver: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: "an expired keyed_write claim is taken over with a higher fence and takeover: true",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = await claimNew(fixture.ledger, key, "owner-dead", "keyed_write");
      await fixture.raw.expireLease(key);
      const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "claim of an expired keyed_write row");
      must(taken.takeover, "a claim of an expired in-flight row must report takeover: true");
      must(taken.fence > first, `takeover fence ${taken.fence} must exceed ${first}`);
      await mustBeStored(fixture, key, { state: "in_flight", fence: taken.fence, owner: "owner-b" }, "row after takeover");
    }),
};

export const expiredUnkeyedBecomesUnknown: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: "an expired unkeyed_write claim becomes unknown (reason lease_expired) and is never claimable again",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-dead", "unkeyed_write");
      await fixture.raw.expireLease(key);
      const expected = { key, state: "unknown", fence, effect: "unkeyed_write", toolName: TOOL_FOR.unkeyed_write, reason: "lease_expired" };
      for (let i = 0; i < 5; i++) {
        const row = mustBeExisting(
          await fixture.ledger.claim(claimRequest(key, `owner-${i}`, "unkeyed_write")),
          `claim #${i} of an expired unkeyed_write row (it must never run again)`,
        );
        mustEqual(rowEssence(row), expected, `row returned to claim #${i}`);
      }
      await mustBeStored(fixture, key, { state: "unknown", fence }, "stored row");
      mustEqual(rowEssence(await fixture.ledger.lookup(key)), expected, "lookup");
      await mustRejectWith(fixture.ledger.complete(key, fence, '"late"'), "stale_claim", "the dead owner's late complete");
    }),
};

export const unknownSurvivesRestart: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: "an expired unkeyed_write claim stays unknown after a restart",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-dead", "unkeyed_write");
      await fixture.raw.expireLease(key);
      mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim");
      const reopened = await fixture.reopen();
      const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-c", "unkeyed_write")), "claim after restart");
      mustEqual(rowEssence(row), { key, state: "unknown", fence, effect: "unkeyed_write", toolName: TOOL_FOR.unkeyed_write, reason: "lease_expired" }, "row after restart");
    }),
};

export const expiredUnkeyedNeverTakenOverAfterRestart: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: "an expired unkeyed_write claim is never taken over, even when its lease expired on a restarted instance",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      await claimNew(fixture.ledger, key, "owner-dead", "unkeyed_write");
      const reopened = await fixture.reopen();
      await fixture.raw.expireLease(key);
      const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim after restart");
      mustEqual(row.state, "unknown", "state of an expired unkeyed_write row after restart");
    }),
};

export const renewExtendsLease: LedgerCheckSpec = {
  rule: "LEDGER-9",
  name: "renew extends the owner's lease and the new lease is stored",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, 60_000)), "claim");
        const renewed = await fixture.ledger.renew(key, claimed.fence, 3 * LEASE_MS);
        must(
          renewed.leaseExpiresAt > claimed.leaseExpiresAt,
          `renew returned leaseExpiresAt ${renewed.leaseExpiresAt}, not after the claim's ${claimed.leaseExpiresAt}`,
        );
        const row = await lookupMust(fixture.ledger, key, "lookup after renew");
        mustEqual(leaseOf(row), renewed.leaseExpiresAt, "stored lease after renew");
        mustEqual(rowEssence(row)?.fence, claimed.fence, "fence after renew (renew is not a new claim)");
      }
    }),
};

export const liveRowMakesSameOwnerWait: LedgerCheckSpec = {
  rule: "LEDGER-15",
  name: "a live in-flight row is returned as existing in_flight even to a re-claim by the same owner, so the caller waits",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-a", effect)), "re-claim by the same owner");
        mustEqual(rowEssence(row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, "row on re-claim");
      }
    }),
};

export const lookupNeverActsOnExpiry: LedgerCheckSpec = {
  rule: "LEDGER-17",
  name: "lookup never acts on an expired lease",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        await fixture.raw.expireLease(key);
        const before = await fixture.raw.read(key);
        for (let i = 0; i < 2; i++) {
          const row = await lookupMust(fixture.ledger, key, `lookup #${i} of an expired ${effect} claim`);
          mustEqual(rowEssence(row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, `lookup #${i} of an expired ${effect} claim`);
        }
        mustEqual(rowEssence(await fixture.raw.read(key)), rowEssence(before), "stored row after lookups");
        await fixture.ledger.complete(key, fence, '"owner finished"');
      }
    }),
};

export const expiryFollowsStoredEffect: LedgerCheckSpec = {
  rule: "LEDGER-18",
  name: "expiry follows the effect class stored in the row, not the claimant's",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const unkeyed = ctx.key("unkeyed");
      const fence = await claimNew(fixture.ledger, unkeyed, "owner-a", "unkeyed_write");
      await fixture.raw.expireLease(unkeyed);
      const row = mustBeExisting(await fixture.ledger.claim(claimRequest(unkeyed, "owner-b", "keyed_write")), "keyed_write claim of an expired unkeyed_write row");
      mustEqual(rowEssence(row), { key: unkeyed, state: "unknown", fence, effect: "unkeyed_write", toolName: TOOL_FOR.unkeyed_write, reason: "lease_expired" }, "expired unkeyed_write row claimed as keyed_write");
      const keyed = ctx.key("keyed");
      const first = await claimNew(fixture.ledger, keyed, "owner-a", "keyed_write");
      await fixture.raw.expireLease(keyed);
      const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(keyed, "owner-b", "unkeyed_write")), "unkeyed_write claim of an expired keyed_write row");
      must(taken.takeover && taken.fence > first, `takeover of an expired keyed_write row: fence ${taken.fence}, takeover ${taken.takeover}`);
    }),
};

export const takingClaimStoresItsEffect: LedgerCheckSpec = {
  rule: "LEDGER-18",
  name: "a claim that takes the row (a re-claim after release, a keyed_write takeover) stores its own effect class, and the next expiry follows it: an unkeyed_write claimant's row turns unknown, a keyed_write claimant's is taken over",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledger = fixture.ledger;
      const cases: Array<{ how: "release" | "takeover"; first: LedgerEffect; second: LedgerEffect }> = [
        { how: "release", first: "keyed_write", second: "unkeyed_write" },
        { how: "release", first: "unkeyed_write", second: "keyed_write" },
        { how: "takeover", first: "keyed_write", second: "unkeyed_write" },
      ];
      for (const { how, first, second } of cases) {
        const what = `a ${first} row ${how === "release" ? "released and re-claimed" : "taken over"} by a ${second} claimant`;
        const key = ctx.key(`${how}-${second}`);
        const fence = await claimNew(ledger, key, "owner-a", first);
        if (how === "release") await ledger.release(key, fence);
        else await fixture.raw.expireLease(key);
        const taken = mustBeClaimed(await ledger.claim(claimRequest(key, "owner-b", second)), what);
        const row = await lookupMust(ledger, key, what);
        must(row.state === "in_flight" && row.effect === second, `${what}: the row must store the claimant's effect class ${second} (LEDGER-18), got effect ${String(row.effect)} (${describeRow(row)})`);
        await fixture.raw.expireLease(key);
        const next = await ledger.claim(claimRequest(key, "owner-c", first));
        if (second === "unkeyed_write") {
          const seen = mustBeExisting(next, `${what}, its lease expired, claimed by a ${first} claimant`);
          // Which tool name the re-claimed row keeps is not what LEDGER-18 rules on: only the class decides.
          const { toolName: _toolName, ...essence } = rowEssence(seen)!;
          mustEqual(essence, { key, state: "unknown", fence: taken.fence, effect: "unkeyed_write", reason: "lease_expired" }, `${what}, after its lease expired: the unkeyed_write call is never re-run`);
        } else {
          const again = mustBeClaimed(next, `${what}, its lease expired, claimed by a ${first} claimant`);
          must(again.takeover && again.fence === taken.fence + 1, `${what}, after its lease expired: a keyed_write row is taken over (fence ${taken.fence + 1}, takeover), got fence ${again.fence}, takeover ${again.takeover}`);
        }
      }
    }),
};

/** Every check of this file, in order. */
/** Rounds of the boundary check: each claim lands in the millisecond its 0 ms lease ends, or just after. */
const BOUNDARY_ROUNDS = 8;

export const leaseExpiredAtItsEnd: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: `a lease has expired from the instant it ends (leaseExpiresAt on the ledger's clock, not the millisecond after): a claim with leaseMs 0 has expired when granted, and the next claim acts on it at once (keyed_write: a takeover; unkeyed_write: unknown), ${BOUNDARY_ROUNDS} times in a row`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        for (let round = 0; round < BOUNDARY_ROUNDS; round++) {
          const key = ctx.key();
          const first = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, 0)), `claim with leaseMs 0 (${effect}, round ${round})`);
          // Issued at once, usually within the lease's own millisecond: a ledger that counts a lease
          // live at leaseExpiresAt (">=" for ">") answers existing in flight here.
          const next = await fixture.ledger.claim(claimRequest(key, "owner-b", effect));
          if (effect === "keyed_write") {
            if (next.outcome !== "claimed") {
              throw new ConformanceFailure(`round ${round}: a claim right after a 0 ms lease was granted (it ended at ${first.leaseExpiresAt}) met ${describeRow(next.row)}: a lease is live only before leaseExpiresAt, and an expired keyed_write claim is taken over`);
            }
            must(next.takeover && next.fence > first.fence, `round ${round}: the claim after the 0 ms lease must be a takeover with a fence above ${first.fence}, got takeover ${next.takeover}, fence ${next.fence}`);
          } else {
            const row = mustBeExisting(next, `round ${round}: a claim right after a 0 ms unkeyed_write lease was granted`);
            must(row.state === "unknown" && (row as { reason?: string }).reason === "lease_expired", `round ${round}: a claim right after a 0 ms unkeyed_write lease was granted (it ended at ${first.leaseExpiresAt}) must turn it unknown (lease_expired), got ${describeRow(row)}: a lease is live only before leaseExpiresAt`);
          }
        }
      }
    }),
};

export const LEASES_CHECKS: readonly LedgerCheckSpec[] = [leaseExpiredAtItsEnd, liveRowSeenByClaimants, liveRowSeenViaOtherInstance, inFlightSurvivesRestart, expiredKeyedTakenOver, expiredUnkeyedBecomesUnknown, unknownSurvivesRestart, expiredUnkeyedNeverTakenOverAfterRestart, renewExtendsLease, liveRowMakesSameOwnerWait, lookupNeverActsOnExpiry, expiryFollowsStoredEffect, takingClaimStoresItsEffect];
