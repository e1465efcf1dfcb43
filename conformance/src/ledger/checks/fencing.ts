/**
 * LEDGER-4, LEDGER-5 and LEDGER-16: the fence orders claims, refuses stale owners and alone decides ownership.
 */
import { ConformanceFailure, must, mustEqual, mustRejectWith } from "../../failure.js";
import { LEASE_MS, TOOL_FOR, claimNew, claimRequest, mustBeClaimed, mustBeExisting, mustBeStored, rowEssence, sleep, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, DECLINED, lookupMust, snapshot, instances, finishAs, OWNER_OPS, ownerOp } from "./common.js";

export const fenceAcrossReleases: LedgerCheckSpec = {
  rule: "LEDGER-4",
  name: "the fence starts at 1 and increases by one across 5 release and re-claim cycles",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      let last = 0;
      for (let i = 0; i < 5; i++) {
        const fence = await claimNew(fixture.ledger, key, `owner-${i}`, "keyed_write");
        must(fence === last + 1, `claim #${i} got fence ${fence}, expected ${last + 1} (the previous fence + 1)`);
        await mustBeStored(fixture, key, { state: "in_flight", fence }, `row after claim #${i}`);
        await fixture.ledger.release(key, fence);
        last = fence;
      }
    }),
};

export const fenceAcrossTakeovers: LedgerCheckSpec = {
  rule: "LEDGER-4",
  name: "the fence increases by one across 4 takeovers of expired keyed_write claims",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      let last = await claimNew(fixture.ledger, key, "owner-0", "keyed_write");
      for (let i = 1; i <= 4; i++) {
        await fixture.raw.expireLease(key);
        const taken = mustBeClaimed(
          await fixture.ledger.claim(claimRequest(key, `owner-${i}`, "keyed_write")),
          `takeover #${i}`,
        );
        must(taken.fence === last + 1, `takeover #${i} got fence ${taken.fence}, expected ${last + 1}`);
        last = taken.fence;
      }
      await fixture.ledger.complete(key, last, "1");
      mustEqual((await lookupMust(fixture.ledger, key, "lookup")).fence, last, "completed row's fence");
    }),
};

export const fenceAfterRestart: LedgerCheckSpec = {
  rule: "LEDGER-4",
  name: "the fence keeps increasing after a restart",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      await fixture.ledger.release(key, first);
      const reopened = await fixture.reopen();
      const second = await claimNew(reopened, key, "owner-b", "keyed_write");
      must(second === first + 1, `after restart the fence went from ${first} to ${second}, expected ${first + 1}`);
    }),
};

export const staleOwnerRefusedAfterTakeover: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "after a takeover the stale owner's complete, fail, renew, markUnknown and release are refused and change nothing",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const op of OWNER_OPS) {
        const key = ctx.key(op);
        const stale = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
        await fixture.raw.expireLease(key);
        const current = mustBeClaimed(
          await fixture.ledger.claim(claimRequest(key, "owner-new", "keyed_write")),
          "takeover",
        ).fence;
        const before = await snapshot(fixture, key);
        await mustRejectWith(ownerOp(fixture.ledger, op, key, stale), "stale_claim", `${op} by the stale owner (fence ${stale})`);
        mustEqual(await snapshot(fixture, key), before, `row after the stale owner's ${op}`);
        // The new owner's claim is intact.
        await fixture.ledger.complete(key, current, '"new owner"');
        mustEqual(rowEssence(await fixture.ledger.lookup(key))?.result, '"new owner"', "new owner's result");
      }
    }),
};

export const unissuedFenceRefused: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "a fence that was never issued is refused and changes nothing",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const op of OWNER_OPS) {
        const key = ctx.key(op);
        const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
        const before = await snapshot(fixture, key);
        for (const wrong of [fence + 1, fence + 1000]) {
          await mustRejectWith(ownerOp(fixture.ledger, op, key, wrong), "stale_claim", `${op} with fence ${wrong} (held: ${fence})`);
          mustEqual(await snapshot(fixture, key), before, `row after ${op} with fence ${wrong}`);
        }
      }
    }),
};

export const finishedRowRefusesOwnerOps: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "operations on a finished or released row are refused, even with its own fence",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const state of ["completed", "failed", "unknown", "released"] as const) {
        for (const op of OWNER_OPS) {
          const key = ctx.key(`${state}-${op}`);
          const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
          await finishAs(fixture.ledger, key, fence, state);
          const before = await snapshot(fixture, key);
          await mustRejectWith(ownerOp(fixture.ledger, op, key, fence), "stale_claim", `${op} on a ${state} row`);
          mustEqual(await snapshot(fixture, key), before, `${state} row after ${op}`);
        }
      }
    }),
};

