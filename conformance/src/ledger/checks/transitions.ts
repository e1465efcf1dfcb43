/**
 * LEDGER-3: the states and the transitions between them.
 */
import { must, mustEqual } from "../../failure.js";
import { TOOL_FOR, claimNew, claimRequest, mustBeClaimed, mustBeExisting, mustBeStored, rowEssence, short, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, DECLINED, lookupMust, finishAs } from "./common.js";

export const absentKeyHasNoRow: LedgerCheckSpec = {
  rule: "LEDGER-3",
  name: "an absent key has no row until claimed",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      mustEqual(await fixture.ledger.lookup(key), undefined, "lookup of an unclaimed key");
      mustEqual(await fixture.raw.read(key), undefined, "raw.read of an unclaimed key");
    }),
};

export const ownerFinishesRow: LedgerCheckSpec = {
  rule: "LEDGER-3",
  name: "complete, fail, markUnknown and release move in_flight to completed, failed, unknown and released",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        for (const state of ["completed", "failed", "unknown", "released"] as const) {
          const key = ctx.key();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await finishAs(fixture.ledger, key, fence, state);
          const row = await lookupMust(fixture.ledger, key, `lookup after ${state}`);
          const expected: Record<string, unknown> = { key, state, fence, effect, toolName: TOOL_FOR[effect] };
          if (state === "completed") expected.result = '{"ok":true}';
          if (state === "failed") expected.error = DECLINED;
          if (state === "unknown") expected.reason = "tool_error";
          mustEqual(rowEssence(row), expected, `row after ${state} (${effect})`);
          await mustBeStored(fixture, key, { state, fence }, `stored row after ${state} (${effect})`);
        }
      }
    }),
};

export const terminalRowsNeverClaimable: LedgerCheckSpec = {
  rule: "LEDGER-3",
  name: "completed, failed and unknown rows are never claimable again",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        for (const state of ["completed", "failed", "unknown"] as const) {
          const key = ctx.key();
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          await finishAs(fixture.ledger, key, fence, state);
          const expected = rowEssence(await lookupMust(fixture.ledger, key, "lookup"));
          for (let i = 0; i < 3; i++) {
            const row = mustBeExisting(
              await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect)),
              `re-claim #${i} of a ${state} ${effect} row`,
            );
            mustEqual(rowEssence(row), expected, `row returned to re-claim #${i} of a ${state} row`);
          }
        }
      }
    }),
};

export const releasedRowReclaimed: LedgerCheckSpec = {
  rule: "LEDGER-3",
  name: "a released row is claimed again by a new claim (takeover: false)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        await fixture.ledger.release(key, fence);
        const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "claim after release");
        must(!again.takeover, "a claim of a released row is not a takeover");
        await mustBeStored(fixture, key, { state: "in_flight", fence: again.fence, owner: "owner-b" }, "row after re-claim");
      }
    }),
};

export const restartKeepsRows: LedgerCheckSpec = {
  rule: "LEDGER-3",
  name: "a fresh instance over the same store sees every row unchanged (restart)",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const keys: string[] = [];
      for (const state of ["in_flight", "completed", "failed", "unknown", "released"] as const) {
        for (const effect of EFFECTS) {
          const key = ctx.key();
          keys.push(key);
          const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
          if (state !== "in_flight") await finishAs(fixture.ledger, key, fence, state);
        }
      }
      const before = await Promise.all(keys.map(async (k) => rowEssence(await fixture.ledger.lookup(k))));
      const reopened = await fixture.reopen();
      for (const [i, key] of keys.entries()) {
        mustEqual(rowEssence(await reopened.lookup(key)), before[i], `row ${short(key)} seen after restart`);
      }
    }),
};

/** Every check of this file, in order. */
export const TRANSITIONS_CHECKS: readonly LedgerCheckSpec[] = [absentKeyHasNoRow, ownerFinishesRow, terminalRowsNeverClaimable, releasedRowReclaimed, restartKeepsRows];
