/**
 * LEDGER-6, LEDGER-7 and LEDGER-9 measured, not only declared: the lease a claim or a renewal
 * returns is leaseMs on the store's clock, counted from now, and it runs out in real time. The
 * hooks (raw.expireLease) jump past a deadline; these checks read the deadlines and wait for them.
 */
import { newClaimId, type ClaimResult } from "@dispatch-once/core";
import { CheckInconclusive } from "../../errors/check-inconclusive.js";
import { ConformanceFailure, must, mustRejectWith, show } from "../../failure.js";
import { claimRequest, describeRow, mustBeClaimed, mustBeExisting, sleep, withFixture } from "../support.js";
import { EFFECTS, type LedgerCheckSpec, leaseOf, lookupMust } from "./common.js";

/**
 * How far two readings of the store's clock may disagree with the kit's own measure of the time
 * between them: millisecond rounding and the store's clock running a hair off the kit's. A unit
 * slip is off by a factor of 1000, far outside it.
 */
export const CLOCK_TOLERANCE_MS = 50;

/** A lease relative to leaseMs, in words: "×1000 (seconds read as milliseconds?)". */
function factorHint(actual: number, expected: number): string {
  if (expected === 0 || !Number.isFinite(actual)) return "";
  const ratio = actual / expected;
  if (ratio > 500 && ratio < 2000) return " — about 1000 times too long: leaseMs is read as seconds";
  if (ratio > 0.0005 && ratio < 0.002) return " — about 1000 times too short: the lease is kept in seconds, or leaseMs divided by 1000";
  return "";
}

function leaseOfClaim(result: ClaimResult, what: string): number {
  const claimed = mustBeClaimed(result, what);
  must(Number.isSafeInteger(claimed.leaseExpiresAt), `${what}: leaseExpiresAt must be an integer of store-clock milliseconds, got ${show(claimed.leaseExpiresAt)}`);
  return claimed.leaseExpiresAt;
}

export const leaseLength: LedgerCheckSpec = {
  rule: "LEDGER-6",
  name: "a lease ends leaseMs after its claim on the store clock: claims with leaseMs 60,000 and 600,000 get leases 540 s apart, each leaseMs after its claimedAt (a unit slip either way fails)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const short = ctx.key("60s");
        const long = ctx.key("600s");
        const t0 = performance.now();
        const a = leaseOfClaim(await fixture.ledger.claim(claimRequest(short, "owner-a", effect, 60_000)), `claim with leaseMs 60,000 (${effect})`);
        const b = leaseOfClaim(await fixture.ledger.claim(claimRequest(long, "owner-b", effect, 600_000)), `claim with leaseMs 600,000 (${effect})`);
        const between = performance.now() - t0;
        const diff = b - a;
        if (diff < 540_000 - CLOCK_TOLERANCE_MS || diff > 540_000 + between + CLOCK_TOLERANCE_MS) {
          throw new ConformanceFailure(
            `${effect}: claims with leaseMs 60,000 and 600,000, made ${Math.round(between)} ms apart, got leases ${a} and ${b}: ${diff} ms apart, expected 540,000 ms (plus at most the ${Math.round(between)} ms between them)${factorHint(diff, 540_000)}`,
          );
        }
        for (const [key, leaseMs, lease] of [[short, 60_000, a], [long, 600_000, b]] as const) {
          const row = await lookupMust(fixture.ledger, key, `lookup after a claim with leaseMs ${leaseMs}`);
          const claimedAt = Number(row.claimedAt);
          must(Number.isSafeInteger(claimedAt), `${effect}: the row's claimedAt must be store-clock milliseconds, got ${show(row.claimedAt)}`);
          const length = lease - claimedAt;
          // Both are the store's clock at the claim, normally read once; a second reading of it is a few ms later.
          if (Math.abs(length - leaseMs) > Math.max(250, CLOCK_TOLERANCE_MS)) {
            throw new ConformanceFailure(
              `${effect}: a claim with leaseMs ${leaseMs} was claimed at ${claimedAt} with a lease ending ${lease}: ${length} ms, expected ${leaseMs}${factorHint(length, leaseMs)}`,
            );
          }
        }
      }
    }),
};

/** Real time between the claim and the renewal: long enough that a renewal counted from the claim time shows. */
const RENEW_AFTER_MS = 600;

