/**
 * RESOLVE-1..RESOLVE-5 and RESOLVE-8: an operator's fenced transition of a row whose outcome is
 * open (`unknown`, or `in_flight` past its lease) to completed, failed or released. Run only on
 * a ledger that declares `supports.resolve` (the subject's `resolve` capability, which
 * resolveSupportDeclared holds to the ledger's own flag).
 */
import { newClaimId, type Ledger, type LedgerEffect, type Resolution, type ResolveRequest } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, mustRejectWith, show } from "../../failure.js";
import type { LedgerFixture } from "../../types.js";
import { claimNew, claimRequest, claimWithId, describeRow, mustBeClaimed, mustBeExisting, requestFor, short, textDiff, withFixture } from "../support.js";
import { DECLINED, EFFECTS, type LedgerCheckSpec, TRICKY_RESULTS, finishAs, jsonTextOfBytes, lookupMust, OWNER_OPS, ownerOp, snapshot } from "./common.js";

/** The ledger's resolve(), required: these checks run only where the subject declares it. */
export function resolveOf(ledger: Ledger): (request: ResolveRequest) => Promise<unknown> {
  const resolve = ledger.resolve;
  if (typeof resolve !== "function") throw new ConformanceFailure("the subject declares resolve, but ledger.resolve is not a function");
  return (request) => resolve.call(ledger, request);
}

export function resolution(key: string, outcome: Resolution, over: Partial<ResolveRequest> = {}): ResolveRequest {
  return { key, resolution: outcome, actor: "operator-ana", reason: "checked the provider's dashboard", ...over };
}

/** An `unknown` row made the way a dispatcher makes one: claimed, then marked unknown by its owner. */
export async function unknownRow(ledger: Ledger, key: string, effect: LedgerEffect = "unkeyed_write"): Promise<number> {
  const fence = await claimNew(ledger, key, "owner-lost", effect);
  await ledger.markUnknown(key, fence, "tool_error: socket hang up");
  return fence;
}

/** Of the refusal, the code and the state it names. */
async function mustRefuse(fixture: LedgerFixture, key: string, state: string, what: string): Promise<void> {
  const before = await snapshot(fixture, key);
  const error = (await mustRejectWith(
    resolveOf(fixture.ledger)(resolution(key, { outcome: "completed", result: '{"forced":true}' })),
    "resolution_refused",
    what,
  )) as { state?: unknown };
  mustEqual(error.state, state, `${what}: the refusal's state`);
  mustEqual(await snapshot(fixture, key), before, `${what}: the row after the refusal (it must not change)`);
}

export const resolveRefusesSettledOrLive: LedgerCheckSpec = {
  rule: "RESOLVE-2",
  name: "resolve refuses a live in-flight, completed, failed, released or absent row with resolution_refused naming the state, and changes nothing",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const live = ctx.key(`live-${effect}`);
        await claimNew(fixture.ledger, live, "owner-alive", effect);
        await mustRefuse(fixture, live, "in_flight", `resolve of a live ${effect} claim (its owner may still record the truth)`);
      }
      for (const state of ["completed", "failed", "released"] as const) {
        const key = ctx.key(state);
        const fence = await claimNew(fixture.ledger, key, "owner-a", "unkeyed_write");
        await finishAs(fixture.ledger, key, fence, state);
        await mustRefuse(fixture, key, state, `resolve of a ${state} row`);
      }
      await mustRefuse(fixture, ctx.key("absent"), "absent", "resolve of a key with no row");
    }),
};

export const resolveOpensUnknownAndExpired: LedgerCheckSpec = {
  rule: "RESOLVE-2",
  name: "resolve accepts an unknown row and an in-flight row whose lease expired (owner gone), of either effect class",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const resolve = resolveOf(fixture.ledger);
      for (const effect of EFFECTS) {
        const unknown = ctx.key(`unknown-${effect}`);
        const fence = await unknownRow(fixture.ledger, unknown, effect);
        const row = (await resolve(resolution(unknown, { outcome: "completed", result: '{"id":"pay_1"}' }))) as { state?: unknown; fence?: unknown };
        mustEqual(row.state, "completed", `resolve of an unknown ${effect} row: the returned row's state`);
        must(Number(row.fence) > fence, `resolve of an unknown ${effect} row returned fence ${show(row.fence)}, expected above ${fence} (RESOLVE-5)`);
        const expired = ctx.key(`expired-${effect}`);
        await claimNew(fixture.ledger, expired, "owner-dead", effect);
        await fixture.raw.expireLease(expired);
        const settled = (await resolve(resolution(expired, { outcome: "failed", error: DECLINED }))) as { state?: unknown };
        mustEqual(settled.state, "failed", `resolve of an expired in-flight ${effect} row: the returned row's state`);
        mustEqual((await lookupMust(fixture.ledger, expired, "lookup after resolve")).state, "failed", `lookup of the resolved expired ${effect} row`);
      }
    }),
};

