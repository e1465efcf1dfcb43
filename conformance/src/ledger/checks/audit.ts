/**
 * RESOLVE-7: the audit trail. Every resolution appends who, when, why, from which state to which,
 * and the fence; so does every transition into `unknown` (the owner's markUnknown, a claim acting
 * on an expired unkeyed_write lease), because that is where an operator's work starts.
 */
import type { AuditEntry, Ledger } from "@dispatch-once/core";
import { ConformanceFailure, must, mustEqual, show } from "../../failure.js";
import { claimNew, claimRequest, mustBeExisting, short, withFixture } from "../support.js";
import { type LedgerCheckSpec } from "./common.js";
import { resolution, resolveOf, unknownRow } from "./resolve.js";

export async function trailOf(ledger: Ledger, key: string): Promise<AuditEntry[]> {
  const auditTrail = ledger.auditTrail;
  if (typeof auditTrail !== "function") throw new ConformanceFailure("the subject declares auditTrail, but ledger.auditTrail is not a function");
  const trail = await auditTrail.call(ledger, key);
  must(Array.isArray(trail), `auditTrail(${short(key)}) returned ${show(trail)}, expected an array`);
  return trail;
}

/** The entry without its time, which is the store's. */
function essence(entry: AuditEntry): Record<string, unknown> {
  must(Number.isFinite(entry.at) && entry.at > 0, `audit entry time is ${show(entry.at)}, expected store-clock milliseconds`);
  const { at: _at, ...rest } = entry;
  return { ...rest, fence: Number(rest.fence) };
}

export const auditRecordsResolution: LedgerCheckSpec = {
  rule: "RESOLVE-7",
  name: "each resolution appends an audit entry: actor, action, from and to state, the new fence, reason and outcome",
  needs: ["resolve", "auditTrail"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const key = ctx.key();
      const fence = await unknownRow(fixture.ledger, key, "keyed_write");
      const resolved = (await resolveOf(fixture.ledger)(
        resolution(key, { outcome: "not_performed" }, { actor: "operator-ana", reason: "no trace at the provider after 2 h", action: "reconciled" }),
      )) as { fence: number };
      const trail = await trailOf(fixture.ledger, key);
      const last = trail.at(-1);
      if (last === undefined) throw new ConformanceFailure("the audit trail is empty after a resolution");
      mustEqual(
        essence(last),
        { actor: "operator-ana", action: "reconciled", fromState: "unknown", toState: "released", fence: Number(resolved.fence), reason: "no trace at the provider after 2 h", outcome: "not_performed" },
        "the resolution's audit entry",
      );
      must(Number(resolved.fence) > fence, "the resolution bumps the fence");
      // A later resolution appends; nothing is rewritten.
      const again = ctx.key("again");
      await unknownRow(fixture.ledger, again);
      await resolveOf(fixture.ledger)(resolution(again, { outcome: "completed", result: "1" }));
      const second = await trailOf(fixture.ledger, again);
      mustEqual(second.map((e) => [e.action, e.toState, e.outcome ?? null]), [["marked_unknown", "unknown", null], ["resolved", "completed", "completed"]], "the trail of an unknown row resolved completed");
      mustEqual(await trailOf(fixture.ledger, key), trail, "a key's trail after another key's resolution");
    }),
};

export const auditRecordsUnknown: LedgerCheckSpec = {
  rule: "RESOLVE-7",
  name: "the transitions into unknown are audited: the owner's markUnknown (actor: the owner) and a claim acting on an expired unkeyed_write lease",
  needs: ["auditTrail"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const marked = ctx.key("marked");
      const fence = await claimNew(fixture.ledger, marked, "owner-a", "unkeyed_write");
      await fixture.ledger.markUnknown(marked, fence, "tool_error: timeout");
      mustEqual(
        (await trailOf(fixture.ledger, marked)).map(essence),
        [{ actor: "owner-a", action: "marked_unknown", fromState: "in_flight", toState: "unknown", fence, reason: "tool_error: timeout" }],
        "the trail of a row its owner marked unknown",
      );
      const expired = ctx.key("expired");
      const first = await claimNew(fixture.ledger, expired, "owner-dead", "unkeyed_write");
      await fixture.raw.expireLease(expired);
      mustBeExisting(await fixture.ledger.claim(claimRequest(expired, "owner-b", "unkeyed_write")), "claim of an expired unkeyed_write row");
      const trail = await trailOf(fixture.ledger, expired);
      mustEqual(trail.map((e) => [e.action, e.fromState, e.toState, Number(e.fence)]), [["lease_expired", "in_flight", "unknown", first]], "the trail of an expired unkeyed_write claim");
      mustEqual(await trailOf(fixture.ledger, ctx.key("never")), [], "the trail of a key never claimed");
    }),
};

/** Every check of this file, in order. */
export const AUDIT_CHECKS: readonly LedgerCheckSpec[] = [auditRecordsResolution, auditRecordsUnknown];