export const renewalFromNow: LedgerCheckSpec = {
  rule: "LEDGER-9",
  name: `renew sets the lease to now + leaseMs on the store clock: renewed ${RENEW_AFTER_MS} ms after the claim it ends that much later, and renewing with leaseMs 120,000 instead of 60,000 adds 60 s (a renewal counted from the claim time, or in other units, fails)`,
  waitsMs: RENEW_AFTER_MS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const keys = EFFECTS.map((effect) => ({ effect, key: ctx.key(effect) }));
      const claims = await Promise.all(
        keys.map(async ({ effect, key }) => {
          const before = performance.now();
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, 60_000)), `claim (${effect})`);
          return { effect, key, claimed, before, after: performance.now() };
        }),
      );
      await sleep(RENEW_AFTER_MS);
      for (const { effect, key, claimed, before, after } of claims) {
        const renewStart = performance.now();
        const first = await fixture.ledger.renew(key, claimed.fence, 60_000);
        const renewEnd = performance.now();
        must(Number.isSafeInteger(first.leaseExpiresAt), `${effect}: renew must return leaseExpiresAt in store-clock milliseconds, got ${show(first.leaseExpiresAt)}`);
        const moved = first.leaseExpiresAt - claimed.leaseExpiresAt;
        const atLeast = renewStart - after;
        const atMost = renewEnd - before;
        if (moved < atLeast - CLOCK_TOLERANCE_MS || moved > atMost + CLOCK_TOLERANCE_MS) {
          const why =
            Math.abs(moved) <= CLOCK_TOLERANCE_MS
              ? ": the renewal is counted from the claim time, not from now, so a renewing owner's lease never moves and it loses the row to a takeover"
              : factorHint(moved, atLeast);
          throw new ConformanceFailure(
            `${effect}: renew(leaseMs 60,000) ${Math.round(atLeast)} ms after a claim with leaseMs 60,000 moved the lease from ${claimed.leaseExpiresAt} to ${first.leaseExpiresAt} (${moved} ms); it must move by the time that passed, ${Math.round(atLeast)} to ${Math.round(atMost)} ms${why}`,
          );
        }
        const again0 = performance.now();
        const second = await fixture.ledger.renew(key, claimed.fence, 120_000);
        const again1 = performance.now();
        const added = second.leaseExpiresAt - first.leaseExpiresAt;
        if (added < 60_000 - CLOCK_TOLERANCE_MS || added > 60_000 + (again1 - renewStart) + CLOCK_TOLERANCE_MS) {
          throw new ConformanceFailure(
            `${effect}: renewing with leaseMs 120,000 right after renewing with 60,000 moved the lease by ${added} ms, expected 60,000 (plus at most ${Math.round(again1 - again0)} ms)${factorHint(added, 60_000)}`,
          );
        }
        const row = await lookupMust(fixture.ledger, key, "lookup after renew");
        must(row.state === "in_flight" && row.leaseExpiresAt === second.leaseExpiresAt, `${effect}: the stored lease after renew is ${show((row as { leaseExpiresAt?: unknown }).leaseExpiresAt)}, the renewal returned ${second.leaseExpiresAt}`);
      }
    }),
};

/** A lease short enough to wait out, long enough that the claim right after it is certainly inside it. */
const SHORT_LEASE_MS = 600;
const LAPSE_MARGIN_MS = 150;

export const leaseLapsesInRealTime: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: `a lease runs out in real time on the store clock, with no hook: a ${SHORT_LEASE_MS} ms claim is live at once and is acted on ${SHORT_LEASE_MS + LAPSE_MARGIN_MS} ms later (keyed_write taken over, unkeyed_write unknown)`,
  waitsMs: SHORT_LEASE_MS + LAPSE_MARGIN_MS,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      await Promise.all(
        EFFECTS.map(async (effect) => {
          const key = ctx.key(effect);
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, SHORT_LEASE_MS)), `claim with leaseMs ${SHORT_LEASE_MS} (${effect})`);
          const claimedBy = performance.now();
          const live = await fixture.ledger.claim(claimRequest(key, "owner-b", effect, SHORT_LEASE_MS));
          const seenAfter = performance.now() - claimedBy;
          if ((live.outcome === "claimed" || live.row.state !== "in_flight") && seenAfter >= SHORT_LEASE_MS - CLOCK_TOLERANCE_MS) {
            // The claim that should land inside the lease came back after it (a slow store, a stalled kit): its answer says nothing (CONF-5).
            throw new CheckInconclusive(`${effect}: the claim meant to land inside a ${SHORT_LEASE_MS} ms lease came back ${Math.round(seenAfter)} ms after it began: the store answers too slowly for this check to conclude`);
          }
          if (live.outcome === "claimed" || live.row.state !== "in_flight") {
            throw new ConformanceFailure(
              `${effect}: a claim ${Math.round(performance.now() - claimedBy)} ms into a ${SHORT_LEASE_MS} ms lease got ${live.outcome === "claimed" ? `claimed (fence ${live.fence}, takeover ${live.takeover})` : describeRow(live.row)}: the lease was already over, so it is far shorter than leaseMs`,
              { violates: "LEDGER-6" },
            );
          }
          await sleep(claimedBy + SHORT_LEASE_MS + LAPSE_MARGIN_MS - performance.now());
          const late = await fixture.ledger.claim(claimRequest(key, "owner-c", effect, SHORT_LEASE_MS));
          const what = `${effect}: a claim ${Math.round(performance.now() - claimedBy)} ms after a claim with leaseMs ${SHORT_LEASE_MS}`;
          if (effect === "keyed_write") {
            const taken = mustBeClaimed(late, `${what} (the lease is over: a takeover)`);
            must(taken.takeover && taken.fence === claimed.fence + 1, `${what}: expected a takeover with fence ${claimed.fence + 1}, got fence ${taken.fence}, takeover ${taken.takeover}`);
          } else {
            const row = mustBeExisting(late, `${what} (the lease is over: the row turns unknown)`);
            must(row.state === "unknown" && row.reason === "lease_expired", `${what}: expected the row unknown with reason lease_expired, got ${describeRow(row)}: the lease does not run out in real time`);
          }
        }),
      );
    }),
};

