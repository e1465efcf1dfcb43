/**
 * LEDGER-25 (only when the ledger offers listExpiredInFlight and the subject declares it):
 * exactly the in-flight rows whose lease expired at least olderThanMs ago on the ledger's clock,
 * oldest expiry first, at most limit, and no row changed. Expired claims nobody claims again are
 * otherwise invisible; an operator or a reconciler relies on this list to find them.
 */
import type { InFlightRow, Ledger } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, show } from "../../failure.js";
import { LEASE_MS, claimNew, claimRequest, describeRow, mustBeClaimed, mustBeExisting, rowEssence, short, sleep, withFixture } from "../support.js";
import { type LedgerCheckSpec, finishAs, leaseOf, snapshot } from "./common.js";

/** The ledger's listExpiredInFlight; the check is not applicable without it (CAPABILITY_WORDS). */
function lister(ledger: Ledger): (options?: { olderThanMs?: number; limit?: number }) => Promise<InFlightRow[]> {
  const list = ledger.listExpiredInFlight;
  if (typeof list !== "function") throw new ConformanceFailure("the subject declares listExpiredInFlight but ledger.listExpiredInFlight is not a function");
  return (options) => list.call(ledger, options);
}

function keysOf(rows: unknown, what: string): string[] {
  must(Array.isArray(rows), `${what}: listExpiredInFlight must return an array, got ${show(rows)}`);
  return (rows as InFlightRow[]).map((r) => r.key);
}

function named(keys: readonly string[], names: ReadonlyMap<string, string>): string {
  return `[${keys.map((k) => names.get(k) ?? `unexpected ${short(k)}`).join(", ")}]`;
}

/** A claim whose lease ends at its claim (leaseMs 0, LEDGER-29): expired when granted (a lease is live only before leaseExpiresAt). */
async function claimExpiring(ledger: Ledger, key: string, owner: string): Promise<number> {
  return mustBeClaimed(await ledger.claim(claimRequest(key, owner, "keyed_write", 0)), `claim ${short(key)} with leaseMs 0`).fence;
}

export const expiredInFlightListedExactly: LedgerCheckSpec = {
  rule: "LEDGER-25",
  name: "listExpiredInFlight returns exactly the in-flight rows whose lease expired, of either effect class: never a live one (also one renewed after it expired), nor a completed, failed, unknown or released row; and it changes none of them",
  needs: ["listExpiredInFlight"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = lister(fixture.ledger);
      const names = new Map<string, string>();
      const key = (label: string) => {
        const k = ctx.key(label);
        names.set(k, label);
        return k;
      };
      const expired = [key("expired keyed_write"), key("expired unkeyed_write")];
      await claimNew(fixture.ledger, expired[0]!, "owner-a", "keyed_write");
      await claimNew(fixture.ledger, expired[1]!, "owner-a", "unkeyed_write");
      for (const k of expired) await fixture.raw.expireLease(k);
      const others: string[] = [];
      for (const effect of ["keyed_write", "unkeyed_write"] as const) {
        const live = key(`live ${effect}`);
        await claimNew(fixture.ledger, live, "owner-a", effect);
        const renewed = key(`renewed ${effect}`);
        const fence = await claimNew(fixture.ledger, renewed, "owner-a", effect);
        await fixture.raw.expireLease(renewed);
        await fixture.ledger.renew(renewed, fence, LEASE_MS);
        others.push(live, renewed);
      }
      for (const state of ["completed", "failed", "unknown", "released"] as const) {
        const k = key(state);
        await finishAs(fixture.ledger, k, await claimNew(fixture.ledger, k, "owner-a", "unkeyed_write"), state);
        others.push(k);
      }
      const all = [...expired, ...others];
      const before = await Promise.all(all.map((k) => snapshot(fixture, k)));
      for (const [what, options] of [["listExpiredInFlight()", undefined], ["listExpiredInFlight({ olderThanMs: 0 })", { olderThanMs: 0 }]] as const) {
        const rows = await list(options);
        const got = keysOf(rows, what);
        mustEqual(new Set(got).size, got.length, `${what}: no row listed twice ${named(got, names)}`);
        must(
          got.length === expired.length && expired.every((k) => got.includes(k)),
          `${what} listed ${named(got, names)}, expected exactly the expired in-flight rows ${named(expired, names)}`,
        );
        for (const row of rows) {
          const seen = await fixture.ledger.lookup(row.key);
          mustEqual(rowEssence(row), rowEssence(seen), `${what}: the listed row ${names.get(row.key)} is the row lookup returns`);
          mustEqual(leaseOf(row), leaseOf(seen!), `${what}: the listed row ${names.get(row.key)} carries its lease`);
        }
      }
      for (const [i, k] of all.entries()) mustEqual(await snapshot(fixture, k), before[i], `row ${names.get(k)} after listExpiredInFlight (it MUST NOT change any row)`);
      // Listing acted on nothing: the expired unkeyed_write claim is settled by the next claim, as LEDGER-7 says.
      const settled = mustBeExisting(await fixture.ledger.claim(claimRequest(expired[1]!, "owner-b", "unkeyed_write")), "a claim of the listed expired unkeyed_write row");
      must(settled.state === "unknown" && settled.reason === "lease_expired", `the claim after listing must turn the expired unkeyed_write row unknown (lease_expired), got ${describeRow(settled)}`);
    }),
};

