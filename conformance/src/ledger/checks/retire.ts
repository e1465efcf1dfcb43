/**
 * LEDGER-28 (OPTIONAL method, `supports.retire`): a dispatch retires every claim id of which a copy
 * may still reach the store, and the ledger refuses every claim carrying a retired id for the
 * retention, whether the key has a row or not, whatever its state, before LEDGER-26 recognises it.
 * Every check here needs the subject's `retire` capability; without it they are not applicable.
 */
import { newClaimId, type ClaimRequest, type ClaimResult, type Ledger, type RetireOptions } from "@dispatch-once/core";
import { ConformanceFailure, codeOf, must, mustEqual, mustRejectWith, show } from "../../failure.js";
import { claimWithId, describeRow, mustBeClaimed, mustBeExisting, requestFor, short, sleep, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS } from "./common.js";

const withId = claimWithId;

/** The ledger's retire; the checks run only where the subject declares it (and LEDGER-14 checks the two agree). */
export function retireOf(ledger: Ledger): (key: string, claimId: string, options?: RetireOptions) => Promise<{ released: boolean }> {
  if (typeof ledger.retire !== "function") throw new ConformanceFailure("the subject declares retire, but ledger.retire is not a function");
  return (key, claimId, options) => ledger.retire!(key, claimId, options);
}

/** A claim carrying a retired id: refused with stale_claim, nothing else. */
async function mustBeRefusedRetired(ledger: Ledger, request: ClaimRequest, what: string): Promise<void> {
  let result: ClaimResult;
  try {
    result = await ledger.claim(request);
  } catch (error) {
    const code = codeOf(error);
    if (code === "stale_claim") return;
    throw new ConformanceFailure(`${what}: a claim carrying a retired claim id must be refused with stale_claim, it raised ${show(code ?? String(error))}`);
  }
  throw new ConformanceFailure(
    `${what}: a claim carrying a retired claim id must be refused with stale_claim, got ${result.outcome === "claimed" ? `claimed (fence ${result.fence}, takeover ${result.takeover})` : `existing ${describeRow(result.row)}`}: a late copy of a claim its dispatch gave up on took or met the row`,
  );
}

async function mustRetire(ledger: Ledger, key: string, id: string, options: RetireOptions | undefined, released: boolean, what: string): Promise<void> {
  const answer = await retireOf(ledger)(key, id, options);
  must(typeof answer === "object" && answer !== null && answer.released === released, `${what}: retire must answer { released: ${released} }, got ${show(answer)}`);
}

export const retireWithoutRow: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "a claim id retired for a key without a row is refused with stale_claim and creates nothing; other claim ids and none claim as before",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const instances = ctx.subject.capabilities.sharedAcrossProcesses ? [fixture.ledger, await fixture.reopen()] : [fixture.ledger];
      for (const effect of EFFECTS) {
        for (const [i, via] of instances.entries()) {
          const key = ctx.key();
          const id = newClaimId();
          const where = `${effect}${i === 0 ? "" : ", the late copy through another instance"}`;
          await mustRetire(fixture.ledger, key, id, { release: true }, false, `retire with no row (${where})`);
          must((await fixture.ledger.lookup(key)) === undefined, `retire created a row for ${short(key)} (${where}): a retired claim id is not a row`);
          await mustBeRefusedRetired(via, withId(key, "late-copy", effect, id), `a late copy of the retired claim, no row (${where})`);
          must((await fixture.ledger.lookup(key)) === undefined, `the refused late copy created a row for ${short(key)} (${where})`);
          const other = mustBeClaimed(await via.claim(withId(key, "owner-b", effect, newClaimId())), `a claim with another claim id after the retire (${where})`);
          await mustBeRefusedRetired(via, withId(key, "late-copy", effect, id), `the retired claim id on the row another claim id holds (${where})`);
          mustBeExisting(await via.claim(withId(key, "owner-c", effect, undefined)), `a claim without a claim id on that row (${where})`);
          await fixture.ledger.complete(key, other.fence, '{"ok":true}');
        }
      }
    }),
};