/** Every check of this file, in order. */
/** The longest lease a ledger accepts (LEDGER-29): 366 days. */
const MAX_LEASE_MS = 366 * 24 * 60 * 60 * 1000;

export const leaseLimit: LedgerCheckSpec = {
  rule: "LEDGER-29",
  name: "claim and renew accept leaseMs from 0 to 366 days and round a fraction up; a longer, negative, non-finite or non-number leaseMs is refused with invalid_ledger_input and writes nothing",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledger = fixture.ledger;
      const bad: Array<[string, unknown]> = [
        ["366 days + 1 ms", MAX_LEASE_MS + 1],
        ["-1", -1],
        ["NaN", Number.NaN],
        ["Infinity", Number.POSITIVE_INFINITY],
        ["a string", "60000"],
      ];
      for (const [what, leaseMs] of bad) {
        const key = ctx.key("bad-lease");
        await mustRejectWith(ledger.claim(claimRequest(key, "owner-a", "keyed_write", leaseMs as number)), "invalid_ledger_input", `claim with leaseMs ${what}`);
        must((await ledger.lookup(key)) === undefined, `a claim refused for leaseMs ${what} must write nothing, got a row`);
      }
      const longest = ctx.key("max-lease");
      leaseOfClaim(await ledger.claim(claimRequest(longest, "owner-a", "keyed_write", MAX_LEASE_MS)), "claim with leaseMs of exactly 366 days");
      const fractional = ctx.key("fractional-lease");
      const claimed = mustBeClaimed(await ledger.claim(claimRequest(fractional, "owner-a", "unkeyed_write", 60_000.4)), "claim with leaseMs 60,000.4");
      must(Number.isSafeInteger(claimed.leaseExpiresAt), `leaseMs 60,000.4: leaseExpiresAt must be whole milliseconds, got ${show(claimed.leaseExpiresAt)}`);
      const row = await lookupMust(ledger, fractional, "lookup after a claim with leaseMs 60,000.4");
      const length = claimed.leaseExpiresAt - Number(row.claimedAt);
      must(length >= 60_001 && length <= 60_001 + 250, `leaseMs 60,000.4 must be rounded up to 60,001 ms, got a lease of ${length} ms after claimedAt`);
      for (const [what, leaseMs] of bad) {
        await mustRejectWith(ledger.renew(fractional, claimed.fence, leaseMs as number), "invalid_ledger_input", `renew with leaseMs ${what}`);
      }
      const after = await lookupMust(ledger, fractional, "lookup after refused renewals");
      must(after.state === "in_flight" && (after as { leaseExpiresAt?: number }).leaseExpiresAt === claimed.leaseExpiresAt, `refused renewals must not change the lease, got ${describeRow(after)}`);
      // renew rounds a fraction up as claim does: every stored time is whole milliseconds (LEDGER-29, LEDGER-11).
      const renewed = await ledger.renew(fractional, claimed.fence, 60_000.4);
      must(Number.isSafeInteger(renewed.leaseExpiresAt), `renew with leaseMs 60,000.4: leaseExpiresAt must be whole milliseconds (the fraction rounded up), got ${show(renewed.leaseExpiresAt)}`);
      const stored = leaseOf(await lookupMust(ledger, fractional, "lookup after a renewal with leaseMs 60,000.4"));
      must(stored === renewed.leaseExpiresAt, `renew with leaseMs 60,000.4: the stored lease ${show(stored)} must be the whole-millisecond lease renew returned, ${show(renewed.leaseExpiresAt)}`);
    }),
};