export const resolveCompletedBytes: LedgerCheckSpec = {
  rule: "RESOLVE-3",
  name: "resolve completed stores the result byte-for-byte: lookup and every claim replay it",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const { label, text } of TRICKY_RESULTS.slice(0, 8)) {
        const key = ctx.key(label);
        await unknownRow(fixture.ledger, key);
        await resolveOf(fixture.ledger)(resolution(key, { outcome: "completed", result: text }));
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "replayer", "unkeyed_write")), `replay of a resolved row (${label})`);
        if (row.state !== "completed" || row.result !== text) {
          throw new ConformanceFailure(`resolved result (${label}) is not replayed byte-for-byte: ${row.state === "completed" ? textDiff(text, row.result) : `row is ${row.state}`}`);
        }
        const looked = await lookupMust(fixture.ledger, key, label);
        must(looked.state === "completed" && looked.result === text, `lookup of a resolved row (${label}): ${looked.state === "completed" ? textDiff(text, looked.result) : looked.state}`);
      }
    }),
};

export const resolveFailedReplays: LedgerCheckSpec = {
  rule: "RESOLVE-3",
  name: "resolve failed stores the error: lookup and claims return it identically",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      await unknownRow(fixture.ledger, key);
      await resolveOf(fixture.ledger)(resolution(key, { outcome: "failed", error: DECLINED }));
      const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "replayer", "unkeyed_write")), "replay of a row resolved failed");
      must(row.state === "failed", `replay of a row resolved failed: expected failed, got ${row.state}`);
      mustEqual(row.error, DECLINED, "the replayed error");
    }),
};

export const resolveNotPerformedReleases: LedgerCheckSpec = {
  rule: "RESOLVE-3",
  name: "resolve not_performed releases the row: the next claim wins with a higher fence and the stored request",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key(effect);
        await unknownRow(fixture.ledger, key, effect);
        const row = (await resolveOf(fixture.ledger)(resolution(key, { outcome: "not_performed" }))) as { state?: unknown; fence?: unknown };
        mustEqual(row.state, "released", `resolve not_performed of an unknown ${effect} row: the returned state`);
        const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-rerun", effect)), `claim after resolve not_performed (${effect})`);
        must(claimed.fence > Number(row.fence), `the re-claim's fence ${claimed.fence} must exceed the resolution's ${show(row.fence)}`);
        mustEqual(claimed.takeover, false, "takeover of a re-claim after release");
        mustEqual(claimed.request, requestFor("owner-lost"), `the re-claim's request (the first claim's, LEDGER-21)`);
      }
    }),
};

export const resolveOversizedRefused: LedgerCheckSpec = {
  rule: "RESOLVE-3",
  name: "resolve completed with a result over maxResultBytes is refused with result_not_storable and changes nothing",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(
      ctx.subject,
      async (fixture) => {
        const key = ctx.key();
        await unknownRow(fixture.ledger, key);
        const before = await snapshot(fixture, key);
        await mustRejectWith(resolveOf(fixture.ledger)(resolution(key, { outcome: "completed", result: jsonTextOfBytes(4097) })), "result_not_storable", "an oversized resolved result");
        mustEqual(await snapshot(fixture, key), before, "the row after an oversized resolution");
        await resolveOf(fixture.ledger)(resolution(key, { outcome: "completed", result: jsonTextOfBytes(4096) }));
      },
      { maxResultBytes: 4096 },
    ),
};