export const retiredBeforeRecognition: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "a retired claim id is refused on its own in-flight row (live or expired lease) before LEDGER-26 recognition; without release the row stays its owner's",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        for (const expired of [false, true]) {
          const key = ctx.key();
          const id = newClaimId();
          const where = `${effect}, ${expired ? "lease run out" : "live lease"}`;
          const first = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", effect, id)), `claim (${where})`);
          await mustRetire(fixture.ledger, key, id, expired ? undefined : { release: false }, false, `retire without release (${where})`);
          if (expired) await fixture.raw.expireLease(key);
          await mustBeRefusedRetired(fixture.ledger, withId(key, "owner-a", effect, id), `the retired claim id sent again on its own in-flight row (${where})`);
          const row = await fixture.ledger.lookup(key);
          must(row?.state === "in_flight" && row.fence === first.fence && row.owner === "owner-a", `retire without release and the refused copy must leave the row in flight with fence ${first.fence} under owner-a (${where}), got ${describeRow(row)}`);
          // The dispatch that ran its tool under the id finishes its own row.
          await fixture.ledger.complete(key, first.fence, '{"ok":true}');
          must((await fixture.ledger.lookup(key))?.state === "completed", `the owner's fence must still complete the row after a retire without release (${where})`);
        }
      }
    }),
};

export const retireReleasesOnlyItsRow: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "retire with release releases only the row in flight under its own claim id (fence and request kept); a row under another claim id, under none, or finished is unchanged",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        for (const expired of [false, true]) {
          const key = ctx.key();
          const id = newClaimId();
          const where = `${effect}, ${expired ? "lease run out" : "live lease"}`;
          const first = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", effect, id)), `claim (${where})`);
          if (expired) await fixture.raw.expireLease(key);
          await mustRetire(fixture.ledger, key, id, { release: true }, true, `retire with release of the row in flight under the claim id (${where})`);
          const row = await fixture.ledger.lookup(key);
          must(row?.state === "released" && row.fence === first.fence, `retire with release must release the row keeping fence ${first.fence} (${where}), got ${describeRow(row)}`);
          await mustRejectWith(fixture.ledger.complete(key, first.fence, '{"ok":true}'), "stale_claim", `complete with the released fence (${where})`);
          const next = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-b", effect, newClaimId())), `a claim with another claim id after retire released the row (${where})`);
          mustEqual(next.fence, first.fence + 1, `fence of the re-claim after retire released the row (${where})`);
          mustEqual(next.takeover, false, `takeover of the re-claim after retire released the row (${where})`);
          mustEqual(next.request, requestFor("owner-a"), `request of the re-claim after retire released the row (${where})`);
          // The row is now in flight under another claim id: releasing the retired one again changes nothing.
          await mustRetire(fixture.ledger, key, id, { release: true }, false, `retire with release again, the row held under another claim id (${where})`);
          const held = await fixture.ledger.lookup(key);
          must(held?.state === "in_flight" && held.fence === next.fence && held.owner === "owner-b", `retire with release must not touch a row in flight under another claim id (${where}), got ${describeRow(held)}`);
          // Under no claim id at all.
          const bare = ctx.key();
          const bareFence = mustBeClaimed(await fixture.ledger.claim(withId(bare, "owner-c", effect, undefined)), `a claim without a claim id (${where})`).fence;
          await mustRetire(fixture.ledger, bare, newClaimId(), { release: true }, false, `retire with release on a row in flight under no claim id (${where})`);
          const untouched = await fixture.ledger.lookup(bare);
          must(untouched?.state === "in_flight" && untouched.fence === bareFence, `retire with release must not touch a row in flight under no claim id (${where}), got ${describeRow(untouched)}`);
          // Finished: completed stays completed, and the retired id is refused there too.
          const done = ctx.key();
          const doneId = newClaimId();
          const doneFence = mustBeClaimed(await fixture.ledger.claim(withId(done, "owner-d", effect, doneId)), `claim to complete (${where})`).fence;
          await fixture.ledger.complete(done, doneFence, '{"ok":true}');
          await mustRetire(fixture.ledger, done, doneId, { release: true }, false, `retire with release on a completed row (${where})`);
          await mustBeRefusedRetired(fixture.ledger, withId(done, "owner-d", effect, doneId), `the retired claim id on a completed row (${where})`);
          mustEqual((await fixture.ledger.lookup(done))?.state, "completed", `state of the completed row after retire (${where})`);
        }
      }
    }),
};