export const renewalShortens: LedgerCheckSpec = {
  rule: "LEDGER-9",
  name: "renew sets the lease to now + leaseMs even when that is earlier than its current end: a claim with leaseMs 600,000 renewed at once with 60,000 ends about 540 s sooner (a renewal that only ever extends, GREATEST or PEXPIRE GT, fails)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key(effect);
        const before = performance.now();
        const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, 600_000)), `claim (${effect})`);
        const renewed = await fixture.ledger.renew(key, claimed.fence, 60_000);
        const elapsed = performance.now() - before;
        const shortenedBy = claimed.leaseExpiresAt - renewed.leaseExpiresAt;
        if (shortenedBy > 540_000 + CLOCK_TOLERANCE_MS || shortenedBy < 540_000 - elapsed - CLOCK_TOLERANCE_MS) {
          throw new ConformanceFailure(
            `${effect}: renew(leaseMs 60,000) right after a claim with leaseMs 600,000 moved the lease from ${claimed.leaseExpiresAt} to ${renewed.leaseExpiresAt} (${-shortenedBy} ms); it must end at now + 60,000, about 540,000 ms earlier (within ${Math.round(elapsed)} ms)${shortenedBy <= 0 ? ": a renewal must not keep a longer lease than it asks for" : ""}`,
          );
        }
        const row = await lookupMust(fixture.ledger, key, "lookup after renew");
        must(row.state === "in_flight" && row.leaseExpiresAt === renewed.leaseExpiresAt, `${effect}: the stored lease after renew is ${show((row as { leaseExpiresAt?: unknown }).leaseExpiresAt)}, the renewal returned ${renewed.leaseExpiresAt}`);
      }
    }),
};

export const claimAnswersStoredLease: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: "a claim that takes the row answers the lease it stored: a keyed_write takeover and a re-claim after release answer leaseExpiresAt equal to the stored row's, leaseMs after its claimedAt, never the expired lease it replaced; a claim sent again with its claim id answers its restarted lease",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const answered = async (what: string, key: string, result: ClaimResult, leaseMs: number | undefined) => {
        const claimed = mustBeClaimed(result, what);
        const row = await lookupMust(fixture.ledger, key, `${what}: lookup`);
        must(row.state === "in_flight", `${what}: the row is ${describeRow(row)}, expected in flight`);
        if (claimed.leaseExpiresAt !== row.leaseExpiresAt) {
          throw new ConformanceFailure(`${what} answered leaseExpiresAt ${show(claimed.leaseExpiresAt)} but stored ${row.leaseExpiresAt}: the owner schedules its renewals and its deadline from the answer${claimed.leaseExpiresAt < row.leaseExpiresAt ? " (it answered an earlier lease: the one it replaced?)" : ""}`);
        }
        if (leaseMs !== undefined) must(row.leaseExpiresAt - row.claimedAt === leaseMs, `${what}: the stored lease ends ${row.leaseExpiresAt - row.claimedAt} ms after its claimedAt, expected leaseMs ${leaseMs}`);
      };
      const taken = ctx.key("takeover");
      mustBeClaimed(await fixture.ledger.claim(claimRequest(taken, "owner-old", "keyed_write", 60_000)), "first claim");
      await fixture.raw.expireLease(taken);
      await answered("a keyed_write takeover", taken, await fixture.ledger.claim(claimRequest(taken, "owner-new", "keyed_write", 60_000)), 60_000);
      const released = ctx.key("reclaim");
      const first = mustBeClaimed(await fixture.ledger.claim(claimRequest(released, "owner-old", "keyed_write", 60_000)), "first claim");
      await fixture.ledger.release(released, first.fence);
      await answered("a re-claim after release", released, await fixture.ledger.claim(claimRequest(released, "owner-new", "keyed_write", 90_000)), 90_000);
      const resent = ctx.key("resent");
      const claimId = newClaimId();
      mustBeClaimed(await fixture.ledger.claim({ ...claimRequest(resent, "owner-a", "keyed_write", 60_000), claimId }), "first claim with a claim id");
      await fixture.raw.expireLease(resent);
      await answered("a claim sent again with its claim id after its lease ran out", resent, await fixture.ledger.claim({ ...claimRequest(resent, "owner-a", "keyed_write", 60_000), claimId }), undefined);
    }),
};

export const LEASE_LENGTH_CHECKS: readonly LedgerCheckSpec[] = [leaseLength, leaseLapsesInRealTime, renewalFromNow, leaseLimit, renewalShortens, claimAnswersStoredLease];