export const absentKeyRefusesOwnerOps: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "operations on an absent key are refused and create no row",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const op of OWNER_OPS) {
        const key = ctx.key(op);
        await mustRejectWith(ownerOp(fixture.ledger, op, key, 1), "stale_claim", `${op} on an unclaimed key`);
        mustEqual(await fixture.raw.read(key), undefined, `stored row after ${op} on an unclaimed key`);
        mustEqual(await fixture.ledger.lookup(key), undefined, `lookup after ${op} on an unclaimed key`);
      }
    }),
};

export const staleCompleteRacingTakeover: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "a stale owner's complete racing a takeover: never both succeed (20 rounds)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledgers = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 2) : [fixture.ledger, fixture.ledger];
      for (let round = 0; round < 20; round++) {
        const key = ctx.key(String(round));
        const stale = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
        await fixture.raw.expireLease(key);
        const [completed, claim] = await Promise.all([
          ledgers[0]!.complete(key, stale, '"zombie"').then(
            () => "ok",
            (error: unknown) => (error as { code?: string }).code ?? String(error),
          ),
          ledgers[1]!.claim(claimRequest(key, "owner-new", "keyed_write")),
        ]);
        const row = rowEssence(await fixture.ledger.lookup(key));
        if (completed === "ok") {
          // Complete came first: the claimant must see the completed row, and it stays.
          must(claim.outcome === "existing" && claim.row.state === "completed", `round ${round}: the stale owner's complete succeeded AND the takeover claimed fence ${claim.outcome === "claimed" ? claim.fence : "?"}`);
          mustEqual(row, { key, state: "completed", fence: stale, effect: "keyed_write", toolName: TOOL_FOR.keyed_write, result: '"zombie"' }, `round ${round}: row after complete-then-claim`);
        } else {
          mustEqual(completed, "stale_claim", `round ${round}: the stale owner's complete after the takeover`);
          const taken = mustBeClaimed(claim, `round ${round}: takeover`);
          mustEqual(row, { key, state: "in_flight", fence: taken.fence, effect: "keyed_write", toolName: TOOL_FOR.keyed_write, owner: "owner-new" }, `round ${round}: row after claim-then-complete`);
        }
      }
    }),
};

export const staleOwnerRefusedViaOtherInstance: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "a stale owner is refused through another instance",
  needs: ["sharedAcrossProcesses"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const other = await fixture.reopen();
      const key = ctx.key();
      const stale = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
      await fixture.raw.expireLease(key);
      const current = mustBeClaimed(await other.claim(claimRequest(key, "owner-new", "keyed_write")), "takeover").fence;
      await mustRejectWith(fixture.ledger.complete(key, stale, '"old"'), "stale_claim", "stale complete via the first instance");
      await mustRejectWith(fixture.ledger.fail(key, stale, DECLINED), "stale_claim", "stale fail via the first instance");
      await mustBeStored(fixture, key, { state: "in_flight", fence: current, owner: "owner-new" }, "row");
    }),
};

export const renewAfterExpiryKeepsClaim: LedgerCheckSpec = {
  rule: "LEDGER-16",
  name: "an owner that renews after its lease ran out, before anyone acted, keeps the claim",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        await fixture.raw.expireLease(key);
        await fixture.ledger.renew(key, fence, LEASE_MS);
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "claim after renew");
        mustEqual(rowEssence(row), { key, state: "in_flight", fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" }, "row after renew");
        await fixture.ledger.complete(key, fence, '"kept"');
      }
    }),
};

/** How long a renewed lease has been over: long enough that a renewal from its old end is visibly short. */
const EXPIRED_FOR_MS = 300;

/**
 * A renewal of a lease that ran out must count from now (LEDGER-3's table: lease = now + ms), not
 * from the lease's old end (`SET lease_expires_at = lease_expires_at + $ms`): the owner then holds a
 * lease that may already be over, and a takeover lands while it works. The hook's expiry ends a lease
 * a millisecond ago, so the lease here runs out in real time. "Now" on the ledger's clock is bounded
 * from below by the claimedAt of a claim made just before the renewal.
 */
export const renewAfterExpiryCountsFromNow: LedgerCheckSpec = {
  rule: "LEDGER-16",
  name: `an owner that renews its expired lease, before anyone acted on it, gets a lease of leaseMs from now on the ledger's clock, not from the lease's old end: a claim with leaseMs 0 renewed ${EXPIRED_FOR_MS} ms later with 60,000 ends at least 60,000 ms after a claim made just before the renewal`,
  waitsMs: EXPIRED_FOR_MS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      await Promise.all(
        EFFECTS.map(async (effect) => {
          const key = ctx.key(effect);
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, 0)), `claim with leaseMs 0 (${effect})`);
          await sleep(EXPIRED_FOR_MS);
          const probe = ctx.key(`${effect}-probe`);
          await claimNew(fixture.ledger, probe, "owner-probe", "keyed_write");
          const now = Number((await lookupMust(fixture.ledger, probe, "lookup of the claim made just before the renewal")).claimedAt);
          const renewed = await fixture.ledger.renew(key, claimed.fence, 60_000);
          if (renewed.leaseExpiresAt < now + 60_000) {
            throw new ConformanceFailure(
              `${effect}: renew(leaseMs 60,000) of a lease that ended at ${claimed.leaseExpiresAt} answered leaseExpiresAt ${renewed.leaseExpiresAt}, ${now + 60_000 - renewed.leaseExpiresAt} ms short of now + leaseMs (a claim just before the renewal was made at ${now} on the ledger's clock)${renewed.leaseExpiresAt - claimed.leaseExpiresAt === 60_000 ? ": the renewal counted from the lease's old end, not from now" : ""}`,
            );
          }
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), `${effect}: a claim after the renewal`);
          must(row.state === "in_flight" && row.fence === claimed.fence, `${effect}: a claim after the owner renewed its expired lease for 60,000 ms must meet its live row, got ${JSON.stringify(rowEssence(row))}`);
        }),
      );
    }),
};

