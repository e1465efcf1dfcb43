/**
 * Operations that meet in production and must be atomic against each other: a renewal fired by
 * the dispatcher's timer against the owner's completion, a claim that acts on an expiring lease
 * against the owner's completion (issued in both orders), and sweep against claims that re-create
 * the rows it is removing. Each pair is run in both orders, across instances when the subject is shared.
 */
import { newClaimId, type ClaimResult, type Ledger } from "@dispatch-once/core";
import { ConformanceFailure, codeOf, describeError, must } from "../../failure.js";
import type { LedgerFixture } from "../../types.js";
import type { LedgerCheckContext } from "../context.js";
import { claimNew, claimRequest, claimWithId, describeRow, mustBeClaimed, mustBeStored, withFixture } from "../support.js";
import { EFFECTS, type LedgerCheckSpec, finishAs, instances, lookupMust } from "./common.js";

/** The stable code an operation settled with, or "ok". */
async function outcomeOf(operation: Promise<unknown>): Promise<string> {
  try {
    await operation;
    return "ok";
  } catch (error) {
    return codeOf(error) ?? describeError(error);
  }
}

/** Starts `a` and `b` in that order, before awaiting either; returns their results in the same order. */
async function both<A, B>(a: () => Promise<A>, b: () => Promise<B>): Promise<[A, B]> {
  const pa = a();
  const pb = b();
  return [await pa, await pb];
}

/** Two instances to race through: two when the subject is shared across processes, else the one twice. */
async function pair(ctx: LedgerCheckContext, fixture: LedgerFixture): Promise<[Ledger, Ledger]> {
  const list = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 2) : [fixture.ledger, fixture.ledger];
  return [list[0]!, list[1]!];
}

const FINISHES = ["completed", "failed", "unknown", "released"] as const;
const RENEW_ROUNDS = 6;

export const renewRacingFinish: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: `a renewal racing its owner's complete, fail, markUnknown or release (the dispatcher renews from a timer) never undoes it: the finish succeeds, the renewal lands first or is refused with stale_claim, and the row ends finished (both orders, ${RENEW_ROUNDS} rounds each)`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [renewer, finisher] = await pair(ctx, fixture);
      for (const state of FINISHES) {
        for (let round = 0; round < RENEW_ROUNDS; round++) {
          const renewFirst = round % 2 === 0;
          const key = ctx.key(`${state}-${round}`);
          const fence = await claimNew(fixture.ledger, key, "owner-a", "keyed_write");
          const renew = () => outcomeOf(renewer.renew(key, fence, 60_000));
          const finish = () => outcomeOf(finishAs(finisher, key, fence, state));
          const [renewed, finished] = renewFirst ? await both(renew, finish) : await both(finish, renew).then(([f, r]) => [r, f] as const);
          const what = `round ${round} (${renewFirst ? "renew" : "finish"} issued first): renew -> ${renewed}, ${state === "completed" ? "complete" : state === "failed" ? "fail" : state === "unknown" ? "markUnknown" : "release"} -> ${finished}`;
          must(finished === "ok", `${what}: the owner's own finish was refused although only its renewal ran beside it`);
          must(renewed === "ok" || renewed === "stale_claim", `${what}: a renewal racing the finish must succeed (it came first) or be refused with stale_claim (it came after), not ${renewed}`);
          const row = await lookupMust(fixture.ledger, key, what);
          if (row.state !== state || row.fence !== fence) {
            throw new ConformanceFailure(`${what}: the row ends ${describeRow(row)}, expected ${state} fence=${fence}: the renewal wrote over the finished row, which a late renewal timer does in every run where it fires during the finish`);
          }
          await mustBeStored(fixture, key, { state, fence }, what);
          // The finished row behaves as finished: a replay sees it, a released one is claimable again.
          const next = await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write"));
          if (state === "released") must(next.outcome === "claimed" && next.fence === fence + 1, `${what}: a claim of the released row must win with fence ${fence + 1}, got ${next.outcome === "claimed" ? `fence ${next.fence}` : describeRow(next.row)}`);
          else must(next.outcome === "existing" && next.row.state === state, `${what}: a claim of the ${state} row must see it, got ${next.outcome === "claimed" ? `claimed fence ${next.fence}` : describeRow(next.row)}`);
        }
      }
    }),
};

const EXPIRY_ROUNDS = 5;

