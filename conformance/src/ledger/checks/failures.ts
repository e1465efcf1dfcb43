/**
 * LEDGER-8: failure dispositions: a definite failure replays, a release gives the claim back.
 */
import { must, mustEqual } from "../../failure.js";
import { TOOL_FOR, claimNew, claimRequest, describeRow, mustBeClaimed, mustBeExisting, mustBeStored, rowEssence, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, DECLINED, lookupMust } from "./common.js";

export const definiteFailureReplayed: LedgerCheckSpec = {
  rule: "LEDGER-8",
  name: "a definite failure is stored and replayed identically to every later claimant",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        await fixture.ledger.fail(key, fence, DECLINED);
        for (let i = 0; i < 3; i++) {
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect)), `claim #${i} after fail`);
          must(row.state === "failed", `claim #${i} after fail saw ${describeRow(row)}: the failure was not recorded`);
          mustEqual(row.error, DECLINED, `error replayed to claim #${i}`);
        }
        const raw = await mustBeStored(fixture, key, { state: "failed", fence }, "stored failed row");
        mustEqual(raw.error, DECLINED, "stored error");
      }
    }),
};

export const failureReplayedAfterRestart: LedgerCheckSpec = {
  rule: "LEDGER-8",
  name: "a failure is replayed identically after a restart",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
      await fixture.ledger.fail(key, fence, DECLINED);
      const reopened = await fixture.reopen();
      const row = mustBeExisting(await reopened.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim after restart");
      must(row.state === "failed", `after restart the row is ${describeRow(row)}`);
      mustEqual(row.error, DECLINED, "error after restart");
    }),
};

export const releasedClaimKeepsNoOutcome: LedgerCheckSpec = {
  rule: "LEDGER-8",
  name: "a released claim (not performed) is claimable again and keeps no outcome",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        await fixture.ledger.release(key, fence);
        const row = await lookupMust(fixture.ledger, key, "lookup after release");
        mustEqual(rowEssence(row), { key, state: "released", fence, effect, toolName: TOOL_FOR[effect] }, "released row");
        mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "claim after release");
      }
    }),
};

/** A failure as a tool reports it at length: a stack-like message of 4,000 characters, non-ASCII included, and details. */
const LONG_FAILURE = {
  name: "UpstreamRejectedError",
  message: `Zahlung abgelehnt – ${"détail «€» 東京 😀 ".repeat(220)}`.slice(0, 4000),
  code: "upstream_rejected",
  details: { reason: "x".repeat(600), lines: Array.from({ length: 40 }, (_, i) => `    at frame${i} (payments.ts:${i}:1)`) },
};

export const longFailureReplayed: LedgerCheckSpec = {
  rule: "LEDGER-8",
  name: "a definite failure with a 4,000-character message and long details is stored and replayed identically (a VARCHAR(255) message column cuts it)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
      await fixture.ledger.fail(key, fence, LONG_FAILURE);
      const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "claim after fail");
      must(row.state === "failed", `claim after fail saw ${describeRow(row)}: the failure was not recorded`);
      mustEqual(row.error, LONG_FAILURE, "the long error replayed to a later claimant");
      const looked = await lookupMust(fixture.ledger, key, "lookup after fail");
      mustEqual(looked.state === "failed" ? looked.error : undefined, LONG_FAILURE, "the long error via lookup");
      const raw = await mustBeStored(fixture, key, { state: "failed", fence }, "stored failed row");
      mustEqual(raw.error, LONG_FAILURE, "the stored long error");
    }),
};

/** Every check of this file, in order. */
export const FAILURES_CHECKS: readonly LedgerCheckSpec[] = [definiteFailureReplayed, failureReplayedAfterRestart, releasedClaimKeepsNoOutcome, longFailureReplayed];