export const retireWithoutReleaseKeepsRow: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "retire with release false (or no options) answers released false and leaves the row in flight under its claim id",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const options of [{ release: false }, {}, undefined] as const) {
        const key = ctx.key();
        const id = newClaimId();
        const first = mustBeClaimed(await fixture.ledger.claim(withId(key, "owner-a", "unkeyed_write", id)), `claim (options ${show(options)})`);
        await mustRetire(fixture.ledger, key, id, options, false, `retire with options ${show(options)}`);
        const row = await fixture.ledger.lookup(key);
        must(row?.state === "in_flight" && row.fence === first.fence, `retire with options ${show(options)} must leave the row in flight with fence ${first.fence}, got ${describeRow(row)}: the dispatch may have run its tool under it`);
        await fixture.ledger.complete(key, first.fence, '{"ok":true}');
      }
    }),
};

export const retiredOnEveryState: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "a retired claim id is refused with stale_claim on failed, unknown and released rows (released under another claim id) and changes none of them; retirement is per key",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledger = fixture.ledger;
      const id = newClaimId();
      const failed = ctx.key("failed");
      const f = mustBeClaimed(await ledger.claim(withId(failed, "owner-a", "keyed_write", id)), "claim to fail").fence;
      await ledger.fail(failed, f, { name: "CardDeclinedError", message: "declined" });
      const unknown = ctx.key("unknown");
      mustBeClaimed(await ledger.claim(withId(unknown, "owner-a", "unkeyed_write", id)), "claim to turn unknown");
      await fixture.raw.expireLease(unknown);
      mustEqual(mustBeExisting(await ledger.claim(withId(unknown, "owner-b", "unkeyed_write", undefined)), "a claim on the expired unkeyed_write row").state, "unknown", "state after the lease ran out");
      const released = ctx.key("released");
      const r = mustBeClaimed(await ledger.claim(withId(released, "owner-b", "keyed_write", newClaimId())), "claim to release under another claim id").fence;
      await ledger.release(released, r);
      for (const [key, state] of [[failed, "failed"], [unknown, "unknown"], [released, "released"]] as const) {
        await mustRetire(ledger, key, id, { release: true }, false, `retire on a ${state} row`);
        await mustBeRefusedRetired(ledger, withId(key, "late-copy", "keyed_write", id), `the retired claim id on a ${state} row`);
        const row = await ledger.lookup(key);
        must(row?.state === state, `the ${state} row must be unchanged by retire and the refused copy, got ${describeRow(row)}`);
      }
      // Retired for those keys, not for another.
      mustBeClaimed(await ledger.claim(withId(ctx.key("elsewhere"), "owner-a", "keyed_write", id)), "the same claim id on another key");
    }),
};

export const retireIdempotentAndNoRow: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "retiring is idempotent (the second release answers false), a retired id is not a row (lookup shows none, sweep counts none) and stays refused after sweep within the retention",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledger = fixture.ledger;
      const key = ctx.key();
      const id = newClaimId();
      const first = mustBeClaimed(await ledger.claim(withId(key, "owner-a", "keyed_write", id)), "claim").fence;
      await mustRetire(ledger, key, id, { release: true }, true, "first retire with release");
      await mustRetire(ledger, key, id, { release: true }, false, "second retire with release");
      const row = await ledger.lookup(key);
      must(row?.state === "released" && row.fence === first, `two retires must leave one release with fence ${first}, got ${describeRow(row)}`);
      const bare = ctx.key();
      const bareId = newClaimId();
      await mustRetire(ledger, bare, bareId, undefined, false, "retire with no row");
      await mustRetire(ledger, bare, bareId, undefined, false, "retire with no row again");
      mustEqual(await ledger.sweep(), 0, "rows sweep removes when only retired claim ids and a released row inside its retention exist");
      must((await ledger.lookup(bare)) === undefined, "a retired claim id must not appear as a row");
      await mustBeRefusedRetired(ledger, withId(bare, "late-copy", "keyed_write", bareId), "a late copy after sweep, within the retention");
      await mustBeRefusedRetired(ledger, withId(key, "late-copy", "keyed_write", id), "a late copy of the released row's retired id after sweep");
    }),
};

