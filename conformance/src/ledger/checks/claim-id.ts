/**
 * LEDGER-26 (proposed): a claim is recognised by its claim id. A claim whose reply was lost (a
 * timeout, a dropped connection, a paused store that applied it later) is sent again with the same
 * claim id; meeting its own in-flight row it is the same claim, not another attempt's live row
 * (and, past the lease, not an unkeyed_write call to turn unknown although it never ran).
 */
import { newClaimId, type ClaimResult } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual } from "../../failure.js";
import { claimWithId, describeRow, mustBeClaimed, mustBeExisting, requestFor, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, lookupMust } from "./common.js";

const withId = claimWithId;

export const claimRecognisedByClaimId: LedgerCheckSpec = {
  rule: "LEDGER-26",
  name: "a claim sent again with its claim id is the same claim: claimed with its fence, not a takeover, with the stored request; another claim id or none meets the row as held",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const others = ctx.subject.capabilities.sharedAcrossProcesses ? [fixture.ledger, await fixture.reopen()] : [fixture.ledger];
      for (const effect of EFFECTS) {
        for (const [i, again] of others.entries()) {
          const key = ctx.key();
          const id = newClaimId();
          const via = i === 0 ? "" : " via another instance";
          const first = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", effect, id)), `first claim (${effect})`);
          // The same claim, re-sent with another owner string and request: the id decides, the row keeps its request.
          const resent = mustBeClaimed(await again.claim(withId(key, "owner-a-retry", effect, id)), `the same claim sent again${via} (${effect})`);
          mustEqual(resent.fence, first.fence, `fence of the claim sent again${via} (${effect})`);
          mustEqual(resent.takeover, false, `takeover of the claim sent again${via} (${effect})`);
          mustEqual(resent.request, requestFor("owner-a"), `request of the claim sent again${via} (${effect})`);
          const row = await lookupMust(fixture.ledger, key, `after the claim was sent again (${effect})`);
          must(row.state === "in_flight" && row.fence === first.fence, `the row after the claim was sent again must stay in flight with fence ${first.fence}, got ${describeRow(row)}`);
          // Neither another claim id nor the owner string alone is that claim (LEDGER-16).
          mustBeExisting(await again.claim(withId(key, "owner-b", effect, newClaimId())), `a claim with another claim id${via} (${effect})`);
          mustBeExisting(await again.claim(withId(key, "owner-a", effect, undefined)), `a claim without a claim id by the same owner string${via} (${effect})`);
          // Still the first claim's: its fence finishes it.
          await fixture.ledger.complete(key, first.fence, '{"ok":true}');
        }
      }
    }),
};

export const claimRecognisedAfterLease: LedgerCheckSpec = {
  rule: "LEDGER-26",
  name: "a claim sent again after its lease ran out, before anyone acted on it, is still the same claim: claimed with its fence (unkeyed_write: not unknown, keyed_write: not a takeover) and the lease restarts",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const id = newClaimId();
        const first = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", effect, id)), `first claim (${effect})`);
        await fixture.raw.expireLease(key);
        const resent = await fixture.ledger.claim(withId(key, "owner-a", effect, id));
        if (resent.outcome !== "claimed") {
          throw new ConformanceFailure(`the same claim sent again after its lease ran out (${effect}) must be claimed with fence ${first.fence}, got existing ${describeRow(resent.row)}: a call that never ran would be settled as another attempt's`);
        }
        mustEqual(resent.fence, first.fence, `fence of the claim sent again after its lease (${effect})`);
        mustEqual(resent.takeover, false, `takeover of the claim sent again after its lease (${effect})`);
        // The lease restarted: another claimant now meets a live claim, not an expired one.
        const other = mustBeExisting(await fixture.ledger.claim(withId(key, "owner-b", effect, newClaimId())), `another claim after the lease restarted (${effect})`);
        must(other.state === "in_flight" && other.fence === first.fence, `after the lease restarted another claimant must meet the live claim (fence ${first.fence}), got ${describeRow(other)}`);
      }
    }),
};