function describeClaim(result: ClaimResult): string {
  return result.outcome === "claimed" ? `claimed fence=${result.fence}${result.takeover ? " (takeover)" : ""}` : `existing ${describeRow(result.row)}`;
}

export const expiryRacingCompletion: LedgerCheckSpec = {
  rule: "LEDGER-7",
  name: `a claim acting on an expired lease racing the owner's complete, issued in both orders (complete then claim, claim then complete): exactly one wins — the completion, or the takeover (keyed_write) or unknown (unkeyed_write) — and the row agrees with it (${EXPIRY_ROUNDS} rounds each)`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [completer, claimer] = await pair(ctx, fixture);
      for (const effect of EFFECTS) {
        for (const first of ["complete", "claim"] as const) {
          for (let round = 0; round < EXPIRY_ROUNDS; round++) {
            const key = ctx.key(`${effect}-${first}-${round}`);
            const fence = await claimNew(fixture.ledger, key, "owner-old", effect);
            await fixture.raw.expireLease(key);
            const complete = () => outcomeOf(completer.complete(key, fence, '"zombie"'));
            const claim = () => claimer.claim(claimRequest(key, "owner-new", effect));
            const [completed, claimed] = first === "complete" ? await both(complete, claim) : await both(claim, complete).then(([c, d]) => [d, c] as const);
            const what = `${effect}, ${first} issued first, round ${round}: complete -> ${completed}; claim -> ${describeClaim(claimed)}`;
            const row = await lookupMust(fixture.ledger, key, what);
            if (completed === "ok") {
              // The completion won: the claim came after it and must see the completed row.
              if (claimed.outcome === "claimed" || claimed.row.state !== "completed") {
                throw new ConformanceFailure(
                  `${what}: both won — the owner's complete succeeded and the claim ${claimed.outcome === "claimed" ? "took the row over" : `saw ${describeRow(claimed.row)}`}; the row ends ${describeRow(row)}. ${effect === "unkeyed_write" ? "An effect that happened is recorded unknown, or a completed call is re-run" : "A completed call is re-run"}: the expiry must be decided atomically against the completion`,
                );
              }
              must(row.state === "completed" && row.fence === fence && row.result === '"zombie"', `${what}: the completion won, so the row must end completed fence=${fence}, got ${describeRow(row)}`);
              continue;
            }
            must(completed === "stale_claim", `${what}: the owner's complete of a row a claim acted on must be refused with stale_claim, not ${completed}`);
            if (effect === "keyed_write") {
              must(claimed.outcome === "claimed" && claimed.takeover && claimed.fence === fence + 1, `${what}: the completion lost, so the claim must have taken the row over with fence ${fence + 1}`);
              must(row.state === "in_flight" && row.fence === fence + 1 && row.owner === "owner-new", `${what}: the takeover won, so the row must end in flight for owner-new with fence ${fence + 1}, got ${describeRow(row)}`);
            } else {
              must(claimed.outcome === "existing" && claimed.row.state === "unknown", `${what}: the completion lost, so the claim must have turned the row unknown`);
              must(row.state === "unknown" && row.reason === "lease_expired" && row.fence === fence, `${what}: the expiry won, so the row must end unknown (lease_expired) fence=${fence}, got ${describeRow(row)}`);
            }
          }
        }
      }
    }),
};

const SWEEP_ROUNDS = 4;
const SWEEP_KEYS = 8;

