/**
 * LEDGER-13 and LEDGER-19 measured on the store's clock with real waits on a short retention: a
 * finished row stays for its whole retention counted from when it finished, and goes after it; an
 * in-flight row is never retention's to remove, however old. The hooks (raw.expireRetention) jump
 * past the deadline; these checks wait for it.
 */
import { CheckInconclusive } from "../../errors/check-inconclusive.js";
import { ConformanceFailure, must, show } from "../../failure.js";
import { LEASE_MS, claimNew, claimRequest, describeRow, mustBeClaimed, mustBeExisting, mustBeStored, requestFor, sleep, withFixture } from "../support.js";
import { EFFECTS, type LedgerCheckSpec, finishAs } from "./common.js";
import { CLOCK_TOLERANCE_MS } from "./lease-length.js";

/** Retention of the check that a row is kept: long enough to look at the row well inside it. */
const KEPT_RETENTION_MS = 1_200;
/** Rows are claimed this long before they finish: a retention counted from the claim runs out early. */
const CLAIMED_BEFORE_MS = Math.round(KEPT_RETENTION_MS * 0.6);
/** When the row is looked at, after it finished: "just before retention ends", leaving time for the reads. */
const LOOK_AT_MS = Math.round(KEPT_RETENTION_MS * 0.58);

const TERMINAL = ["completed", "failed", "unknown"] as const;

/**
 * Runs the reads a check makes inside a retention counted from `since` (when the rows finished).
 * They mean something only if they happen inside it: reads that end past it (the store answers too
 * slowly, the kit's process stalled) cannot conclude (CheckInconclusive, CONF-5), and neither can a
 * finding one of them made by then, since the retention running out explains it. A finding made
 * inside the retention is the verdict, as before.
 */
async function withinRetention(since: number, retentionMs: number, reads: () => Promise<void>): Promise<void> {
  const tooSlow = (found?: ConformanceFailure) => {
    const done = Math.round(performance.now() - since);
    const seen = found === undefined ? "" : ` (what a read saw by then says nothing of the subject: ${found.message})`;
    return new CheckInconclusive(`the reads within retention ended ${done} ms after the rows finished, past the retention of ${retentionMs} ms: the store answers too slowly for this check to conclude${seen}`);
  };
  const late = () => performance.now() - since > retentionMs - CLOCK_TOLERANCE_MS;
  try {
    await reads();
  } catch (error) {
    if (ConformanceFailure.isInstance(error) && late()) throw tooSlow(error);
    throw error;
  }
  if (late()) throw tooSlow();
}

export const retentionKept: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: `a finished row is kept for its whole retention, counted from when it finished: with retentionMs ${KEPT_RETENTION_MS}, rows claimed ${CLAIMED_BEFORE_MS} ms before they finish are all there ${LOOK_AT_MS} ms after they finished (lookup, raw.read, claim, sweep), and finishedAt is when they finished`,
  waitsMs: CLAIMED_BEFORE_MS + LOOK_AT_MS,
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const claimStart = performance.now();
        const rows = await Promise.all(
          [...TERMINAL, "released" as const].map(async (state) => {
            const key = ctx.key(state);
            return { state, key, fence: await claimNew(fixture.ledger, key, "owner-a", "keyed_write") };
          }),
        );
        const claimEnd = performance.now();
        await sleep(CLAIMED_BEFORE_MS);
        const finishStart = performance.now();
        await Promise.all(rows.map((r) => finishAs(fixture.ledger, r.key, r.fence, r.state)));
        const finishEnd = performance.now();
        // finishedAt is the store's clock when the row finished: what retention is counted from.
        for (const r of rows) {
          const row = await fixture.ledger.lookup(r.key);
          if (row === undefined || row.state === "in_flight") throw new ConformanceFailure(`the ${r.state} row is ${describeRow(row)} right after it finished`);
          const gap = Number(row.finishedAt) - Number(row.claimedAt);
          const low = finishStart - claimEnd - CLOCK_TOLERANCE_MS;
          const high = finishEnd - claimStart + CLOCK_TOLERANCE_MS;
          must(
            Number.isSafeInteger(Number(row.finishedAt)) && gap >= low && gap <= high,
            `the ${r.state} row finished ${Math.round(finishStart - claimEnd)}-${Math.round(finishEnd - claimStart)} ms after it was claimed, but its finishedAt - claimedAt is ${show(row.finishedAt)} - ${show(row.claimedAt)} = ${gap} ms: finishedAt must be the store's clock when it finished, which retention is counted from`,
          );
        }
        await withinRetention(finishStart, KEPT_RETENTION_MS, async () => {
          await sleep(finishStart + LOOK_AT_MS - performance.now());
          const lookedAt = Math.round(performance.now() - finishStart);
          const hint = ` (retention ${KEPT_RETENTION_MS} ms; the row was claimed ${Math.round(finishStart - claimStart)} ms before it finished, so retention counted from the claim, or in other units, runs out here)`;
          for (const r of rows) {
            const row = await fixture.ledger.lookup(r.key);
            if (row?.state !== r.state) throw new ConformanceFailure(`${lookedAt} ms after it finished, lookup of the ${r.state} row finds ${describeRow(row)}${hint}`);
            const stored = await fixture.raw.read(r.key);
            if (stored?.state !== r.state) throw new ConformanceFailure(`${lookedAt} ms after it finished, the stored ${r.state} row (raw.read) is ${describeRow(stored)}${hint}`);
            if (r.state !== "released") {
              const seen = await fixture.ledger.claim(claimRequest(r.key, "owner-b", "keyed_write"));
              if (seen.outcome === "claimed" || seen.row.state !== r.state) {
                throw new ConformanceFailure(
                  `${lookedAt} ms after it finished, a claim of the ${r.state} row got ${seen.outcome === "claimed" ? `claimed (fence ${seen.fence}): the call would run again` : describeRow(seen.row)}${hint}`,
                );
              }
            }
          }
          const removed = await fixture.ledger.sweep();
          if (removed !== 0) throw new ConformanceFailure(`sweep ${Math.round(performance.now() - finishStart)} ms after the rows finished removed ${show(removed)} rows; none had passed its retention${hint}`);
          for (const r of rows) {
            const row = await fixture.ledger.lookup(r.key);
            if (row?.state !== r.state) throw new ConformanceFailure(`after a sweep within retention, lookup of the ${r.state} row finds ${describeRow(row)}${hint}`);
          }
        });
      },
      { retentionMs: KEPT_RETENTION_MS },
    ),
};