export const claimIdOnlyWhileInFlight: LedgerCheckSpec = {
  rule: "LEDGER-26",
  name: "a claim id recognises only its own in-flight claim: after complete, after an unkeyed_write expiry turned it unknown, or after a takeover, it is an ordinary claim",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const id = newClaimId();
        const first = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", effect, id)), `first claim (${effect})`);
        await fixture.ledger.complete(key, first.fence, '{"done":1}');
        const row = mustBeExisting(await fixture.ledger.claim(withId(key, "owner-a", effect, id)), `the claim id after complete (${effect})`);
        mustEqual(row.state, "completed", `state met by the claim id after complete (${effect})`);
      }
      // Someone else acted on the expired claim first: the id no longer holds the row.
      const unkeyed = ctx.key("unknown");
      const lostId = newClaimId();
      mustBeClaimed(await fixture.ledger.claim(withId(unkeyed, "owner-a", "unkeyed_write", lostId)), "first claim (unkeyed_write)");
      await fixture.raw.expireLease(unkeyed);
      const settled = mustBeExisting(await fixture.ledger.claim(withId(unkeyed, "owner-b", "unkeyed_write", newClaimId())), "another claim after the lease (unkeyed_write)");
      mustEqual(settled.state, "unknown", "another claimant settles the expired unkeyed_write claim (LEDGER-7)");
      const late = mustBeExisting(await fixture.ledger.claim(withId(unkeyed, "owner-a", "unkeyed_write", lostId)), "the first claim id after the row turned unknown");
      mustEqual(late.state, "unknown", "the first claim id after the row turned unknown");

      const keyed = ctx.key("takeover");
      const oldId = newClaimId();
      const old = mustBeClaimed(await fixture.ledger.claim(withId(keyed, "owner-a", "keyed_write", oldId)), "first claim (keyed_write)");
      await fixture.raw.expireLease(keyed);
      const taken = mustBeClaimed(await fixture.ledger.claim(withId(keyed, "owner-b", "keyed_write", newClaimId())), "takeover (keyed_write)");
      must(taken.takeover && taken.fence > old.fence, `a takeover must report takeover with a higher fence, got fence ${taken.fence}, takeover ${taken.takeover}`);
      const stale = mustBeExisting(await fixture.ledger.claim(withId(keyed, "owner-a", "keyed_write", oldId)), "the first claim id after a takeover");
      must(stale.state === "in_flight" && stale.fence === taken.fence, `the first claim id after a takeover must meet the taker's claim (fence ${taken.fence}), got ${describeRow(stale)}`);
    }),
};

export const takingClaimStoresItsClaimId: LedgerCheckSpec = {
  rule: "LEDGER-26",
  name: "a claim without a claim id that takes the row (a keyed_write takeover, a re-claim after release) stores none: a late copy of the earlier claim id then meets the new holder's live claim, never claims it",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledger = fixture.ledger;
      for (const how of ["takeover", "release"] as const) {
        const key = ctx.key(how);
        const oldId = newClaimId();
        const old = mustBeClaimed(await ledger.claim(withId(key, "owner-a", "keyed_write", oldId)), `first claim, with a claim id (${how})`);
        if (how === "takeover") await fixture.raw.expireLease(key);
        else await ledger.release(key, old.fence);
        const what = how === "takeover" ? "a takeover by a claim without a claim id" : "a re-claim of the released row by a claim without a claim id";
        const taken = mustBeClaimed(await ledger.claim(withId(key, "owner-b", "keyed_write", undefined)), what);
        let late: ClaimResult | undefined;
        try {
          late = await ledger.claim(withId(key, "owner-a", "keyed_write", oldId));
        } catch (error) {
          // A ledger that still refuses the old claim id (stale_claim) takes nothing: safe.
          if ((error as { code?: string }).code !== "stale_claim") throw error;
        }
        if (late?.outcome === "claimed") {
          throw new ConformanceFailure(`after ${what}, a late copy of the first claim id was answered claimed (fence ${late.fence}): the row must store the taking claim's claim id, none, so two claimants now hold fence ${taken.fence}`);
        }
        const row = await lookupMust(ledger, key, `after ${what} and a late copy of the first claim id`);
        must(row.state === "in_flight" && row.fence === taken.fence && row.owner === "owner-b", `after ${what}, the late copy of the first claim id must leave the new holder's claim (fence ${taken.fence}, owner-b), got ${describeRow(row)}`);
        await ledger.complete(key, taken.fence, '{"ok":true}');
      }
    }),
};

