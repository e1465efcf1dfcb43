/**
 * LEDGER-21: the stored request.
 */
import { must } from "../../failure.js";
import { LEASE_MS, claimRequest, describeRow, mustBeClaimed, mustBeExisting, requestFor, withFixture } from "../support.js";
import { type LedgerCheckSpec, EFFECTS, TRICKY_REQUESTS, mustRequest, mustKeepRequest, raceKeepsRequest, instances, finishAs } from "./common.js";

export const firstClaimStoresRequest: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "the first claim stores the claimant's request and returns it; lookup, the stored row and later claimants see it",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const first = requestFor("owner-a");
        const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", effect, LEASE_MS, first)), `first claim (${effect})`);
        mustRequest(claimed.request, first, `the claimed result of the first claim (${effect})`);
        await mustKeepRequest(fixture, fixture.ledger, key, first, `the in-flight row after the first claim (${effect})`);
        const second = requestFor("owner-b");
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", effect, LEASE_MS, second)), `second claim (${effect})`);
        mustRequest(row.request, first, `the in-flight row returned to another claimant (${effect})`, second);
        await mustKeepRequest(fixture, fixture.ledger, key, first, `the row after a losing claim (${effect})`, second);
      }
    }),
};

export const reclaimKeepsRequest: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "a re-claim after release keeps the stored request and returns it, not the claimant's own",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const effect of EFFECTS) {
        const key = ctx.key();
        const first = requestFor("owner-0");
        let fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-0", effect, LEASE_MS, first)), "first claim").fence;
        for (let i = 1; i <= 3; i++) {
          await fixture.ledger.release(key, fence);
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the released row #${i} (${effect})`);
          const own = requestFor(`owner-${i}`);
          const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect, LEASE_MS, own)), `re-claim #${i} after release (${effect})`);
          mustRequest(again.request, first, `the claimed result of re-claim #${i} after release (${effect})`, own);
          await mustKeepRequest(fixture, fixture.ledger, key, first, `the row after re-claim #${i} (${effect})`, own);
          fence = again.fence;
        }
      }
      // Many claimants of a released row at once, each with its own request: the winner gets the stored one.
      const key = ctx.key("race");
      const first = requestFor("owner-first");
      const fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-first", "keyed_write", LEASE_MS, first)), "first claim").fence;
      await fixture.ledger.release(key, fence);
      const ledgers = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
      await raceKeepsRequest(ledgers, key, 16, first, "16 concurrent re-claims after release");
      await mustKeepRequest(fixture, fixture.ledger, key, first, "the row after 16 concurrent re-claims");
    }),
};

export const takeoverKeepsRequest: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "a keyed_write takeover keeps the stored request and returns it, not the claimant's own",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const first = requestFor("owner-0");
      mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-0", "keyed_write", LEASE_MS, first)), "first claim");
      for (let i = 1; i <= 3; i++) {
        await fixture.raw.expireLease(key);
        const own = requestFor(`owner-${i}`);
        const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, "keyed_write", LEASE_MS, own)), `takeover #${i}`);
        must(taken.takeover, `takeover #${i} must report takeover: true`);
        mustRequest(taken.request, first, `the claimed result of takeover #${i}`, own);
        await mustKeepRequest(fixture, fixture.ledger, key, first, `the row after takeover #${i}`, own);
      }
      const raced = ctx.key("race");
      const stored = requestFor("owner-dead");
      mustBeClaimed(await fixture.ledger.claim(claimRequest(raced, "owner-dead", "keyed_write", LEASE_MS, stored)), "first claim");
      await fixture.raw.expireLease(raced);
      const ledgers = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 3) : [fixture.ledger];
      await raceKeepsRequest(ledgers, raced, 16, stored, "16 concurrent takeovers");
      await mustKeepRequest(fixture, fixture.ledger, raced, stored, "the row after 16 concurrent takeovers");
    }),
};

export const unknownKeepsRequest: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "an expired unkeyed_write claim that turns unknown keeps the stored request",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      // Straight from the first claim, and after a release and re-claim (the stored request is still the first).
      for (const released of [false, true]) {
        const key = ctx.key(String(released));
        const first = requestFor("owner-dead");
        let fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-dead", "unkeyed_write", LEASE_MS, first)), "first claim").fence;
        if (released) {
          await fixture.ledger.release(key, fence);
          fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-next", "unkeyed_write", LEASE_MS, requestFor("owner-next"))), "re-claim").fence;
        }
        await fixture.raw.expireLease(key);
        const what = released ? "after a release and re-claim" : "from the first claim";
        for (const owner of ["owner-b", "owner-c"]) {
          const own = requestFor(owner);
          const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, owner, "unkeyed_write", LEASE_MS, own)), `claim by ${owner} of an expired unkeyed_write row`);
          must(row.state === "unknown", `claim by ${owner} of an expired unkeyed_write row: expected the unknown row, got ${describeRow(row)}`);
          mustRequest(row.request, first, `the unknown row returned to ${owner} (${what})`, own);
        }
        await mustKeepRequest(fixture, fixture.ledger, key, first, `the unknown row (${what})`);
      }
    }),
};