export const sweepRacingClaims: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: `sweep racing claims that re-create the rows it is removing (${SWEEP_KEYS} rows past retention, ${SWEEP_ROUNDS} rounds, both orders) never removes a claimed row: every claim that won has its in-flight row`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [sweeper, claimer] = await pair(ctx, fixture);
      for (let round = 0; round < SWEEP_ROUNDS; round++) {
        const keys: Array<{ key: string; fence: number }> = [];
        for (let i = 0; i < SWEEP_KEYS; i++) {
          const key = ctx.key(`${round}-${i}`);
          const fence = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
          await fixture.ledger.complete(key, fence, '"old"');
          await fixture.raw.expireRetention(key);
          keys.push({ key, fence });
        }
        const sweepFirst = round % 2 === 0;
        const sweep = () => outcomeOf(sweeper.sweep());
        const claims = () => Promise.all(keys.map(({ key }, i) => claimer.claim(claimRequest(key, `owner-${i}`, "keyed_write"))));
        const [swept, claimed] = sweepFirst ? await both(sweep, claims) : await both(claims, sweep).then(([c, s]) => [s, c] as const);
        must(swept === "ok", `round ${round}: sweep raised ${swept}`);
        for (const [i, result] of claimed.entries()) {
          const { key, fence } = keys[i]!;
          const what = `round ${round} (${sweepFirst ? "sweep" : "claims"} issued first), key #${i}`;
          if (result.outcome !== "claimed") throw new ConformanceFailure(`${what}: a claim of a row past its retention got existing ${describeRow(result.row)}; it must be claimable`, { violates: "LEDGER-19" });
          must(!result.takeover && (result.fence === 1 || result.fence === fence + 1), `${what}: a claim of a row past retention is a first claim, got fence ${result.fence}, takeover ${result.takeover}`);
          const stored = await fixture.raw.read(key);
          if (stored?.state !== "in_flight" || Number(stored.fence) !== result.fence) {
            throw new ConformanceFailure(
              `${what}: the claim won (fence ${result.fence}) but the stored row is ${describeRow(stored)}: the concurrent sweep removed a row after it was claimed again (it decided on what it read earlier), so the claimed call runs with no row to protect it`,
            );
          }
        }
        // What sweep left is in flight; a second sweep must leave it too.
        await sweeper.sweep();
        for (const [i, result] of claimed.entries()) {
          if (result.outcome === "claimed") await mustBeStored(fixture, keys[i]!.key, { state: "in_flight", fence: result.fence }, `round ${round}, key #${i}, after a second sweep`);
        }
      }
    }),
};

const WIDE_SWEEP_KEYS = 8;
const WIDE_SWEEP_ROUNDS = 12;

export const sweepRacingClaimsWide: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: `sweep issued just after claims of the rows it is removing (${WIDE_SWEEP_KEYS} rows past retention, ${WIDE_SWEEP_ROUNDS} rounds) never removes a claimed row: a sweep that deletes the rows it selected without checking each again as it deletes it (one SQL statement whose DELETE joins the selected keys only, with no row lock taken) removes rows claimed while it runs`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [sweeper, claimer] = await pair(ctx, fixture);
      for (let round = 0; round < WIDE_SWEEP_ROUNDS; round++) {
        // Set up side by side: the rows are independent.
        const keys = await Promise.all(
          Array.from({ length: WIDE_SWEEP_KEYS }, async (_, i) => {
            const key = ctx.key(`wide-${round}-${i}`);
            const fence = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
            await fixture.ledger.complete(key, fence, '"old"');
            await fixture.raw.expireRetention(key);
            return key;
          }),
        );
        // The claims go out first and commit while the sweep's one statement runs: a window of
        // microseconds inside a server, which the check above (sweep first in half its rounds,
        // four rounds) missed against PostgreSQL; many short rounds hit it.
        const claims = Promise.all(keys.map((key, i) => claimer.claim(claimRequest(key, `owner-${i}`, "keyed_write"))));
        const swept = await outcomeOf(sweeper.sweep());
        const claimed = await claims;
        must(swept === "ok", `round ${round}: sweep raised ${swept}`);
        const rows = await Promise.all(keys.map((key) => fixture.raw.read(key)));
        for (const [i, result] of claimed.entries()) {
          const what = `round ${round}, key #${i}`;
          if (result.outcome !== "claimed") throw new ConformanceFailure(`${what}: a claim of a row past its retention got existing ${describeRow(result.row)}; it must be claimable`, { violates: "LEDGER-19" });
          const stored = rows[i];
          if (stored?.state !== "in_flight" || Number(stored.fence) !== result.fence) {
            throw new ConformanceFailure(
              `${what}: the claim won (fence ${result.fence}) but the stored row is ${describeRow(stored)}: the concurrent sweep removed a row after it was claimed again (it deleted what it had selected without checking the row again), so the claimed call runs with no row to protect it and the next claim of the key is a first claim`,
            );
          }
        }
      }
    }),
};

const CHURN_KEYS = 8;
const CHURN_CYCLES = 25;