export const resolveExpectedFence: LedgerCheckSpec = {
  rule: "RESOLVE-4",
  name: "resolve with an expectedFence other than the row's is refused with stale_claim and changes nothing; the row's own fence is accepted",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await unknownRow(fixture.ledger, key);
      const before = await snapshot(fixture, key);
      for (const wrong of [fence + 1, fence + 7]) {
        await mustRejectWith(
          resolveOf(fixture.ledger)(resolution(key, { outcome: "not_performed" }, { expectedFence: wrong })),
          "stale_claim",
          `resolve expecting fence ${wrong} of a row at fence ${fence}`,
        );
      }
      mustEqual(await snapshot(fixture, key), before, "the row after a stale resolution");
      await resolveOf(fixture.ledger)(resolution(key, { outcome: "not_performed" }, { expectedFence: fence }));
      // The same view applied twice: the second finds the fence moved on.
      await mustRejectWith(
        resolveOf(fixture.ledger)(resolution(key, { outcome: "not_performed" }, { expectedFence: fence })),
        "stale_claim",
        "a second resolution from the same view",
      );
    }),
};

export const resolveFencesFormerOwner: LedgerCheckSpec = {
  rule: "RESOLVE-5",
  name: "resolving an expired claim bumps the fence, whatever the outcome (completed, failed, not_performed): the paused former owner's complete, fail, markUnknown, renew and release are stale",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const outcomes: Resolution[] = [{ outcome: "completed", result: '{"settled":"by ops"}' }, { outcome: "failed", error: DECLINED }, { outcome: "not_performed" }];
      for (const [i, op] of OWNER_OPS.entries()) {
        // Every outcome, each against several owner operations (a not_performed resolution that reuses the
        // release path keeps the fence: the row is released, so the late writes are refused by state alone).
        const outcome = outcomes[i % outcomes.length]!;
        const key = ctx.key(`${op}-${outcome.outcome}`);
        const fence = await claimNew(fixture.ledger, key, "owner-paused", "keyed_write");
        await fixture.raw.expireLease(key);
        const resolved = (await resolveOf(fixture.ledger)(resolution(key, outcome))) as { fence?: unknown };
        const stored = await lookupMust(fixture.ledger, key, "lookup after the resolution");
        must(
          Number(resolved.fence) > fence && stored.fence > fence,
          `the ${outcome.outcome} resolution must bump the fence above the former owner's ${fence}: returned ${show(resolved.fence)}, stored ${stored.fence}`,
        );
        const before = await snapshot(fixture, key);
        await mustRejectWith(ownerOp(fixture.ledger, op, key, fence), "stale_claim", `the former owner's late ${op} after the resolution`);
        mustEqual(await snapshot(fixture, key), before, `the resolved row after the former owner's ${op}`);
      }
    }),
};

export const resolveOneWinner: LedgerCheckSpec = {
  rule: "RESOLVE-8",
  name: "of concurrent resolutions of one row exactly one wins; the others are refused (resolution_refused or stale_claim)",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const others = [fixture.ledger];
      if (ctx.subject.capabilities.sharedAcrossProcesses) others.push(await fixture.reopen());
      for (let round = 0; round < 3; round++) {
        const key = ctx.key(`round-${round}`);
        await unknownRow(fixture.ledger, key);
        const outcomes: Resolution[] = [
          { outcome: "completed", result: '{"by":"a"}' },
          { outcome: "failed", error: DECLINED },
          { outcome: "not_performed" },
          { outcome: "completed", result: '{"by":"d"}' },
        ];
        const settled = await Promise.allSettled(
          outcomes.map((o, i) => resolveOf(others[i % others.length]!)(resolution(key, o, { actor: `operator-${i}` }))),
        );
        const won = settled.filter((s) => s.status === "fulfilled");
        must(won.length === 1, `${won.length} of ${settled.length} concurrent resolutions of ${short(key)} succeeded; exactly one must`);
        for (const s of settled) {
          if (s.status === "rejected") {
            const code = (s.reason as { code?: unknown }).code;
            must(code === "resolution_refused" || code === "stale_claim", `a losing resolution failed with ${show(code)}, expected resolution_refused or stale_claim`);
          }
        }
      }
    }),
};

