import type { AuditEntry, LedgerRow } from "@dispatch-once/core";
import { isRecordRowName } from "./record-rows.js";

/**
 * What a row and its audit trail establish about its effect, as `list` and `inspect` print it.
 * `effect`: `happened`, `not_happened`, `may_have_happened`, or `open` (a claim in flight).
 * `basis`: who says so: the run (its result, or its result_not_storable), the tool's own answer
 * about the downstream (`tool`), a reconcile probe (`probe`), an operator's resolution
 * (`operator`, with `actor` and `reason`), nobody yet (`none`), or a ledger that keeps no audit
 * trail, so that a release's origin cannot be told (`unrecorded`). A row of Dispatch-Once's own
 * bookkeeping (a reserved tool name, EFFECT-8) holds no effect: `{ effect: "none", basis: "record" }`.
 */
export interface RowEvidence {
  effect: "happened" | "not_happened" | "may_have_happened" | "open" | "none";
  basis: "run" | "tool" | "probe" | "operator" | "none" | "unrecorded" | "record";
  actor?: string;
  reason?: string;
}

/** The resolution that put the row in its state at its fence, if one did (RESOLVE-5: it bumped the fence). */
function settledBy(row: LedgerRow, audit: readonly AuditEntry[] | undefined): AuditEntry | undefined {
  if (audit === undefined) return undefined;
  for (let i = audit.length - 1; i >= 0; i--) {
    const entry = audit[i]!;
    if ((entry.action === "resolved" || entry.action === "reconciled") && entry.fence === row.fence && entry.toState === row.state) return entry;
  }
  return undefined;
}

function byResolution(entry: AuditEntry, effect: RowEvidence["effect"]): RowEvidence {
  return entry.action === "reconciled" ? { effect, basis: "probe", actor: entry.actor, reason: entry.reason } : { effect, basis: "operator", actor: entry.actor, reason: entry.reason };
}

/**
 * The evidence for a row's effect. A released row is "not performed" only as far as whoever
 * released it said so: an operator's word, a probe's look at one moment, or the tool's own answer;
 * a keyed_write its owner released may have happened (a lost response: its re-run is collapsed by
 * the key). `audit` undefined: the ledger keeps no trail.
 */
export function evidenceOf(row: LedgerRow, audit: readonly AuditEntry[] | undefined): RowEvidence {
  if (isRecordRowName(row.toolName)) return { effect: "none", basis: "record" };
  switch (row.state) {
    case "in_flight":
      return { effect: "open", basis: "none" };
    case "unknown":
      return { effect: "may_have_happened", basis: "none" };
    case "completed": {
      const entry = settledBy(row, audit);
      return entry !== undefined ? byResolution(entry, "happened") : { effect: "happened", basis: "run" };
    }
    case "failed": {
      const entry = settledBy(row, audit);
      // result_not_storable is a failure whose effect happened (LEDGER-10, RECON-3).
      const happened = row.error.code === "result_not_storable";
      if (entry !== undefined) return byResolution(entry, happened ? "happened" : "not_happened");
      return happened ? { effect: "happened", basis: "run" } : { effect: "not_happened", basis: "tool" };
    }
    case "released": {
      const entry = settledBy(row, audit);
      if (entry !== undefined) return byResolution(entry, "not_happened");
      // Released by its owner: a keyed_write after a lost response (or a probe's "not performed")
      // may have happened; an unkeyed_write only on its tool's "not performed", or unrun.
      if (row.effect === "keyed_write") return { effect: "may_have_happened", basis: audit === undefined ? "unrecorded" : "tool" };
      // That "not performed" is this run's only (LEDGER-8). An earlier claim of the call that ended
      // unknown was released on someone's word, and its owner may still send (§6.12's paused
      // owner); without a trail an earlier claim (fence above 1) cannot be told apart from one.
      if (audit === undefined ? row.fence > 1 : earlierUnknown(row, audit)) return { effect: "may_have_happened", basis: audit === undefined ? "unrecorded" : "tool" };
      return { effect: "not_happened", basis: audit === undefined ? "unrecorded" : "tool" };
    }
  }
}

/** Whether an earlier claim of the row's call turned unknown (RESOLVE-7 audits every such transition). */
function earlierUnknown(row: LedgerRow, audit: readonly AuditEntry[]): boolean {
  return audit.some((entry) => entry.toState === "unknown" && entry.fence < row.fence);
}

/** The few words after the state, `(...)`, or "" when the plain state says it all. */
export function evidenceWords(row: LedgerRow, evidence: RowEvidence): string {
  if (evidence.basis === "record") return `${row.state} (bookkeeping, no effect)`;
  const who = evidence.basis === "operator" ? `on ${evidence.actor ?? "an operator"}'s word` : evidence.basis === "probe" ? "by a reconcile probe" : undefined;
  switch (row.state) {
    case "released":
      if (evidence.basis === "unrecorded") {
        if (row.effect === "keyed_write") return "released (may have happened; who released it is not recorded)";
        return evidence.effect === "may_have_happened"
          ? "released (may have happened; an earlier claim of it is not recorded)"
          : "released (not performed, by whose word is not recorded)";
      }
      if (evidence.effect === "may_have_happened") {
        return row.effect === "keyed_write"
          ? "released (may have happened; a re-run carries the same key)"
          : "released (may have happened; an earlier claim of it ended unknown and was released on someone's word)";
      }
      if (evidence.basis === "probe") return "released (not performed, as a reconcile probe found)";
      if (who !== undefined) return `released (not performed ${who})`;
      return "released (not performed, as its tool answered)";
    case "failed":
      if (evidence.effect === "happened") return who !== undefined ? `failed (the effect happened ${who}; result not stored)` : "failed (the effect happened; result not stored)";
      return who !== undefined ? `failed (${who})` : "failed";
    case "completed":
      return who !== undefined ? `completed (${who})` : "completed";
    default:
      return row.state;
  }
}