const APART_MS = 15;

export const expiredInFlightOldestFirst: LedgerCheckSpec = {
  rule: "LEDGER-25",
  name: `listExpiredInFlight lists the oldest expiry first and at most limit: claims with leaseMs 0 made ${APART_MS} ms apart, and one expired with the hook after them, come back in that order; limit 2 gives the first two`,
  needs: ["listExpiredInFlight"],
  waitsMs: 4 * APART_MS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = lister(fixture.ledger);
      const names = new Map<string, string>();
      const order: string[] = [];
      for (const label of ["third-by-key", "second-by-key", "first-by-key"]) {
        const k = ctx.key(label);
        names.set(k, `expired #${order.length + 1}`);
        order.push(k);
        await claimExpiring(fixture.ledger, k, `owner-${order.length}`);
        await sleep(APART_MS);
      }
      const last = ctx.key("hook");
      names.set(last, `expired #4 (hook)`);
      await claimNew(fixture.ledger, last, "owner-4", "keyed_write");
      await sleep(APART_MS);
      await fixture.raw.expireLease(last);
      order.push(last);
      const rows = await list();
      const got = keysOf(rows, "listExpiredInFlight()");
      mustEqual(named(got, names), named(order, names), "listExpiredInFlight(): the rows, oldest expiry first");
      for (let i = 1; i < rows.length; i++) {
        must(leaseOf(rows[i - 1]!)! <= leaseOf(rows[i]!)!, `listExpiredInFlight(): leaseExpiresAt ${show(leaseOf(rows[i - 1]!))} listed before ${show(leaseOf(rows[i]!))}: oldest expiry first`);
      }
      const page = keysOf(await list({ limit: 2 }), "listExpiredInFlight({ limit: 2 })");
      mustEqual(named(page, names), named(order.slice(0, 2), names), "listExpiredInFlight({ limit: 2 }): at most limit rows, the oldest expiries");
      const one = keysOf(await list({ olderThanMs: 0, limit: 1 }), "listExpiredInFlight({ olderThanMs: 0, limit: 1 })");
      mustEqual(named(one, names), named(order.slice(0, 1), names), "listExpiredInFlight({ olderThanMs: 0, limit: 1 })");
    }),
};

const EXPIRED_FOR_MS = 400;
const OLDER_THAN_MS = 150;
const AN_HOUR_MS = 60 * 60 * 1000;