export const sweepRacingClaimChurn: LedgerCheckSpec = {
  rule: "LEDGER-13",
  name: `sweep run again and again while claims re-create, finish and age the rows it removes (${CHURN_KEYS} keys, ${CHURN_CYCLES} cycles of claim, complete, retention passed) never removes a claimed row: every claim of a row past its retention wins and its owner's complete succeeds; a sweep that scans the store and deletes by name a row it read earlier, not by the version it judged (a key-value store's delete without the revision), removes rows claimed between its read and its delete`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [sweeper, claimer] = await pair(ctx, fixture);
      // The checks above issue every claim at the sweep's start, when a sweep that scans the
      // store row by row is still listing. Here each key is claimed, completed and aged past its
      // retention over and over while sweeps run back to back, so some claim lands between a
      // sweep's read of its row and that sweep's delete; nobody else claims these keys, so the
      // owner's complete can be refused only if the row was removed under it.
      let claimersDone = false;
      let sweeps = 0;
      const sweeping = (async () => {
        while (!claimersDone) {
          const swept = await outcomeOf(sweeper.sweep());
          must(swept === "ok", `sweep #${sweeps} raised ${swept}`);
          sweeps++;
          // Yield to timers and I/O: a ledger whose sweep never leaves the microtask queue (the
          // memory ledger) would otherwise starve the claimers waiting on them.
          await new Promise((resolve) => setImmediate(resolve));
        }
      })();
      const churn = async (i: number): Promise<void> => {
        const key = ctx.key(`churn-${i}`);
        let fence = 0;
        for (let cycle = 0; cycle < CHURN_CYCLES; cycle++) {
          const what = `key #${i}, cycle ${cycle} (${sweeps} sweeps so far)`;
          const claimed = await claimer.claim(claimRequest(key, `owner-${i}`, "keyed_write"));
          if (claimed.outcome !== "claimed") {
            throw new ConformanceFailure(`${what}: a claim of a row past its retention (or of a new key) got existing ${describeRow(claimed.row)}; it must be claimable`, { violates: cycle === 0 ? "LEDGER-1" : "LEDGER-19" });
          }
          must(!claimed.takeover && (claimed.fence === 1 || claimed.fence === fence + 1), `${what}: a claim of a row past retention is a first claim, got fence ${claimed.fence}, takeover ${claimed.takeover}`);
          fence = claimed.fence;
          const completed = await outcomeOf(claimer.complete(key, fence, '"churn"'));
          if (completed !== "ok") {
            const stored = await fixture.raw.read(key);
            throw new ConformanceFailure(
              `${what}: the claim won (fence ${fence}) and nobody else claimed the key, but its owner's complete got ${completed} and the stored row is ${describeRow(stored)}: a concurrent sweep removed the row after it was claimed again (it deleted a row it had read earlier without checking that the row was still the one it judged), so the claimed call ran with no row to protect it`,
            );
          }
          await fixture.raw.expireRetention(key);
        }
      };
      try {
        await Promise.all(Array.from({ length: CHURN_KEYS }, (_, i) => churn(i)));
      } finally {
        claimersDone = true;
        await sweeping.catch(() => {});
      }
      await sweeping;
    }),
};

/** Every check of this file, in order. */
const TAKEOVER_ROUNDS = 4;
const OTHER_FINISHES = ["failed", "unknown", "released"] as const;
const verb = (state: (typeof FINISHES)[number]) => (state === "completed" ? "complete" : state === "failed" ? "fail" : state === "unknown" ? "markUnknown" : "release");

export const staleFinishRacingTakeover: LedgerCheckSpec = {
  rule: "LEDGER-5",
  name: `a stale owner's fail, markUnknown or release racing a takeover of its expired keyed_write claim, issued in both orders: never both win — the finish and then a claim that sees it (a re-claim, after a release), or the takeover and then the finish refused with stale_claim — and the row agrees (${TAKEOVER_ROUNDS} rounds each)`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [finisher, claimer] = await pair(ctx, fixture);
      for (const state of OTHER_FINISHES) {
        for (let round = 0; round < 2 * TAKEOVER_ROUNDS; round++) {
          const finishFirst = round % 2 === 0;
          const key = ctx.key(`${state}-${round}`);
          const fence = await claimNew(fixture.ledger, key, "owner-old", "keyed_write");
          await fixture.raw.expireLease(key);
          const finish = () => outcomeOf(finishAs(finisher, key, fence, state));
          const claim = () => claimer.claim(claimRequest(key, "owner-new", "keyed_write"));
          const [finished, claimed] = finishFirst ? await both(finish, claim) : await both(claim, finish).then(([c, f]) => [f, c] as const);
          const what = `${state === "failed" ? "fail" : state === "unknown" ? "markUnknown" : "release"} racing a takeover, ${finishFirst ? "finish" : "claim"} issued first, round ${round}: finish -> ${finished}; claim -> ${describeClaim(claimed)}`;
          const row = await lookupMust(fixture.ledger, key, what);
          if (claimed.outcome === "claimed") {
            // The claim took the row: after a release it is a re-claim (the release came first), else a takeover the stale finish must lose to.
            const reclaim = finished === "ok" && state === "released" && !claimed.takeover;
            must(finished === (reclaim ? "ok" : "stale_claim"), `${what}: ${finished === "ok" ? `both won: the stale owner's ${verb(state)} succeeded and the claim took the row over with fence ${claimed.fence}` : `the stale owner's ${verb(state)} after the takeover must be refused with stale_claim, not ${finished}`}`);
            must(claimed.fence === fence + 1 && claimed.takeover === !reclaim, `${what}: the claim must get fence ${fence + 1} with takeover ${!reclaim}`);
            if (row.state !== "in_flight" || row.fence !== fence + 1 || row.owner !== "owner-new") {
              throw new ConformanceFailure(`${what}: the claim won with fence ${fence + 1}, so the row must end in flight for owner-new, got ${describeRow(row)}: the stale owner's ${verb(state)} wrote over the new owner's claim (checked the fence, then wrote without looking again)`);
            }
            continue;
          }
          must(finished === "ok", `${what}: the claim met the row held, so the owner's ${verb(state)} must have won, not ${finished}`);
          must(claimed.row.state === state && row.state === state && row.fence === fence, `${what}: the ${verb(state)} won, so the claim must see and the row end ${state} fence=${fence}, got ${describeRow(claimed.row)} / ${describeRow(row)}`);
        }
      }
    }),
};

