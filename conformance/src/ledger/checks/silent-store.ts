/**
 * LEDGER-12 against a store that stops answering: every operation settles within the bound the
 * adapter documents "whatever the store does (paused, partitioned, refusing, slow)", and past it
 * rejects with ledger_unavailable and reports nothing as done. The refused-connection checks
 * (unavailability.ts) cannot see an adapter without a bound of its own: every driver reports a
 * refusal at once. Here the kit's SilenceProxy sits between an instance and the store and goes
 * silent: bytes are accepted, nothing answers, on pooled connections and on new ones.
 *
 * Each check opens one silent window and starts every operation the ledger offers in it at once, so
 * a conforming subject spends about one bound there. The deadline (bound + slack) is the check's
 * verdict on "did it settle", not a measure of speed: a conforming operation rejects at its bound.
 */
import type { ClaimRequest, Ledger } from "@dispatch-once/core";
import { ConformanceFailure, codeOf, describeError, must, show } from "../../failure.js";
import type { LedgerFixture, LedgerSubject } from "../../types.js";
import type { LedgerCheckContext } from "../context.js";
import { startSilenceProxy, type SilenceProxy } from "../silence-proxy.js";
import { claimNew, claimRequest, describeRow, mustBeClaimed, short } from "../support.js";
import { DECLINED, type LedgerCheckSpec } from "./common.js";

/** Fixed part of the slack past the declared bound: timer latency on a loaded host, not the adapter's time. */
export const SILENT_STORE_SLACK_MS = 1_000;

/** The slack the checks allow past `operationBoundMs`: 1,000 ms plus a tenth of the bound. */
export function silentStoreSlackMs(operationBoundMs: number): number {
  return SILENT_STORE_SLACK_MS + Math.ceil(operationBoundMs / 10);
}

/** After heal(), how long the check waits for operations that had not settled (they are already failures). */
const AFTER_HEAL_WAIT_MS = 2_000;

/** The subject's declared bound (validated when the checks are built; checked again for a direct caller). */
export function declaredOperationBound(subject: LedgerSubject): number {
  const bound = subject.limits?.operationBoundMs;
  if (typeof bound !== "number" || !Number.isFinite(bound) || bound <= 0) {
    throw new ConformanceFailure(`the subject declares silentStore but limits.operationBoundMs is ${show(bound)}: declare the adapter's documented bound on every operation (LEDGER-12), as configured in raw.openVia's instance`);
  }
  return bound;
}

type Outcome = { settled: false } | { settled: true; ok: true; value: unknown; ms: number } | { settled: true; ok: false; error: unknown; ms: number };

/** What one operation did in the silent window, and how to judge its row after heal(). */
interface SilentOperation {
  name: string;
  start(ledger: Ledger): Promise<unknown>;
  /** An answer that is true without the store (a sweep that leaves expiry to the store's own TTLs removes nothing, 0). */
  mayAnswer?(value: unknown): boolean;
  /** After heal: the row agrees with "nothing happened" or with this operation applied late (LEDGER-12 allows the store to apply it). */
  afterHeal?(fixture: LedgerFixture): Promise<void>;
}

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

function oneLine(text: string): string {
  const flat = text.replace(/\s*\n\s*/g, " ");
  return flat.length > 160 ? `${flat.slice(0, 160)}…` : flat;
}

