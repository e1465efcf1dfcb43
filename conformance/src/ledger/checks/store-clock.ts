/**
 * LEDGER-20 measured, not only declared: leases issued by different instances back to back are on
 * one clock. Without a hook, instances in one process share a process clock, so only monotonicity
 * can be checked; with raw.skewedInstance (capability clockSkew) an instance whose process clock is
 * ten minutes off must issue the same leases, which a ledger on the process clock cannot.
 */
import type { Ledger } from "@dispatch-once/core";
import { ConformanceFailure, must } from "../../failure.js";
import { claimRequest, describeRow, mustBeClaimed, withFixture } from "../support.js";
import { type LedgerCheckSpec, instances } from "./common.js";
import { CLOCK_TOLERANCE_MS } from "./lease-length.js";

const LEASE = 60_000;
/** A host clock this far off is a misconfigured host, not an exotic one. */
export const SKEW_MS = 10 * 60 * 1000;

/**
 * Claims fresh keys through `via` in turn, back to back, and requires each lease to be the previous
 * one plus at most the time between the two claims (never less than it minus the tolerance).
 */
async function leasesInOrder(ctx: Parameters<LedgerCheckSpec["run"]>[0], via: Array<{ label: string; ledger: Ledger }>, rounds: number): Promise<void> {
  let previous: { lease: number; label: string; before: number } | undefined;
  for (let i = 0; i < via.length * rounds; i++) {
    const { label, ledger } = via[i % via.length]!;
    const before = performance.now();
    const claimed = mustBeClaimed(await ledger.claim(claimRequest(ctx.key(label), `owner-${label}`, "keyed_write", LEASE)), `claim #${i} through ${label}`);
    const after = performance.now();
    if (previous !== undefined) {
      const step = claimed.leaseExpiresAt - previous.lease;
      const most = after - previous.before;
      if (step < -CLOCK_TOLERANCE_MS || step > most + CLOCK_TOLERANCE_MS) {
        throw new ConformanceFailure(
          `claims with the same leaseMs through ${previous.label} and then ${label}, ${Math.round(most)} ms apart, got leases ${previous.lease} and ${claimed.leaseExpiresAt}: ${step} ms apart, expected 0 to ${Math.round(most)} ms. The instances measure leases on different clocks (their process clocks), so one instance takes over claims another still holds`,
        );
      }
    }
    previous = { lease: claimed.leaseExpiresAt, label, before };
  }
}

export const leasesOnOneClock: LedgerCheckSpec = {
  rule: "LEDGER-20",
  name: "leases issued through different instances back to back are on one clock: with the same leaseMs, each ends no earlier than the one before and later by at most the time between them (12 claims over 3 instances)",
  needs: ["sharedAcrossProcesses"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const [a, b, c] = await instances(fixture, 3);
      await leasesInOrder(ctx, [
        { label: "ledger#1", ledger: a! },
        { label: "ledger#2", ledger: b! },
        { label: "ledger#3", ledger: c! },
      ], 4);
    }),
};

export const skewedProcessClock: LedgerCheckSpec = {
  rule: "LEDGER-20",
  name: "an instance whose process clock is 10 minutes fast or slow issues the same leases and respects the same live claims (raw.skewedInstance): a ledger on the process clock fails",
  needs: ["sharedAcrossProcesses", "clockSkew"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const skewed = fixture.raw.skewedInstance;
      if (skewed === undefined) throw new ConformanceFailure("the subject declares clockSkew but its fixture has no raw.skewedInstance");
      const fast = await skewed.call(fixture.raw, SKEW_MS);
      const slow = await skewed.call(fixture.raw, -SKEW_MS);
      await leasesInOrder(ctx, [
        { label: "the true-clock instance", ledger: fixture.ledger },
        { label: "the instance 10 min fast", ledger: fast },
        { label: "the instance 10 min slow", ledger: slow },
      ], 2);
      // What the skew does to users: a claim through the fast instance must still see a live claim as live.
      for (const [holder, taker, label] of [
        [fixture.ledger, fast, "through the instance 10 min fast, of a claim made through the true-clock one"],
        [slow, fixture.ledger, "through the true-clock instance, of a claim made through the instance 10 min slow"],
      ] as const) {
        const key = ctx.key(label);
        mustBeClaimed(await holder.claim(claimRequest(key, "owner-holder", "keyed_write", LEASE)), `claim (${label})`);
        const seen = await taker.claim(claimRequest(key, "owner-taker", "keyed_write", LEASE));
        must(
          seen.outcome === "existing" && seen.row.state === "in_flight",
          `a claim ${label}, with a 60 s lease just taken, got ${seen.outcome === "claimed" ? `claimed (fence ${seen.fence}, takeover ${seen.takeover}): a live claim was taken over` : describeRow(seen.row)}; leases must be measured on the store's clock`,
        );
      }
    }),
};

/** Every check of this file, in order. */
export const STORE_CLOCK_CHECKS: readonly LedgerCheckSpec[] = [leasesOnOneClock, skewedProcessClock];