export const finishAfterExpiryKeepsClaim: LedgerCheckSpec = {
  rule: "LEDGER-16",
  name: "an owner whose lease ran out, before anyone acted on it, may still complete, fail, markUnknown or release its row",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        for (const state of ["completed", "failed", "unknown", "released"] as const) {
          const key = ctx.key(`${effect}-${state}`);
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await fixture.raw.expireLease(key);
          try {
            await finishAs(fixture.ledger, key, fence, state);
          } catch (error) {
            throw new ConformanceFailure(`the owner's ${state === "completed" ? "complete" : state === "failed" ? "fail" : state === "unknown" ? "markUnknown" : "release"} after its ${effect} lease ran out, before any claim acted on it, raised ${String(error)}: the fence alone decides ownership`);
          }
          await mustBeStored(fixture, key, { state, fence }, `${effect} row finished ${state} by its owner after its lease ran out`);
        }
      }
    }),
};

export const sameOwnerAfterExpiryTakesOver: LedgerCheckSpec = {
  rule: "LEDGER-16",
  name: "the same owner string re-claiming after expiry takes over with a new fence; its old fence is stale",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      await fixture.raw.expireLease(key);
      const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", "keyed_write")), "re-claim by the same owner after expiry");
      must(again.takeover && again.fence > first, `re-claim after expiry: fence ${again.fence}, takeover ${again.takeover}`);
      await mustRejectWith(fixture.ledger.complete(key, first, '"old"'), "stale_claim", "complete with the owner's old fence");
    }),
};

/** Every check of this file, in order. */
/**
 * Fences compared as numbers: an adapter that keeps the fence as text (a Redis hash field, a
 * DynamoDB string) and refuses "older" fences with a text comparison lets 9 pass on a row at 10
 * ("9" > "10"). Ten release and re-claim cycles reach two digits; one key serves every operation.
 */
export const staleFenceAcrossDigits: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: "fences are compared as numbers: on a row at fence 10 (reached by release and re-claim, then a takeover), the stale owners' fences 9 and 2 are refused for complete, fail, renew, markUnknown and release and change nothing",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      let fence = 0;
      for (let i = 1; i <= 8; i++) {
        fence = await claimNew(fixture.ledger, key, `owner-${i}`, "keyed_write");
        await fixture.ledger.release(key, fence);
      }
      const stale = await claimNew(fixture.ledger, key, "owner-9", "keyed_write");
      mustEqual(stale, 9, "the fence of the ninth claim of the key (8 releases before it)");
      await fixture.raw.expireLease(key);
      const current = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-10", "keyed_write")), "the takeover of fence 9's expired claim").fence;
      mustEqual(current, 10, "the fence of the takeover");
      const before = await snapshot(fixture, key);
      for (const old of [9, 2]) {
        for (const op of OWNER_OPS) {
          await mustRejectWith(ownerOp(fixture.ledger, op, key, old), "stale_claim", `${op} with the stale fence ${old} on the row at fence 10 (compared as text, "${old}" sorts after "10")`);
          mustEqual(await snapshot(fixture, key), before, `the row at fence 10 after ${op} with fence ${old}`);
        }
      }
      await fixture.ledger.complete(key, current, '"fence 10"');
      mustEqual(rowEssence(await fixture.ledger.lookup(key))?.result, '"fence 10"', "the holder's result");
    }),
};

export const FENCING_CHECKS: readonly LedgerCheckSpec[] = [fenceAcrossReleases, fenceAcrossTakeovers, fenceAfterRestart, staleOwnerRefusedAfterTakeover, unissuedFenceRefused, finishedRowRefusesOwnerOps, absentKeyRefusesOwnerOps, staleCompleteRacingTakeover, staleOwnerRefusedViaOtherInstance, renewAfterExpiryKeepsClaim, renewAfterExpiryCountsFromNow, finishAfterExpiryKeepsClaim, sameOwnerAfterExpiryTakesOver, staleFenceAcrossDigits];