/** Races `promise` against `ms`; the timer is always cleared. */
async function settleWithin(promise: Promise<unknown>, ms: number): Promise<Outcome> {
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<Outcome>((resolve) => {
    timer = setTimeout(() => resolve({ settled: false }), ms);
  });
  try {
    return await Promise.race([
      promise.then(
        (value): Outcome => ({ settled: true, ok: true, value, ms: performance.now() - started }),
        (error: unknown): Outcome => ({ settled: true, ok: false, error, ms: performance.now() - started }),
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs `ops` at once on `ledger` while the proxy is silent; throws one failure naming every
 * operation that did not reject with ledger_unavailable by bound + slack. Heals the proxy in any
 * case and gives the ones still pending a short while to settle (so destroy() does not wait on them).
 */
async function judgeSilentWindow(ops: SilentOperation[], ledger: Ledger, proxy: SilenceProxy, bound: number, when: string): Promise<void> {
  const limit = bound + silentStoreSlackMs(bound);
  const started = ops.map((op) => {
    try {
      return op.start(ledger);
    } catch (error) {
      return Promise.reject(error);
    }
  });
  let outcomes: Outcome[];
  try {
    outcomes = await Promise.all(started.map((p) => settleWithin(p, limit)));
  } finally {
    proxy.heal();
  }
  const problems: string[] = [];
  for (const [i, outcome] of outcomes.entries()) {
    const name = ops[i]!.name;
    if (!outcome.settled) problems.push(`${name} did not settle within ${limit} ms (the declared operationBoundMs ${bound} + ${limit - bound} ms slack)`);
    else if (outcome.ok && ops[i]!.mayAnswer?.(outcome.value) === true) continue;
    else if (outcome.ok) problems.push(`${name} answered ${oneLine(show(outcome.value))} after ${Math.round(outcome.ms)} ms, though the store answered nothing: it must reject with ledger_unavailable`);
    else if (codeOf(outcome.error) !== "ledger_unavailable") problems.push(`${name} rejected with ${describeError(outcome.error)} after ${Math.round(outcome.ms)} ms, expected code ledger_unavailable`);
  }
  if (outcomes.some((o) => !o.settled)) {
    await settleWithin(Promise.allSettled(started), AFTER_HEAL_WAIT_MS);
  } else {
    // Nothing of the window is left pending: the rejections were observed, so no unhandled one remains.
    await Promise.allSettled(started);
  }
  if (problems.length > 0) {
    throw new ConformanceFailure(`with the store silent ${when} (connections open, nothing answered), ${problems.length} of ${ops.length} operations broke LEDGER-12's bound:\n  - ${problems.join("\n  - ")}`);
  }
}

/** A fixture and the kit's proxy in front of its store; the proxy closes after destroy() (which may talk through it). */
async function withSilenceableStore(subject: LedgerSubject, fn: (fixture: LedgerFixture, proxy: SilenceProxy, openVia: () => Promise<Ledger>, bound: number) => Promise<void>): Promise<void> {
  const bound = declaredOperationBound(subject);
  const fixture = await subject.create();
  let proxy: SilenceProxy | undefined;
  try {
    const { storeAddress, openVia } = fixture.raw;
    must(typeof storeAddress === "function" && typeof openVia === "function", "the subject declares silentStore but its fixture lacks raw.storeAddress or raw.openVia");
    const target = await storeAddress.call(fixture.raw);
    proxy = await startSilenceProxy(target);
    const via = proxy.address;
    const limit = bound + silentStoreSlackMs(bound);
    const open = async () => {
      const outcome = await settleWithin(openVia.call(fixture.raw, via), limit);
      if (!outcome.settled) throw new ConformanceFailure(`raw.openVia did not return within ${limit} ms: it must not wait for the store (the kit may call it while the store is silent)`);
      if (!outcome.ok) throw outcome.error;
      return outcome.value as Ledger;
    };
    await fn(fixture, proxy, open, bound);
  } finally {
    proxy?.heal();
    try {
      await fixture.destroy();
    } finally {
      await proxy?.close();
    }
  }
}

async function judgeAfterHeal(ops: SilentOperation[], fixture: LedgerFixture): Promise<void> {
  for (const op of ops) await op.afterHeal?.(fixture);
}

export const silentStoreAfterConnecting: LedgerCheckSpec = {
  rule: "LEDGER-12",
  name: "with the store silent after the first operation (pooled connections open, nothing answers), every operation rejects with ledger_unavailable within the declared bound, and after heal no row shows more than the operation itself applied late",
  needs: ["silentStore"],
  run: (ctx) =>
    withSilenceableStore(ctx.subject, async (fixture, proxy, openVia, bound) => {
      const ledger = await openVia();
      // The claims made here are the instance's first operations: its connections are open and pooled.
      const ops = await prepare(ctx, ledger);
      proxy.silence();
      await judgeSilentWindow(ops, ledger, proxy, bound, "after the instance connected");
      await judgeAfterHeal(ops, fixture);
    }),
};

export const silentStoreBeforeConnecting: LedgerCheckSpec = {
  rule: "LEDGER-12",
  name: "with the store silent before the instance's first connection (connecting never completes), every operation rejects with ledger_unavailable within the declared bound, and after heal no row shows more than the operation itself applied late",
  needs: ["silentStore"],
  run: (ctx) =>
    withSilenceableStore(ctx.subject, async (fixture, proxy, openVia, bound) => {
      const ops = await prepare(ctx, fixture.ledger);
      proxy.silence();
      const ledger = await openVia();
      await judgeSilentWindow(ops, ledger, proxy, bound, "before the instance's first connection");
      await judgeAfterHeal(ops, fixture);
    }),
};

/** Every check of this file, in order. */
export const SILENT_STORE_CHECKS: readonly LedgerCheckSpec[] = [silentStoreAfterConnecting, silentStoreBeforeConnecting];
