/**
 * LEDGER-12 against a store that stops answering: every operation settles within the bound the
 * adapter documents "whatever the store does (paused, partitioned, refusing, slow)", and past it
 * rejects with ledger_unavailable and reports nothing as done. The refused-connection checks
 * (unavailability.ts) cannot see an adapter without a bound of its own: every driver reports a
 * refusal at once. Here the kit's SilenceProxy sits between an instance and the store and goes
 * silent: bytes are accepted, nothing answers, on pooled connections and on new ones.
 *
 * Each check opens one silent window and starts every operation the ledger offers in it at once, so
 * a conforming subject spends about one bound there; then, still silent, the instance's close(),
 * an operation LEDGER-12 bounds too (it may resolve: dropping connections needs no answer), on its
 * own so that it cannot end the others' waits. The deadline (bound + slack) is the check's
 * verdict on "did it settle", not a measure of speed: a conforming operation rejects at its bound.
 */
import type { ClaimRequest, Ledger } from "@dispatch-once/core";
import { must } from "../../failure.js";
import { checkedOperationBound, runSilentCheck, type SilentOperation as WindowOperation, type SilentRule } from "../../silent/window.js";
import type { LedgerFixture, LedgerSubject } from "../../types.js";
import type { LedgerCheckContext } from "../context.js";
import { claimNew, claimRequest, describeRow, mustBeClaimed, short } from "../support.js";
import { DECLINED, type LedgerCheckSpec } from "./common.js";

// The slack is the kit's one for both store levels (TURN-21's checks use it too).
export { SILENT_STORE_SLACK_MS, silentStoreSlackMs } from "../../silent/window.js";

const RULE: SilentRule = { rule: "LEDGER-12", code: "ledger_unavailable", operations: "operations" };

/** The subject's declared bound (validated when the checks are built; checked again for a direct caller). */
export function declaredOperationBound(subject: LedgerSubject): number {
  return checkedOperationBound(subject.limits?.operationBoundMs, RULE.rule);
}

/** What one operation did in the silent window, and how to judge its row after heal(). */
type SilentOperation = WindowOperation<Ledger, LedgerFixture>;

const SILENCED_OWNER = "owner-silenced";
const SILENCED_RESULT = '{"late":"silenced complete"}';