export const retireRefusesBadInput: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "retire refuses an empty key, a malformed claim id and a release that is not a boolean with invalid_ledger_input, and changes nothing",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const ledger = fixture.ledger;
      const retire = retireOf(ledger) as (key: unknown, claimId: unknown, options?: unknown) => Promise<unknown>;
      const key = ctx.key();
      const id = newClaimId();
      const fence = mustBeClaimed(await ledger.claim(withId(key, "owner-a", "keyed_write", id)), "claim").fence;
      const bad: Array<[string, unknown, unknown, unknown]> = [
        ["an empty key", "", id, { release: true }],
        ["a claim id of 15 characters", key, "cid-a_012345678", { release: true }],
        ["a claim id with a dot", key, `${id.slice(0, 20)}.x`, { release: true }],
        ["a claim id that is not a string", key, 1234567890123456, { release: true }],
        ["release as a string", key, id, { release: "yes" }],
        ["release as a number", key, id, { release: 1 }],
        ["release null", key, id, { release: null }],
        ["options that are not an object", key, id, "release"],
      ];
      for (const [what, k, c, o] of bad) await mustRejectWith(retire(k, c, o), "invalid_ledger_input", `retire with ${what}`);
      const row = await ledger.lookup(key);
      must(row?.state === "in_flight" && row.fence === fence, `a refused retire must not release the row, got ${describeRow(row)}`);
      const again = mustBeClaimed(await ledger.claim(withId(key, "owner-a", "keyed_write", id)), "the claim id after refused retires (not retired)");
      mustEqual(again.fence, fence, "fence of the claim sent again after refused retires");
    }),
};

export const retireRacingClaims: LedgerCheckSpec = {
  rule: "LEDGER-28",
  name: "retire with release racing copies of the same claim: exactly one consistent outcome (the claim first and then released, or retired first and every copy refused)",
  needs: ["retire"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const instances = ctx.subject.capabilities.sharedAcrossProcesses ? [fixture.ledger, await fixture.reopen()] : [fixture.ledger];
      for (let round = 0; round < 24; round++) {
        const key = ctx.key(`round ${round}`);
        const id = newClaimId();
        const effect = EFFECTS[round % 2]!;
        const copies = 1 + ctx.int(0, 2);
        const retireFirst = ctx.random() < 0.5;
        const via = (n: number) => instances[n % instances.length]!;
        const claims = () => Array.from({ length: copies }, (_, n) => settle(via(n + 1).claim(withId(key, "owner-a", effect, id))));
        const retire = () => retireOf(via(0))(key, id, { release: true });
        const [answer, outcomes] = retireFirst
          ? await Promise.all([retire(), (async () => (await sleep(0), Promise.all(claims())))()])
          : await Promise.all([(async () => (await sleep(0), retire()))(), Promise.all(claims())]);
        const where = `round ${round} (${effect}, ${copies} cop${copies === 1 ? "y" : "ies"}, ${retireFirst ? "retire sent first" : "claims sent first"})`;
        for (const o of outcomes) if (o.error !== undefined && o.error !== "stale_claim") throw new ConformanceFailure(`${where}: a copy of the claim raised ${o.error}`);
        const claimed = outcomes.filter((o) => o.result?.outcome === "claimed");
        must(outcomes.every((o) => o.result?.outcome !== "existing"), `${where}: a copy of the claim met the row as existing, which neither order allows`);
        const row = await fixture.ledger.lookup(key);
        if (claimed.length > 0) {
          // The claim landed first: every copy is the same claim, and retire released it.
          must(new Set(claimed.map((o) => (o.result as { fence: number }).fence)).size === 1, `${where}: copies of one claim got different fences`);
          must(answer.released === true && row?.state === "released", `${where}: a copy of the claim was claimed, so retire with release came after it and must have released the row; retire answered ${show(answer)}, the row is ${describeRow(row)}: the row is in flight under a retired claim id nobody holds`);
        } else {
          must(answer.released === false && row === undefined, `${where}: every copy was refused, so retire came first and nothing may exist; retire answered ${show(answer)}, the row is ${describeRow(row)}`);
        }
        await mustBeRefusedRetired(fixture.ledger, withId(key, "late-copy", effect, id), `${where}: a copy after both settled`);
      }
    }),
};

async function settle(p: Promise<ClaimResult>): Promise<{ result?: ClaimResult; error?: string }> {
  try {
    return { result: await p };
  } catch (error) {
    const code = codeOf(error);
    if (code === undefined) throw error;
    return { error: code };
  }
}

/** Every check of this file, in order. */
export const RETIRE_CHECKS: readonly LedgerCheckSpec[] = [
  retireWithoutRow,
  retiredBeforeRecognition,
  retireReleasesOnlyItsRow,
  retireWithoutReleaseKeepsRow,
  retiredOnEveryState,
  retireIdempotentAndNoRow,
  retireRefusesBadInput,
  retireRacingClaims,
];