const ENDS_RETENTION_MS = 600;
const PAST_MARGIN_MS = 200;

export const retentionEnds: LedgerCheckSpec = {
  rule: "LEDGER-19",
  name: `retention ends when it should: with retentionMs ${ENDS_RETENTION_MS}, completed, failed and unknown rows are claimable as first claims ${ENDS_RETENTION_MS + PAST_MARGIN_MS} ms after they finished, without a sweep`,
  waitsMs: ENDS_RETENTION_MS + PAST_MARGIN_MS,
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const rows = await Promise.all(
          TERMINAL.map(async (state) => {
            const key = ctx.key(state);
            const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
            await finishAs(fixture.ledger, key, fence, state);
            return { state, key, fence };
          }),
        );
        const finished = performance.now();
        await sleep(finished + ENDS_RETENTION_MS + PAST_MARGIN_MS - performance.now());
        for (const r of rows) {
          const own = requestFor("owner-late");
          const late = await fixture.ledger.claim(claimRequest(r.key, "owner-late", "keyed_write", LEASE_MS, own));
          const what = `a claim ${Math.round(performance.now() - finished)} ms after the ${r.state} row finished (retention ${ENDS_RETENTION_MS} ms)`;
          if (late.outcome !== "claimed") {
            throw new ConformanceFailure(`${what} got existing ${describeRow(late.row)}: the row outlives its retention (is retentionMs read as seconds?), so a replay past the horizon the operator set is still answered from it`);
          }
          // A forgotten key behaves as never claimed: no takeover, the claimant's request, fence 1 (or the next fence if the row was not yet removed).
          must(!late.takeover && (late.fence === 1 || late.fence === r.fence + 1), `${what}: expected a first claim (takeover false, fence 1 or ${r.fence + 1}), got fence ${late.fence}, takeover ${late.takeover}`);
          must(late.request === own, `${what}: a claim of a forgotten row stores and returns its own request, got ${show(late.request)}`);
        }
      },
      { retentionMs: ENDS_RETENTION_MS },
    ),
};

/**
 * A retention shorter than a second, kept to the millisecond: an adapter that hands the store whole
 * seconds rounded down (Redis EXPIRE for PEXPIRE, an INTERVAL in seconds) keeps a 900 ms retention
 * for 0 s, so the rows it just finished are gone before anyone replays them. No wait: the rows are
 * looked at right after they finished, well inside the retention (900 ms: rounded down, 0 s).
 */
const SUBSECOND_RETENTION_MS = 900;