export const resolveChecksInput: LedgerCheckSpec = {
  rule: "RESOLVE-1",
  name: "resolve refuses a request without actor or reason (empty or blank), with an expectedFence not from 1, an unknown action or outcome, or a member it does not have, with invalid_ledger_input, and changes nothing",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      await unknownRow(fixture.ledger, key);
      const before = await snapshot(fixture, key);
      const bad: Array<[string, ResolveRequest]> = [
        ["an empty actor", resolution(key, { outcome: "not_performed" }, { actor: "" })],
        ["an empty reason", resolution(key, { outcome: "not_performed" }, { reason: "" })],
        ["an unknown outcome", resolution(key, { outcome: "maybe" } as unknown as Resolution)],
        ["a completed resolution without a result", resolution(key, { outcome: "completed" } as unknown as Resolution)],
        // An audit must be able to read who resolved and why: white space names nobody.
        ["a blank actor", resolution(key, { outcome: "not_performed" }, { actor: "   " })],
        ["a blank reason", resolution(key, { outcome: "not_performed" }, { reason: "\t" })],
        // Fences start at 1: an expectedFence of 0 can match no row, and read as absent would settle any.
        ["an expectedFence of 0", resolution(key, { outcome: "not_performed" }, { expectedFence: 0 })],
        ["an expectedFence that is not a number", resolution(key, { outcome: "not_performed" }, { expectedFence: "1" as unknown as number })],
        ["an action but resolved or reconciled", resolution(key, { outcome: "not_performed" }, { action: "deleted" as unknown as "resolved" })],
        // A misspelt expectedFence read as absent would settle whatever claim holds the row (RESOLVE-4).
        ["a misspelt member (expectedfence)", { ...resolution(key, { outcome: "not_performed" }), expectedfence: 1 } as unknown as ResolveRequest],
        ["a member its outcome does not have (not_performed with a result)", resolution(key, { outcome: "not_performed", result: "{}" } as unknown as Resolution)],
      ];
      for (const [what, request] of bad) {
        await mustRejectWith(resolveOf(fixture.ledger)(request), "invalid_ledger_input", `resolve with ${what}`);
      }
      mustEqual(await snapshot(fixture, key), before, "the row after refused resolutions");
    }),
};

