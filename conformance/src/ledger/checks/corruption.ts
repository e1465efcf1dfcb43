/**
 * LEDGER-11: an unreadable row raises ledger_corrupt and is never treated as absent.
 */
import { must, mustRejectWith } from "../../failure.js";
import { claimNew, claimRequest, withFixture } from "../support.js";
import { type LedgerCheckSpec, OWNER_OPS, ownerOp } from "./common.js";

export const corruptFinishedRowRaises: LedgerCheckSpec = {
  rule: "LEDGER-11",
  name: "a corrupt finished row raises ledger_corrupt on claim and lookup, every time",
  needs: ["corruption"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
      await fixture.ledger.complete(key, fence, '{"charged":true}');
      await fixture.raw.corrupt!(key);
      for (let i = 0; i < 2; i++) {
        await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "unkeyed_write")), "ledger_corrupt", `claim #${i} of a corrupt row`);
        await mustRejectWith(fixture.ledger.lookup(key), "ledger_corrupt", `lookup #${i} of a corrupt row`);
      }
    }),
};

export const corruptInFlightRowRaises: LedgerCheckSpec = {
  rule: "LEDGER-11",
  name: "a corrupt in-flight row raises ledger_corrupt on claim and lookup",
  needs: ["corruption"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      await fixture.raw.corrupt!(key);
      await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "ledger_corrupt", "claim of a corrupt in-flight row");
      await mustRejectWith(fixture.ledger.lookup(key), "ledger_corrupt", "lookup of a corrupt in-flight row");
    }),
};

export const corruptRowNeverOverwritten: LedgerCheckSpec = {
  rule: "LEDGER-11",
  name: "fenced operations and sweep never overwrite or remove a corrupt row",
  needs: ["corruption"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const op of OWNER_OPS) {
        const key = ctx.key(op);
        const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
        await fixture.raw.corrupt!(key);
        let outcome: string;
        try {
          await ownerOp(fixture.ledger, op, key, fence);
          outcome = "ok";
        } catch (error) {
          outcome = (error as { code?: string }).code ?? String(error);
        }
        must(outcome === "ledger_corrupt" || outcome === "stale_claim", `${op} on a corrupt row returned ${outcome}, expected ledger_corrupt`);
        await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "ledger_corrupt", `claim after ${op} on a corrupt row`);
      }
      const key = ctx.key("sweep");
      const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
      await fixture.ledger.complete(key, fence, "1");
      await fixture.raw.corrupt!(key);
      try {
        await fixture.ledger.sweep();
      } catch (error) {
        must((error as { code?: string }).code === "ledger_corrupt", `sweep over a corrupt row raised ${String(error)}`);
      }
      await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write")), "ledger_corrupt", "claim after a sweep over a corrupt row");
    }),
};

export const corruptRowPastRetentionRaises: LedgerCheckSpec = {
  rule: "LEDGER-11",
  name: "a corrupt row whose retention has passed still raises ledger_corrupt on claim and lookup, never read as forgotten",
  needs: ["corruption"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      // Deciding "past retention, so forgotten" from the columns of a row that cannot be decoded
      // trusts what cannot be read: a row of another format version (a rolling upgrade) or a
      // damaged one whose retention column reads old is a completed payment, and the claim that
      // takes it for absent pays again. A store that itself removed the row (a TTL) and holds
      // the corrupt value written after it meets the check as a fresh corrupt row.
      for (const [label, effect, finish] of [
        ["completed", "keyed_write", (key: string, fence: number) => fixture.ledger.complete(key, fence, '{"charged":true}')],
        ["failed", "unkeyed_write", (key: string, fence: number) => fixture.ledger.fail(key, fence, { name: "ToolError", message: "card declined", code: "card_declined" })],
        ["unknown", "unkeyed_write", (key: string, fence: number) => fixture.ledger.markUnknown(key, fence, "tool_error")],
        ["released", "keyed_write", (key: string, fence: number) => fixture.ledger.release(key, fence)],
      ] as const) {
        const key = ctx.key(label);
        const fence = await claimNew(fixture.ledger, key, "owner-a", effect);
        await finish(key, fence);
        await fixture.raw.expireRetention(key);
        await fixture.raw.corrupt!(key);
        const what = `a ${label} row past its retention, then made unreadable`;
        await mustRejectWith(fixture.ledger.lookup(key), "ledger_corrupt", `lookup of ${what} (it is not absent: nothing that could be read forgot it)`);
        await mustRejectWith(fixture.ledger.claim(claimRequest(key, "owner-b", effect)), "ledger_corrupt", `claim of ${what} (it must not be taken as a first claim)`);
      }
    }),
};

/** Every check of this file, in order. */
export const CORRUPTION_CHECKS: readonly LedgerCheckSpec[] = [corruptFinishedRowRaises, corruptInFlightRowRaises, corruptRowNeverOverwritten, corruptRowPastRetentionRaises];