export const expiredInFlightOlderThan: LedgerCheckSpec = {
  rule: "LEDGER-25",
  name: `listExpiredInFlight({ olderThanMs }) counts on the ledger's clock: a lease that ended ${EXPIRED_FOR_MS} ms ago or more is listed for olderThanMs ${OLDER_THAN_MS}, no row for olderThanMs of an hour, and never a live one (a unit slip or a sign slip fails)`,
  needs: ["listExpiredInFlight"],
  waitsMs: EXPIRED_FOR_MS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = lister(fixture.ledger);
      const names = new Map<string, string>();
      const old = ctx.key("old");
      names.set(old, `expired ${EXPIRED_FOR_MS} ms ago`);
      await claimExpiring(fixture.ledger, old, "owner-a");
      await sleep(EXPIRED_FOR_MS);
      const recent = ctx.key("recent");
      names.set(recent, "expired just now");
      await claimNew(fixture.ledger, recent, "owner-b", "keyed_write");
      await fixture.raw.expireLease(recent);
      const live = ctx.key("live");
      names.set(live, "live");
      await claimNew(fixture.ledger, live, "owner-c", "unkeyed_write");
      const none = keysOf(await list({ olderThanMs: AN_HOUR_MS }), `listExpiredInFlight({ olderThanMs: ${AN_HOUR_MS} })`);
      mustEqual(named(none, names), "[]", `listExpiredInFlight({ olderThanMs: ${AN_HOUR_MS} }): no lease here ended an hour ago`);
      const some = keysOf(await list({ olderThanMs: OLDER_THAN_MS }), `listExpiredInFlight({ olderThanMs: ${OLDER_THAN_MS} })`);
      must(some.includes(old), `listExpiredInFlight({ olderThanMs: ${OLDER_THAN_MS} }) listed ${named(some, names)}: the claim whose lease ended ${EXPIRED_FOR_MS} ms ago or more must be listed`);
      must(!some.includes(live), `listExpiredInFlight({ olderThanMs: ${OLDER_THAN_MS} }) listed ${named(some, names)}: a live claim is never listed`);
      // Whether the row expired "just now" is old enough by the time the ledger reads its clock depends on timing: not judged.
    }),
};

/** Every check of this file, in order. */
const BOUNDARY_ROUNDS = 8;

export const expiredInFlightAtItsEnd: LedgerCheckSpec = {
  rule: "LEDGER-25",
  name: `listExpiredInFlight({ olderThanMs: 0 }) lists a lease from the instant it ends: a claim with leaseMs 0, listed at once (usually within its own millisecond), is listed, ${BOUNDARY_ROUNDS} times in a row (a cutoff compared with "<" leaves it out)`,
  needs: ["listExpiredInFlight"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = lister(fixture.ledger);
      for (let round = 0; round < BOUNDARY_ROUNDS; round++) {
        const key = ctx.key();
        await claimExpiring(fixture.ledger, key, `owner-${round}`);
        const listed = keysOf(await list({ olderThanMs: 0, limit: 1000 }), `round ${round}: listExpiredInFlight({ olderThanMs: 0 })`);
        must(listed.includes(key), `round ${round}: listExpiredInFlight({ olderThanMs: 0 }) right after a claim with leaseMs 0 did not list it: its lease ended at its claim, so it expired 0 ms or more ago`);
      }
    }),
};

const REVERSED_ROWS = 6;
const HOOK_APART_MS = 5;

