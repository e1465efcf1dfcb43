/**
 * LEDGER-1: one winner among concurrent claims of a key.
 */
import { must } from "../../failure.js";
import { claimNew, claimRequest, mustBeClaimed, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, raceOneWinner, instances } from "./common.js";

export const claimsOfOneKeyOneWinner: LedgerCheckSpec = {
  rule: "LEDGER-1",
  name: "exactly one of 64 concurrent claims of one key wins",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        await raceOneWinner(fixture, [fixture.ledger], ctx.key(), 64, effect, `64 claims (${effect})`);
      }
    }),
};

export const claimsAcrossInstancesOneWinner: LedgerCheckSpec = {
  rule: "LEDGER-1",
  name: "exactly one of 64 concurrent claims of one key wins across 4 instances",
  needs: ["sharedAcrossProcesses"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledgers = await instances(fixture, 4);
      for (const effect of EFFECTS) {
        await raceOneWinner(fixture, ledgers, ctx.key(), 64, effect, `64 claims over 4 instances (${effect})`);
      }
    }),
};

export const takeoversOneWinner: LedgerCheckSpec = {
  rule: "LEDGER-1",
  name: "exactly one of 32 concurrent takeovers of an expired keyed_write claim wins",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = await claimNew(fixture.ledger, key, "owner-dead", "keyed_write");
      await fixture.raw.expireLease(key);
      const ledgers = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
      const winner = await raceOneWinner(fixture, ledgers, key, 32, "keyed_write", "32 takeovers");
      must(winner.takeover, `the takeover winner must report takeover: true`);
      must(winner.fence > first, `takeover fence ${winner.fence} must exceed ${first}`);
    }),
};

export const reclaimsAfterReleaseOneWinner: LedgerCheckSpec = {
  rule: "LEDGER-1",
  name: "exactly one of 32 concurrent re-claims of a released key wins",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      await fixture.ledger.release(key, first);
      const ledgers = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
      const winner = await raceOneWinner(fixture, ledgers, key, 32, "keyed_write", "32 re-claims after release");
      must(winner.fence > first, `re-claim fence ${winner.fence} must exceed ${first}`);
    }),
};

export const distinctKeysAllWin: LedgerCheckSpec = {
  rule: "LEDGER-1",
  name: "concurrent claims of 32 different keys all win",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const keys = Array.from({ length: 32 }, (_, i) => ctx.key(String(i)));
      const results = await Promise.all(
        keys.map((k, i) => fixture.ledger.claim(claimRequest(k, `owner-${i}`, i % 2 ? "keyed_write" : "unkeyed_write"))),
      );
      results.forEach((r, i) => mustBeClaimed(r, `claim of distinct key #${i}`));
    }),
};

/** Every check of this file, in order. */
export const ATOMICITY_CHECKS: readonly LedgerCheckSpec[] = [claimsOfOneKeyOneWinner, claimsAcrossInstancesOneWinner, takeoversOneWinner, reclaimsAfterReleaseOneWinner, distinctKeysAllWin];