export const claimCopyRacingFinish: LedgerCheckSpec = {
  rule: "LEDGER-26",
  name: `a copy of a claim (its claim id: the claim was sent again after a lost reply) racing its owner's complete, fail, markUnknown or release, issued in both orders, never undoes the finish: the copy is the same claim (claimed, its fence) before it, or meets the finished row (refused with stale_claim after a release) after it, and the row ends finished (${TAKEOVER_ROUNDS} rounds each)`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [finisher, copier] = await pair(ctx, fixture);
      for (const state of FINISHES) {
        for (let round = 0; round < 2 * TAKEOVER_ROUNDS; round++) {
          const finishFirst = round % 2 === 0;
          const key = ctx.key(`copy-${state}-${round}`);
          const claimId = newClaimId();
          const effect = round % 4 < 2 ? "unkeyed_write" : "keyed_write";
          const first = mustBeClaimed(await fixture.ledger.claim(claimWithId(key, "owner-a", effect, claimId)), `claim with a claim id (${effect})`);
          const finish = () => outcomeOf(finishAs(finisher, key, first.fence, state));
          const copy = () => outcomeOf(copier.claim(claimWithId(key, "owner-a", effect, claimId)).then((r) => { copied = r; }));
          let copied: ClaimResult | undefined;
          const [finished, copyOutcome] = finishFirst ? await both(finish, copy) : await both(copy, finish).then(([c, f]) => [f, c] as const);
          const what = `${verb(state)} racing a copy of its claim (${effect}), ${finishFirst ? "finish" : "copy"} issued first, round ${round}: ${verb(state)} -> ${finished}; copy -> ${copied === undefined ? copyOutcome : describeClaim(copied)}`;
          must(finished === "ok", `${what}: the owner's own ${verb(state)} must succeed: a copy of its claim is the same claim and keeps its fence`);
          if (copied === undefined) must(state === "released" && copyOutcome === "stale_claim", `${what}: the copy may be refused (stale_claim) only after a release (LEDGER-27), not ${copyOutcome}`);
          else if (copied.outcome === "claimed") must(copied.fence === first.fence && !copied.takeover, `${what}: a copy is the same claim: its fence ${first.fence}, not a takeover`);
          else must(copied.row.state === state, `${what}: a copy after the finish must meet the ${state} row`);
          const row = await lookupMust(fixture.ledger, key, what);
          if (row.state !== state || row.fence !== first.fence) {
            throw new ConformanceFailure(`${what}: the row ends ${describeRow(row)}, expected ${state} fence=${first.fence}: the copy wrote the row it had read back in flight over the finish (it read, then wrote without looking again), so a finished call is claimed again`);
          }
        }
      }
    }),
};

export const RACE_CHECKS: readonly LedgerCheckSpec[] = [renewRacingFinish, expiryRacingCompletion, sweepRacingClaims, sweepRacingClaimsWide, sweepRacingClaimChurn, staleFinishRacingTakeover, claimCopyRacingFinish];
