/**
 * LEDGER-2: a claimed outcome is a stored row; a losing claim stores nothing.
 */
import { must, mustEqual, show } from "../../failure.js";
import { TOOL_FOR, claimNew, claimRequest, mustBeClaimed, mustBeExisting, mustBeStored, rowEssence, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, lookupMust, snapshot } from "./common.js";

export const claimIsStored: LedgerCheckSpec = {
  rule: "LEDGER-2",
  name: "a claimed outcome is backed by a stored in_flight row with owner, effect, tool name and lease",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const claimed = mustBeClaimed(
          await fixture.ledger.claim(claimRequest(key, "owner-a", effect)),
          `first claim (${effect})`,
        );
        must(!claimed.takeover, `a first claim must report takeover: false`);
        const raw = await mustBeStored(fixture, key, { state: "in_flight", fence: claimed.fence, owner: "owner-a" }, "stored row");
        must(raw.effect === effect && raw.toolName === TOOL_FOR[effect], `stored effect/toolName wrong: ${show(raw)}`);
        const row = await lookupMust(fixture.ledger, key, "lookup after claim");
        mustEqual(
          rowEssence(row),
          { key, state: "in_flight", fence: claimed.fence, effect, toolName: TOOL_FOR[effect], owner: "owner-a" },
          "lookup after claim",
        );
        must(row.state === "in_flight" && row.leaseExpiresAt === claimed.leaseExpiresAt,
          `lookup leaseExpiresAt ${show((row as { leaseExpiresAt?: unknown }).leaseExpiresAt)} differs from the claim's ${claimed.leaseExpiresAt}`);
      }
    }),
};

export const losingClaimStoresNothing: LedgerCheckSpec = {
  rule: "LEDGER-2",
  name: "a claim that finds a row stores nothing and keeps the first owner",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      const before = await snapshot(fixture, key);
      mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "second claim");
      mustEqual(await snapshot(fixture, key), before, "row after a losing claim");
      await mustBeStored(fixture, key, { state: "in_flight", fence, owner: "owner-a" }, "stored row");
    }),
};

/** Every check of this file, in order. */
export const CLAIM_BEFORE_RUN_CHECKS: readonly LedgerCheckSpec[] = [claimIsStored, losingClaimStoresNothing];