export const expiredInFlightSortedBeforeLimit: LedgerCheckSpec = {
  rule: "LEDGER-25",
  name: `listExpiredInFlight sorts before it applies limit: ${REVERSED_ROWS} claims expired with the hook in the reverse of the order they were made (${HOOK_APART_MS} ms apart) come back latest-claimed first, and limit 3 gives the three oldest expiries, not the first three rows the store holds`,
  needs: ["listExpiredInFlight"],
  waitsMs: REVERSED_ROWS * HOOK_APART_MS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = lister(fixture.ledger);
      const made: string[] = [];
      const names = new Map<string, string>();
      for (let i = 0; i < REVERSED_ROWS; i++) {
        const key = ctx.key(`made-${i}`);
        names.set(key, `claim #${i + 1}`);
        made.push(key);
        await claimNew(fixture.ledger, key, `owner-${i}`, "keyed_write");
      }
      // The last one claimed expires first: a store that keeps rows in claim (or key) order and cuts the page before sorting lists the wrong ones.
      const expiredOrder = [...made].reverse();
      for (const key of expiredOrder) {
        await fixture.raw.expireLease(key);
        await sleep(HOOK_APART_MS);
      }
      const all = keysOf(await list({ limit: 1000 }), "listExpiredInFlight({ limit: 1000 })");
      mustEqual(named(all, names), named(expiredOrder, names), "listExpiredInFlight({ limit: 1000 }): every expired row, oldest expiry first");
      const page = keysOf(await list({ limit: 3 }), "listExpiredInFlight({ limit: 3 })");
      mustEqual(named(page, names), named(expiredOrder.slice(0, 3), names), "listExpiredInFlight({ limit: 3 }): the three oldest expiries (limit applies after the sort)");
    }),
};

const FINISHED_BEFORE = 130;
const EXPIRED_AFTER = 70;

export const expiredInFlightBeyondOnePage: LedgerCheckSpec = {
  rule: "LEDGER-25",
  name: `listExpiredInFlight finds every expired claim however many rows the store holds: ${EXPIRED_AFTER} claims with leaseMs 0 made after ${FINISHED_BEFORE} finished rows are all listed with limit 1000, and limit 50 gives the 50 oldest (a scan of one page of the store, its cursor not followed, misses them)`,
  needs: ["listExpiredInFlight"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const list = lister(fixture.ledger);
      for (let i = 0; i < FINISHED_BEFORE; i++) {
        const key = ctx.key(`finished-${i}`);
        await finishAs(fixture.ledger, key, await claimNew(fixture.ledger, key, "owner-done", "keyed_write"), "completed");
      }
      const expired: string[] = [];
      for (let i = 0; i < EXPIRED_AFTER; i++) {
        const key = ctx.key(`expired-${i}`);
        expired.push(key);
        await claimExpiring(fixture.ledger, key, `owner-${i}`);
      }
      const rows = await list({ limit: 1000 });
      const got = keysOf(rows, "listExpiredInFlight({ limit: 1000 })");
      const missing = expired.filter((k) => !got.includes(k));
      must(missing.length === 0 && got.length === EXPIRED_AFTER, `listExpiredInFlight({ limit: 1000 }) listed ${got.length} rows, ${EXPIRED_AFTER - missing.length} of the ${EXPIRED_AFTER} expired claims (missing e.g. ${missing.slice(0, 3).map(short).join(", ")}): every in-flight row whose lease expired must be listed, not those of one page of the store`);
      for (let i = 1; i < rows.length; i++) {
        must(leaseOf(rows[i - 1]!)! <= leaseOf(rows[i]!)!, `listExpiredInFlight({ limit: 1000 }): leaseExpiresAt ${show(leaseOf(rows[i - 1]!))} listed before ${show(leaseOf(rows[i]!))}: oldest expiry first`);
      }
      const page = await list({ limit: 50 });
      mustEqual(page.length, 50, "listExpiredInFlight({ limit: 50 }) with 70 expired claims: the number of rows");
      const cut = leaseOf(rows[49]!)!;
      for (const row of page) must(leaseOf(row)! <= cut, `listExpiredInFlight({ limit: 50 }) listed ${short(row.key)} (lease ${show(leaseOf(row))}), later than the 50th oldest expiry ${show(cut)}`);
    }),
};

export const EXPIRED_IN_FLIGHT_CHECKS: readonly LedgerCheckSpec[] = [expiredInFlightListedExactly, expiredInFlightOldestFirst, expiredInFlightOlderThan, expiredInFlightAtItsEnd, expiredInFlightSortedBeforeLimit, expiredInFlightBeyondOnePage];