/** One key per operation, so that none depends on another's outcome; made through `ledger` before the silence. */
async function prepare(ctx: LedgerCheckContext, ledger: Ledger): Promise<SilentOperation[]> {
  const ops: SilentOperation[] = [];
  const claimId = `silenced-${ctx.key("claim-id").slice(0, 16)}`;
  const claimKey = ctx.key("claim");
  const request: ClaimRequest = { ...claimRequest(claimKey, SILENCED_OWNER, "unkeyed_write"), claimId };
  ops.push({
    name: "claim",
    start: (l) => l.claim(request),
    async afterHeal(fixture) {
      // An orphan row written late is the claimant's own, and its claim id takes it (LEDGER-26, DISPATCH-16).
      const row = await fixture.raw.read(claimKey);
      must(
        row === undefined || (row.state === "in_flight" && row.owner === SILENCED_OWNER),
        `after heal, the claim that rejected left ${describeRow(row)} at ${short(claimKey)}; only no row or its own in-flight row may be there`,
      );
      mustBeClaimed(await fixture.ledger.claim(request), `after heal, the rejected claim sent again with its claim id ${claimId}`);
    },
  });
  const owned = async (label: string) => {
    const key = ctx.key(label);
    return { key, fence: await claimNew(ledger, key, "owner-a", "unkeyed_write") };
  };
  const ownerOp = async (name: string, run: (l: Ledger, key: string, fence: number) => Promise<unknown>, late: (row: Record<string, unknown>, fence: number) => boolean) => {
    const { key, fence } = await owned(name);
    ops.push({
      name,
      start: (l) => run(l, key, fence),
      async afterHeal(fixture) {
        const row = await fixture.raw.read(key);
        const untouched = row !== undefined && row.state === "in_flight" && Number(row.fence) === fence && row.owner === "owner-a";
        must(
          row !== undefined && (untouched || late(row, fence)),
          `after heal, ${name} that rejected left ${describeRow(row)} at ${short(key)}: only the claim as it was (in_flight fence=${fence}) or ${name} applied late may be there`,
        );
      },
    });
  };
  await ownerOp("complete", (l, k, f) => l.complete(k, f, SILENCED_RESULT), (r, f) => r.state === "completed" && Number(r.fence) === f && r.result === SILENCED_RESULT);
  await ownerOp("fail", (l, k, f) => l.fail(k, f, DECLINED), (r, f) => r.state === "failed" && Number(r.fence) === f);
  await ownerOp("markUnknown", (l, k, f) => l.markUnknown(k, f, "silenced"), (r, f) => r.state === "unknown" && Number(r.fence) === f);
  await ownerOp("release", (l, k, f) => l.release(k, f), (r, f) => r.state === "released" && Number(r.fence) === f);
  await ownerOp("renew", (l, k, f) => l.renew(k, f, 60_000), () => false);
  const done = await owned("lookup");
  await ledger.complete(done.key, done.fence, '{"id":"pay_1"}');
  const unchanged = (key: string, label: string) => async (fixture: LedgerFixture) => {
    const row = await fixture.raw.read(key);
    must(row?.state === "completed" && row.result === '{"id":"pay_1"}', `after heal, ${label} left ${describeRow(row)} at ${short(key)}, expected the completed row it read`);
  };
  ops.push({ name: "lookup", start: (l) => l.lookup(done.key), afterHeal: unchanged(done.key, "lookup") });
  // A sweep that leaves expiry to the store (Redis TTLs) never talks to it, and its 0 is true; any
  // other count is a removal the silent store cannot have made.
  ops.push({ name: "sweep", start: (l) => l.sweep(), mayAnswer: (n) => n === 0 });
  // The optional methods the ledger offers: each is a ledger operation LEDGER-12 bounds.
  if (typeof ledger.listExpiredInFlight === "function") ops.push({ name: "listExpiredInFlight", start: (l) => l.listExpiredInFlight!({ olderThanMs: 0, limit: 10 }) });
  if (typeof ledger.listRows === "function") ops.push({ name: "listRows", start: (l) => l.listRows!({ limit: 10 }) });
  if (typeof ledger.auditTrail === "function") ops.push({ name: "auditTrail", start: (l) => l.auditTrail!(done.key), afterHeal: unchanged(done.key, "auditTrail") });
  if (typeof ledger.resolve === "function") {
    const open = await owned("resolve");
    await ledger.markUnknown(open.key, open.fence, "tool_error: socket hang up");
    ops.push({
      name: "resolve",
      start: (l) => l.resolve!({ key: open.key, resolution: { outcome: "completed", result: SILENCED_RESULT }, actor: "operator-ana", reason: "silenced" }),
      async afterHeal(fixture) {
        const row = await fixture.raw.read(open.key);
        must(row?.state === "unknown" || (row?.state === "completed" && row.result === SILENCED_RESULT), `after heal, resolve that rejected left ${describeRow(row)} at ${short(open.key)}: only the unknown row or the resolution applied late may be there`);
      },
    });
  }
  if (typeof ledger.retire === "function") {
    const key = ctx.key("retire");
    ops.push({
      name: "retire",
      start: (l) => l.retire!(key, `retired-${key.slice(0, 12)}`),
      async afterHeal(fixture) {
        const row = await fixture.raw.read(key);
        must(row === undefined, `after heal, retire that rejected left ${describeRow(row)} at ${short(key)}: retiring a claim id creates no row (LEDGER-28)`);
      },
    });
  }
  return ops;
}

/** One of the two checks on `ctx`'s subject (the window's shape: runSilentCheck). */
function silentCheck(ctx: LedgerCheckContext, when: "after" | "before"): Promise<void> {
  const { subject } = ctx;
  return runSilentCheck<Ledger, LedgerFixture>({ rule: RULE, bound: declaredOperationBound(subject), when, create: () => subject.create(), primary: (f) => f.ledger, prepare: (ledger) => prepare(ctx, ledger) });
}

export const silentStoreAfterConnecting: LedgerCheckSpec = {
  rule: "LEDGER-12",
  name: "with the store silent after the first operation (pooled connections open, nothing answers), every operation rejects with ledger_unavailable within the declared bound, then close (on its own) resolves or rejects with ledger_unavailable within it too, and after heal no row shows more than the operation itself applied late",
  needs: ["silentStore"],
  run: (ctx) => silentCheck(ctx, "after"),
};

export const silentStoreBeforeConnecting: LedgerCheckSpec = {
  rule: "LEDGER-12",
  name: "with the store silent before the instance's first connection (connecting never completes), every operation rejects with ledger_unavailable within the declared bound, then close (on its own) resolves or rejects with ledger_unavailable within it too, and after heal no row shows more than the operation itself applied late",
  needs: ["silentStore"],
  run: (ctx) => silentCheck(ctx, "before"),
};

/** Every check of this file, in order. */
export const SILENT_STORE_CHECKS: readonly LedgerCheckSpec[] = [silentStoreAfterConnecting, silentStoreBeforeConnecting];
