/**
 * Liveness: in a run with no faults (every owner renews on time and finishes), the ledger never
 * hands a live claim to someone else and never declares an outcome unknown. The other checks expire
 * leases through the hook and use leases of minutes, so a ledger that lets leases lapse early (a
 * clock margin on the wrong side, a renewal that does not extend) passes all of them; here leases
 * are short, renewed from timers as the dispatcher does (every third of the lease, LEDGER-9), and
 * duplicates keep claiming, in real time.
 */
import type { LedgerEffect } from "@dispatch-once/core";
import { CheckInconclusive } from "../../errors/check-inconclusive.js";
import { ConformanceFailure, codeOf, describeError } from "../../failure.js";
import { claimRequest, describeRow, mustBeClaimed, sleep, withFixture } from "../support.js";
import { type LedgerCheckSpec, instances, lookupMust } from "./common.js";

const LEASE_MS = 1_500;
const RENEW_EVERY_MS = LEASE_MS / 3;
const POLL_EVERY_MS = 100;
const KEYS = 8;
const DUPLICATES = 2;
/** How long each owner works: some well past one lease, so only renewals keep them. */
const WORK_MS = [200, 600, 1_200, 1_800];
const ATTEMPTS = 3;
/** A renewal timer this much later than due means the kit's own process stalled. */
const STALL_MS = 300;

class KitStalled extends Error {}

interface Owner {
  key: string;
  effect: LedgerEffect;
  fence: number;
  /** performance.now() when the last renewal (or the claim) returned: the lease runs at least LEASE_MS from before it. */
  lastKept: number;
  finished: boolean;
}

