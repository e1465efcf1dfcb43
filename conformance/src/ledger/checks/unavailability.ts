/**
 * LEDGER-12: an unreachable store raises ledger_unavailable and changes nothing.
 */
import { mustEqual, mustRejectWith } from "../../failure.js";
import { claimNew, claimRequest, mustBeClaimed, withFixture } from "../support.js";
import { type LedgerCheckSpec, snapshot, OWNER_OPS, ownerOp } from "./common.js";

export const unreachableClaimRaises: LedgerCheckSpec = {
  rule: "LEDGER-12",
  name: "a claim on an unreachable store raises ledger_unavailable and creates no row",
  needs: ["unavailability"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const broken = await fixture.raw.disconnected!();
      const key = ctx.key();
      await mustRejectWith(broken.claim(claimRequest(key, "owner-a", "unkeyed_write")), "ledger_unavailable", "claim on an unreachable store");
      mustEqual(await fixture.raw.read(key), undefined, "stored row after a failed claim");
      mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim on the healthy store afterwards");
    }),
};

export const unreachableOperationsRaise: LedgerCheckSpec = {
  rule: "LEDGER-12",
  name: "every other operation on an unreachable store raises ledger_unavailable and changes nothing",
  needs: ["unavailability"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const broken = await fixture.raw.disconnected!();
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
      const before = await snapshot(fixture, key);
      for (const op of OWNER_OPS) {
        await mustRejectWith(ownerOp(broken, op, key, fence), "ledger_unavailable", `${op} on an unreachable store`);
        mustEqual(await snapshot(fixture, key), before, `row after ${op} on an unreachable store`);
      }
      await mustRejectWith(broken.lookup(key), "ledger_unavailable", "lookup on an unreachable store");
    }),
};

/** Every check of this file, in order. */
export const UNAVAILABILITY_CHECKS: readonly LedgerCheckSpec[] = [unreachableClaimRaises, unreachableOperationsRaise];