/** A claim id of exactly `length` characters from LEDGER-26's alphabet, with letters in both cases. */
function claimIdOfLength(length: number): string {
  return `Cid${newClaimId().replace(/[^A-Za-z0-9_-]/g, "")}`.padEnd(length, "xY").slice(0, length);
}

function swapCase(text: string): string {
  return [...text].map((c) => (c === c.toLowerCase() ? c.toUpperCase() : c.toLowerCase())).join("");
}

/**
 * Pairs of claim ids one careless store takes for one: a case-insensitive collation on the claim id
 * column, a column narrower than LEDGER-26's 64 characters (CHAR(32) for "a UUID without dashes").
 */
function claimIdPairs(): Array<{ label: string; first: string; second: string }> {
  const mixed = claimIdOfLength(40);
  const longest = claimIdOfLength(63);
  const at33 = claimIdOfLength(40);
  return [
    { label: "claim ids that differ only in ASCII case", first: mixed, second: swapCase(mixed) },
    { label: "two 64-character claim ids that differ only in their last character", first: `${longest}a`, second: `${longest}b` },
    { label: "two 40-character claim ids that differ only in their 33rd character", first: `${at33.slice(0, 32)}a${at33.slice(33)}`, second: `${at33.slice(0, 32)}b${at33.slice(33)}` },
  ];
}

export const claimIdsComparedExactly: LedgerCheckSpec = {
  rule: "LEDGER-26",
  name: "claim ids are compared exactly: two ids that differ only in ASCII case, or in one character past the 32nd (up to LEDGER-26's 64), are two claims; the second meets the first's live row as held, and after a release is a re-claim, not the released claim's late copy",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const { label, first, second } of claimIdPairs()) {
        for (const effect of EFFECTS) {
          const key = ctx.key();
          const held = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", effect, first)), `${label}: the first claim (${effect})`);
          // Recognising the second id would hand one attempt's claim to another: both would run.
          const other = await fixture.ledger.claim(withId(key, "owner-b", effect, second));
          if (other.outcome === "claimed") {
            throw new ConformanceFailure(`${label}: a claim with ${second} was answered claimed (fence ${other.fence}) on the live row claimed with ${first} (${effect}): another attempt's claim taken for its own, and both run`);
          }
          must(other.row.state === "in_flight" && other.row.fence === held.fence, `${label}: the claim with ${second} must meet the live row (fence ${held.fence}), got ${describeRow(other.row)}`);
          await fixture.ledger.release(key, held.fence);
          // LEDGER-27 refuses only the id the row was released under.
          const again = await fixture.ledger.claim(withId(key, "owner-b", effect, second)).catch((error: unknown) => error);
          if (!(typeof again === "object" && again !== null && "outcome" in again)) {
            throw new ConformanceFailure(`${label}: after the claim with ${first} was released, a claim with ${second} was refused as its late copy (${String((again as Error)?.message ?? again)}) (${effect})`);
          }
          const reclaimed = mustBeClaimed(again as ClaimResult, `${label}: the claim with ${second} after the release (${effect})`);
          must(reclaimed.fence > held.fence, `${label}: the re-claim's fence must exceed ${held.fence}, got ${reclaimed.fence}`);
          await fixture.ledger.complete(key, reclaimed.fence, '{"ok":true}');
        }
      }
    }),
};

export const CLAIM_ID_CHECKS: readonly LedgerCheckSpec[] = [claimRecognisedByClaimId, claimRecognisedAfterLease, claimIdOnlyWhileInFlight, takingClaimStoresItsClaimId, claimIdsComparedExactly];