export const retentionNotRoundedDown: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: `a retention below a second is kept to the millisecond, not rounded down to whole seconds: with retentionMs ${SUBSECOND_RETENTION_MS}, completed, failed, unknown and released rows are there right after they finished (lookup, raw.read, a claim of each finished one, sweep)`,
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const rows = await Promise.all(
          [...TERMINAL, "released" as const].map(async (state) => {
            const key = ctx.key(state);
            return { state, key, fence: await claimNew(fixture.ledger, key, "owner-a", "keyed_write") };
          }),
        );
        // Finished together and read together: everything below happens well inside the retention.
        const finished = performance.now();
        await Promise.all(rows.map((r) => finishAs(fixture.ledger, r.key, r.fence, r.state)));
        await withinRetention(finished, SUBSECOND_RETENTION_MS, async () => {
          const hint = ` (retention ${SUBSECOND_RETENTION_MS} ms: is it handed to the store in whole seconds, rounded down to 0?)`;
          await Promise.all(
            rows.map(async (r) => {
              const row = await fixture.ledger.lookup(r.key);
              if (row?.state !== r.state) throw new ConformanceFailure(`right after it finished, lookup of the ${r.state} row finds ${describeRow(row)}${hint}`);
              const stored = await fixture.raw.read(r.key);
              if (stored?.state !== r.state) throw new ConformanceFailure(`right after it finished, the stored ${r.state} row (raw.read) is ${describeRow(stored)}${hint}`);
              if (r.state === "released") return;
              const seen = await fixture.ledger.claim(claimRequest(r.key, "owner-b", "keyed_write"));
              if (seen.outcome === "claimed" || seen.row.state !== r.state) {
                throw new ConformanceFailure(`right after it finished, a claim of the ${r.state} row got ${seen.outcome === "claimed" ? `claimed (fence ${seen.fence}): the call would run again` : describeRow(seen.row)}${hint}`);
              }
            }),
          );
          const removed = await fixture.ledger.sweep();
          if (removed !== 0) throw new ConformanceFailure(`sweep right after the rows finished removed ${show(removed)} rows; none had passed its retention${hint}`);
        });
      },
      { retentionMs: SUBSECOND_RETENTION_MS },
    ),
};

const OLD_RETENTION_MS = 200;
/** A lease that runs out by itself, with no hook, well before the check looks: lease + retention < the wait. */
const SHORT_LEASE_MS = 50;

export const sweepSparesOldInFlight: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: `sweep never removes an in-flight row older than the retention: with retentionMs ${OLD_RETENTION_MS}, rows claimed ${OLD_RETENTION_MS + 100} ms earlier (live, with a lease expired by the hook, and with a ${SHORT_LEASE_MS} ms lease that ran out by itself) survive a sweep and are still in flight to their owner and to other claimants (an in-flight row stored with a time to live of lease + retention is gone)`,
  waitsMs: OLD_RETENTION_MS + 100,
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const held: Array<{ key: string; fence: number; effect: (typeof EFFECTS)[number]; expired: boolean; byItself: boolean }> = [];
        for (const effect of EFFECTS) {
          for (const [expired, byItself] of [[false, false], [true, false], [true, true]] as const) {
            const key = ctx.key(`${effect}-${expired}-${byItself}`);
            const fence = byItself
              ? mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, SHORT_LEASE_MS)), `claim ${key} for ${SHORT_LEASE_MS} ms`).fence
              : await claimNew(fixture.ledger, key, "owner-a", effect);
            held.push({ key, effect, expired, byItself, fence });
          }
        }
        const done = ctx.key("done");
        await fixture.ledger.complete(done, await claimNew(fixture.ledger, done, "owner-a", "keyed_write"), "true");
        await sleep(OLD_RETENTION_MS + 100);
        for (const h of held) if (h.expired && !h.byItself) await fixture.raw.expireLease(h.key);
        const removed = await fixture.ledger.sweep();
        must(Number.isSafeInteger(removed) && removed >= 0 && removed <= 1, `sweep reported ${show(removed)} rows removed; only 1 finished row had passed its retention of ${OLD_RETENTION_MS} ms`);
        for (const h of held) {
          const label = `${h.byItself ? `a ${SHORT_LEASE_MS} ms` : h.expired ? "an expired" : "a live"} ${h.effect} in-flight row claimed ${OLD_RETENTION_MS + 100} ms ago (retention ${OLD_RETENTION_MS} ms)`;
          await mustBeStored(fixture, h.key, { state: "in_flight", fence: h.fence, owner: "owner-a" }, `${label}, after sweep`);
          const seen = await fixture.ledger.claim(claimRequest(h.key, "owner-b", h.effect));
          if (!h.expired) {
            const row = mustBeExisting(seen, `a claim of ${label}`);
            must(row.state === "in_flight" && row.fence === h.fence, `a claim of ${label} got ${describeRow(row)}: an in-flight row is not retention's to forget`);
            await fixture.ledger.complete(h.key, h.fence, '"finished late"');
          } else if (h.effect === "keyed_write") {
            const taken = mustBeClaimed(seen, `a claim of ${label}`);
            must(taken.takeover && taken.fence === h.fence + 1, `a claim of ${label} must take it over with fence ${h.fence + 1}, got fence ${taken.fence}, takeover ${taken.takeover} (a row forgotten by retention would start again at 1)`);
          } else {
            const row = mustBeExisting(seen, `a claim of ${label}`);
            must(row.state === "unknown" && row.reason === "lease_expired", `a claim of ${label} must turn it unknown, got ${describeRow(row)}`);
          }
        }
      },
      { retentionMs: OLD_RETENTION_MS },
    ),
};

/** Every check of this file, in order. */
export const RETENTION_LENGTH_CHECKS: readonly LedgerCheckSpec[] = [retentionKept, retentionNotRoundedDown, sweepSparesOldInFlight, retentionEnds];