export const finishedRowsKeepRequest: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "completed, failed, unknown and released rows keep the stored request",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const state of ["completed", "failed", "unknown", "released"] as const) {
        const key = ctx.key(state);
        const first = requestFor("owner-a");
        const fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", "keyed_write", LEASE_MS, first)), "claim").fence;
        await finishAs(fixture.ledger, key, fence, state);
        await mustKeepRequest(fixture, fixture.ledger, key, first, `the ${state} row`);
        if (state === "released") continue;
        const own = requestFor("owner-b");
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write", LEASE_MS, own)), `claim of the ${state} row`);
        mustRequest(row.request, first, `the ${state} row returned to a later claimant`, own);
      }
    }),
};

export const claimAfterRetentionStoresNewRequest: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "a claim after retention stores the new claimant's request",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      // Past retention a row is forgotten (LEDGER-19), swept or not: the next claim creates the row afresh.
      for (const state of ["completed", "released"] as const) {
        for (const swept of [false, true]) {
          const key = ctx.key(`${state}-${swept}`);
          const old = requestFor("owner-old");
          const fence = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-old", "keyed_write", LEASE_MS, old)), "first claim").fence;
          await finishAs(fixture.ledger, key, fence, state);
          await fixture.raw.expireRetention(key);
          if (swept) await fixture.ledger.sweep();
          const what = `a claim of a ${state} row past retention${swept ? ", swept" : ", not yet swept"}`;
          const fresh = requestFor("owner-new");
          const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-new", "keyed_write", LEASE_MS, fresh)), what);
          mustRequest(claimed.request, fresh, `the claimed result of ${what} (the forgotten row's request must not come back)`);
          await mustKeepRequest(fixture, fixture.ledger, key, fresh, `the row after ${what}`);
        }
      }
    }),
};

export const requestsByteForByte: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: `requests are stored and returned byte for byte (${TRICKY_REQUESTS.length} tricky JSON texts, one over 64 KiB), by the first claim, a re-claim after release, a keyed_write takeover and the finished row`,
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      for (const { label, text } of TRICKY_REQUESTS) {
        const key = ctx.key(label);
        const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-a", "keyed_write", LEASE_MS, text)), `claim (${label})`);
        mustRequest(claimed.request, text, `${label}: the claimed result`);
        await mustKeepRequest(fixture, fixture.ledger, key, text, `${label}: the in-flight row`);
        await fixture.ledger.release(key, claimed.fence);
        const own = requestFor("owner-b");
        const again = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-b", "keyed_write", LEASE_MS, own)), `re-claim after release (${label})`);
        mustRequest(again.request, text, `${label}: the claimed result of a re-claim after release`, own);
        // A takeover writes the row by its own statement: the request it keeps must be the same bytes too.
        await fixture.raw.expireLease(key);
        const taker = requestFor("owner-t");
        const taken = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, "owner-t", "keyed_write", LEASE_MS, taker)), `takeover (${label})`);
        mustRequest(taken.request, text, `${label}: the claimed result of a keyed_write takeover`, taker);
        await mustKeepRequest(fixture, fixture.ledger, key, text, `${label}: the row after a takeover`, taker);
        await fixture.ledger.complete(key, taken.fence, '"done"');
        const row = mustBeExisting(await fixture.ledger.claim(claimRequest(key, "owner-c", "keyed_write")), `replay (${label})`);
        mustRequest(row.request, text, `${label}: the completed row returned to a replay`);
        await mustKeepRequest(fixture, fixture.ledger, key, text, `${label}: the completed row`);
      }
    }),
};

export const requestSurvivesRestart: LedgerCheckSpec = {
  rule: "LEDGER-21",
  name: "the stored request survives a restart: a fresh instance returns it on lookup, re-claim and takeover",
  needs: ["survivesRestart"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const released = ctx.key("released");
      const expired = ctx.key("expired");
      const text = TRICKY_REQUESTS.find((r) => r.label.startsWith("escapes"))!.text;
      const astral = TRICKY_REQUESTS.find((r) => r.label.startsWith("astral"))!.text;
      await fixture.ledger.release(released, mustBeClaimed(await fixture.ledger.claim(claimRequest(released, "owner-a", "keyed_write", LEASE_MS, text)), "claim").fence);
      mustBeClaimed(await fixture.ledger.claim(claimRequest(expired, "owner-a", "keyed_write", LEASE_MS, astral)), "claim");
      const reopened = await fixture.reopen();
      await mustKeepRequest(fixture, reopened, released, text, "the released row seen by a fresh instance");
      await mustKeepRequest(fixture, reopened, expired, astral, "the in-flight row seen by a fresh instance");
      const own = requestFor("owner-b");
      const again = mustBeClaimed(await reopened.claim(claimRequest(released, "owner-b", "keyed_write", LEASE_MS, own)), "re-claim through a fresh instance");
      mustRequest(again.request, text, "the claimed result of a re-claim through a fresh instance", own);
      await fixture.raw.expireLease(expired);
      const taken = mustBeClaimed(await reopened.claim(claimRequest(expired, "owner-b", "keyed_write", LEASE_MS, own)), "takeover through a fresh instance");
      mustRequest(taken.request, astral, "the claimed result of a takeover through a fresh instance", own);
    }),
};

/** Every check of this file, in order. */
export const REQUESTS_CHECKS: readonly LedgerCheckSpec[] = [firstClaimStoresRequest, reclaimKeepsRequest, takeoverKeepsRequest, unknownKeepsRequest, finishedRowsKeepRequest, claimAfterRetentionStoresNewRequest, requestsByteForByte, requestSurvivesRestart];