export const resolveReleaseKeepsClaimId: LedgerCheckSpec = {
  rule: "LEDGER-27",
  name: "resolve not_performed of an expired in-flight row releases it under its claim id: a late copy of that claim is refused with stale_claim and changes nothing, another claim id or none re-claims at fence + 1; a row released from unknown, or resolved completed or failed, meets the old claim id as before",
  needs: ["resolve"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const resolve = resolveOf(fixture.ledger);
      for (const effect of EFFECTS) {
        for (const taker of ["another claim id", "no claim id"] as const) {
          const key = ctx.key(`in-flight-${effect}-${taker === "no claim id" ? "none" : "other"}`);
          const id = newClaimId();
          const dead = mustBeClaimed(await fixture.ledger.claim(claimWithId(key, "owner-dead", effect, id)), `the first claim, with a claim id (${effect})`);
          await fixture.raw.expireLease(key);
          const released = (await resolve(resolution(key, { outcome: "not_performed" }, { expectedFence: dead.fence }))) as { state?: unknown; fence?: unknown };
          mustEqual(released.state, "released", `resolve not_performed of an expired in-flight ${effect} row: the returned state`);
          const before = await snapshot(fixture, key);
          const row = await lookupMust(fixture.ledger, key, `after the resolution (${effect})`);
          // A late copy of the dead owner's claim: taking the row, it would hold it for nobody (and an
          // unkeyed_write would read unknown after its lease, a false unknown).
          const copy: unknown = await fixture.ledger.claim(claimWithId(key, "owner-dead", effect, id)).catch((error: unknown) => error);
          if ((copy as { outcome?: unknown } | undefined)?.outcome === "claimed") {
            throw new ConformanceFailure(
              `a late copy of the claim an operator's resolution released (${effect}, released at fence ${row.fence}) was answered claimed with fence ${show((copy as { fence?: unknown }).fence)}: the released row must keep the claim id it was released under and refuse it with stale_claim (a claim nobody runs now holds the row)`,
            );
          }
          await mustRejectWith(Promise.reject(copy), "stale_claim", `a late copy of the claim the resolution released (${effect})`);
          mustEqual(await snapshot(fixture, key), before, `the released row after the late copy of its claim (${effect}; it must not change)`);
          const next = mustBeClaimed(
            await fixture.ledger.claim(claimWithId(key, "owner-rerun", effect, taker === "no claim id" ? undefined : newClaimId())),
            `a claim with ${taker} after the resolution released the row (${effect})`,
          );
          mustEqual(next.fence, row.fence + 1, `the fence of the re-claim with ${taker} (${effect}; LEDGER-4: the released row's + 1)`);
          mustEqual(next.takeover, false, `takeover of the re-claim with ${taker} (${effect})`);
          mustEqual(next.request, requestFor("owner-dead"), `the re-claim's request (${effect}; the first claim's, LEDGER-21)`);
          await fixture.ledger.complete(key, next.fence, '{"ok":true}');
        }
        // A row that turned unknown (its owner's markUnknown; for an unkeyed_write also another claim on
        // the expired lease, LEDGER-7) no longer recognises its claim id (LEDGER-26): released from
        // there, the old id is an ordinary claim's.
        for (const how of effect === "unkeyed_write" ? (["markUnknown", "lease expiry"] as const) : (["markUnknown"] as const)) {
          const unknown = ctx.key(`unknown-${effect}-${how === "markUnknown" ? "marked" : "expired"}`);
          const lostId = newClaimId();
          const lost = mustBeClaimed(await fixture.ledger.claim(claimWithId(unknown, "owner-lost", effect, lostId)), `the first claim of the row that turns unknown by ${how} (${effect})`);
          if (how === "markUnknown") {
            await fixture.ledger.markUnknown(unknown, lost.fence, "tool_error: socket hang up");
          } else {
            await fixture.raw.expireLease(unknown);
            const met = mustBeExisting(await fixture.ledger.claim(claimWithId(unknown, "owner-b", effect, newClaimId())), `another claim on the expired lease (${effect})`);
            mustEqual(met.state, "unknown", `another claim on the expired ${effect} lease turns the row unknown (LEDGER-7)`);
          }
          await resolve(resolution(unknown, { outcome: "not_performed" }));
          const releasedFence = (await lookupMust(fixture.ledger, unknown, `after releasing the row unknown by ${how} (${effect})`)).fence;
          const again: unknown = await fixture.ledger.claim(claimWithId(unknown, "owner-lost", effect, lostId)).catch((error: unknown) => error);
          if ((again as { outcome?: unknown } | undefined)?.outcome !== "claimed") {
            throw new ConformanceFailure(
              `the old claim id on a row released from unknown (by ${how}, ${effect}) must be an ordinary claim (LEDGER-26) and re-claim it, got ${(again as { outcome?: unknown } | undefined)?.outcome === "existing" ? describeRow((again as { row: Record<string, unknown> }).row) : show((again as Error)?.message ?? again)}`,
            );
          }
          mustEqual((again as { fence: number }).fence, releasedFence + 1, `the fence of the old claim id's re-claim of a row released from unknown (by ${how}, ${effect})`);
        }
        // Resolved completed or failed: the old claim id meets the finished row.
        for (const outcome of [{ outcome: "completed", result: '{"settled":"by ops"}' }, { outcome: "failed", error: DECLINED }] as Resolution[]) {
          const key = ctx.key(`${outcome.outcome}-${effect}`);
          const id = newClaimId();
          mustBeClaimed(await fixture.ledger.claim(claimWithId(key, "owner-dead", effect, id)), `the first claim, with a claim id (${effect}, to resolve ${outcome.outcome})`);
          await fixture.raw.expireLease(key);
          await resolve(resolution(key, outcome));
          const met = mustBeExisting(await fixture.ledger.claim(claimWithId(key, "owner-dead", effect, id)), `the old claim id after the row was resolved ${outcome.outcome} (${effect})`);
          must(met.state === outcome.outcome, `the old claim id after the row was resolved ${outcome.outcome} (${effect}) must meet the ${outcome.outcome} row, got ${describeRow(met)}`);
        }
      }
    }),
};

/** Every check of this file, in order. */
export const RESOLVE_CHECKS: readonly LedgerCheckSpec[] = [
  resolveChecksInput,
  resolveRefusesSettledOrLive,
  resolveOpensUnknownAndExpired,
  resolveCompletedBytes,
  resolveFailedReplays,
  resolveNotPerformedReleases,
  resolveReleaseKeepsClaimId,
  resolveOversizedRefused,
  resolveExpectedFence,
  resolveFencesFormerOwner,
  resolveOneWinner,
];