async function oneRun(ctx: Parameters<LedgerCheckSpec["run"]>[0], attempt: number): Promise<void> {
  await withFixture(ctx.subject, async (fixture) => {
    const ledgers = ctx.subject.capabilities.sharedAcrossProcesses ? await instances(fixture, 2) : [fixture.ledger];
    const problems: string[] = [];
    let stalled = false;
    let stop = false;
    const owners: Owner[] = [];
    for (let i = 0; i < KEYS; i++) {
      const effect: LedgerEffect = i % 2 === 0 ? "keyed_write" : "unkeyed_write";
      const key = ctx.key(`${attempt}-${i}`);
      const started = performance.now();
      const claimed = mustBeClaimed(await fixture.ledger.claim(claimRequest(key, `owner-${i}`, effect, LEASE_MS)), `the first claim of key #${i}`);
      owners.push({ key, effect, fence: claimed.fence, lastKept: started, finished: false });
    }
    const work = owners.map(async (owner, i) => {
      const ledger = ledgers[i % ledgers.length]!;
      let renewing: Promise<void> = Promise.resolve();
      // The dispatcher's renewal timer: every third of the lease while the tool runs.
      let tick = performance.now();
      const timer = setInterval(() => {
        const sent = performance.now();
        // A timer firing far too late means this process stalled (an overloaded machine), not that the ledger failed.
        if (sent - tick > RENEW_EVERY_MS + STALL_MS) stalled = true;
        tick = sent;
        renewing = ledger.renew(owner.key, owner.fence, LEASE_MS).then(
          () => {
            owner.lastKept = sent;
          },
          (error: unknown) => {
            if (!owner.finished) problems.push(`key #${i} (${owner.effect}): the owner's renewal ${Math.round(sent - owner.lastKept)} ms after it last kept the claim was refused: ${describeError(error)}`);
          },
        );
      }, RENEW_EVERY_MS);
      try {
        await sleep(WORK_MS[i % WORK_MS.length]! + ctx.int(0, 200));
      } finally {
        clearInterval(timer);
      }
      if (performance.now() - tick > RENEW_EVERY_MS + STALL_MS) stalled = true;
      owner.finished = true;
      try {
        await ledger.complete(owner.key, owner.fence, `{"key":${i}}`);
      } catch (error) {
        problems.push(`key #${i} (${owner.effect}): the owner's complete was refused (${codeOf(error) ?? describeError(error)}) although it renewed every ${RENEW_EVERY_MS} ms`);
      }
      await renewing;
    });
    // Duplicates of every call keep claiming, as a double-clicked send waits on the first (LEDGER-15).
    const polls = owners.flatMap((owner, i) =>
      Array.from({ length: DUPLICATES }, async (_, d) => {
        const ledger = ledgers[(i + d + 1) % ledgers.length]!;
        while (!stop) {
          const issued = performance.now();
          const seen = await ledger.claim(claimRequest(owner.key, `duplicate-${i}-${d}`, owner.effect, LEASE_MS));
          if (seen.outcome === "claimed") {
            problems.push(`key #${i} (${owner.effect}): a duplicate's claim won (fence ${seen.fence}, takeover ${seen.takeover}) ${Math.round(issued - owner.lastKept)} ms after the owner's last renewal of a ${LEASE_MS} ms lease was sent: a spurious takeover`);
            return;
          }
          if (seen.row.state === "completed") return;
          if (seen.row.state !== "in_flight" || seen.row.fence !== owner.fence) {
            problems.push(`key #${i} (${owner.effect}): a duplicate's claim saw ${describeRow(seen.row)} ${Math.round(issued - owner.lastKept)} ms after the owner's last renewal of a ${LEASE_MS} ms lease was sent: ${seen.row.state === "unknown" ? "a spurious unknown" : "not the owner's live claim"}`);
            return;
          }
          if (problems.length > 0) return;
          await sleep(POLL_EVERY_MS);
        }
      }),
    );
    await Promise.all(work);
    stop = true;
    await Promise.all(polls);
    // A stalled process misses its own renewals; whatever followed says nothing about the ledger: run again.
    if (stalled) throw new KitStalled();
    if (problems.length > 0) {
      throw new ConformanceFailure(`in a fault-free run (leases of ${LEASE_MS} ms renewed every ${RENEW_EVERY_MS} ms, ${DUPLICATES} duplicates per key claiming every ${POLL_EVERY_MS} ms): ${problems.slice(0, 4).join("; ")}${problems.length > 4 ? `; and ${problems.length - 4} more` : ""}`);
    }
    for (const [i, owner] of owners.entries()) {
      const row = await lookupMust(fixture.ledger, owner.key, `key #${i}`);
      if (row.state !== "completed" || row.fence !== owner.fence || row.result !== `{"key":${i}}`) {
        throw new ConformanceFailure(`in a fault-free run key #${i} (${owner.effect}) ends ${describeRow(row)}, expected completed by its first owner (fence ${owner.fence})`);
      }
    }
  });
}

export const liveness: LedgerCheckSpec = {
  rule: "LEDGER-6",
  name: `liveness: a fault-free run in real time (${KEYS} owners renewing every third of a ${LEASE_MS} ms lease for up to ${WORK_MS.at(-1)! + 200} ms while ${DUPLICATES} duplicates per key claim every ${POLL_EVERY_MS} ms) has no takeover, no unknown, and every call completes by its first owner`,
  waitsMs: WORK_MS.at(-1)! + 200,
  run: async (ctx) => {
    for (let attempt = 1; ; attempt++) {
      try {
        return await oneRun(ctx, attempt);
      } catch (error) {
        // Only a stall of the kit's own timers is retried; anything the ledger did is the finding.
        if (!(error instanceof KitStalled)) throw error;
        // Not a verdict on the ledger (CONF-5): the kit runs the check again, and reports it inconclusive, never certified, if it never concludes.
        if (attempt >= ATTEMPTS) throw new CheckInconclusive(`the kit's renewal timers were delayed past the lease in ${ATTEMPTS} attempts (the kit's own process stalled: an overloaded machine, or a subject that blocks the event loop): liveness could not be checked`);
      }
    }
  },
};

/** Every check of this file, in order. */
export const LIVENESS_CHECKS: readonly LedgerCheckSpec[] = [liveness];
