import type { LedgerRow } from "@dispatch-once/core";
import { formatAge } from "./duration.js";
import type { AuditEntry } from "@dispatch-once/core";
import { evidenceOf, evidenceWords, type RowEvidence } from "./evidence.js";
import { recordRowWords } from "./record-rows.js";

/** A plain, aligned text table (no colours: output is often piped or pasted into a ticket). */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join("  ")
      .trimEnd();
  return [line(header), ...rows.map(line)].map((l) => `${l}\n`).join("");
}

/** When the row last changed: finishedAt for a finished row, claimedAt while in flight. */
export function sinceOf(row: LedgerRow): number {
  return row.state === "in_flight" ? row.claimedAt : row.finishedAt;
}

export const LIST_HEADER = ["KEY", "STATE", "TOOL", "FENCE", "CONVERSATION", "TURN", "AGE"] as const;

/**
 * The STATE cell: an in-flight row says whether its lease is live or expired (an abandoned claim
 * an operator may resolve), from the row's lease expiry, which is on the ledger's clock.
 */
export function stateCell(row: LedgerRow, now: number, evidence?: RowEvidence): string {
  if (evidence !== undefined && (row.state !== "in_flight" || evidence.basis === "record")) return evidenceWords(row, evidence);
  if (row.state === "failed") return failedState(row);
  if (row.state !== "in_flight") return row.state;
  const left = row.leaseExpiresAt - now;
  return left >= 0 ? `in_flight (lease ${formatAge(left)} left)` : `in_flight (lease expired ${formatAge(-left)} ago)`;
}

/**
 * A failed row's state in words: `failed` alone reads "it did not happen", which is false for a
 * row failed closed with result_not_storable (LEDGER-10, RECON-3): the effect happened and only its
 * result could not be kept. RECORD-8 counts such a row as happened; so do list and inspect.
 */
export function failedState(row: LedgerRow & { state: "failed" }): string {
  return row.error.code === "result_not_storable" ? "failed (the effect happened; result not stored)" : "failed";
}

export function listRow(row: LedgerRow, now: number, evidence?: RowEvidence): string[] {
  const conversation = row.conversationId;
  const turn = row.turnIndex;
  return [
    row.key,
    stateCell(row, now, evidence),
    row.toolName,
    String(row.fence),
    conversation ?? "-",
    turn === undefined ? "-" : String(turn),
    formatAge(now - sinceOf(row)),
  ];
}

export function iso(ms: number | undefined): string {
  if (ms === undefined || !Number.isFinite(ms)) return "-";
  return new Date(ms).toISOString();
}

/** A JSON text shown indented when it parses, as stored otherwise. */
function prettyJsonText(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function indent(text: string, by = "  "): string {
  return text
    .split("\n")
    .map((l) => `${by}${l}`)
    .join("\n");
}

/** The human form of `inspect`: every field of the row, then its audit trail. */
export function describeRow(row: LedgerRow, audit: readonly AuditEntry[] | undefined, now: number): string {
  const out: string[] = [];
  const field = (name: string, value: string) => out.push(`${`${name}:`.padEnd(14)}${value}`);
  field("key", row.key);
  const evidence = evidenceOf(row, audit);
  field("state", row.state === "in_flight" && evidence.basis !== "record" ? row.state : evidenceWords(row, evidence));
  field("tool", `${row.toolName} (${row.effect})`);
  // EFFECT-8: a reserved name is Dispatch-Once's own row; say what it is before its fields read as a payment's.
  if (evidence.basis === "record") field("record", `Dispatch-Once's own bookkeeping (${recordRowWords(row.toolName)}): no effect was made under it, and there is nothing to settle (resolve and reconcile refuse it)`);
  field("fence", String(row.fence));
  const conversation = row.conversationId;
  const turn = row.turnIndex;
  field("conversation", conversation ?? "-");
  field("turn", turn === undefined ? "-" : String(turn));
  field("claimed at", iso(row.claimedAt));
  if (row.state === "in_flight") {
    field("owner", row.owner);
    const left = row.leaseExpiresAt - now;
    field("lease", `${iso(row.leaseExpiresAt)} (${left >= 0 ? `${formatAge(left)} left` : `expired ${formatAge(-left)} ago`})`);
  } else {
    field("finished at", `${iso(row.finishedAt)} (${formatAge(now - row.finishedAt)} ago)`);
  }
  if (row.state === "unknown") field("reason", row.reason);
  out.push("request:");
  out.push(indent(prettyJsonText(row.request)));
  if (row.state === "completed") {
    out.push("result:");
    out.push(indent(prettyJsonText(row.result)));
  }
  if (row.state === "failed") {
    out.push("error:");
    out.push(indent(JSON.stringify(row.error, null, 2)));
  }
  if (audit === undefined) {
    out.push("audit trail:  (this ledger keeps none)");
  } else if (audit.length === 0) {
    out.push("audit trail:  (empty)");
  } else {
    out.push("audit trail:");
    out.push(
      indent(
        table(
          ["AT", "ACTION", "FROM", "TO", "FENCE", "ACTOR", "REASON"],
          audit.map((e) => [iso(e.at), e.outcome !== undefined ? `${e.action}:${e.outcome}` : e.action, e.fromState, e.toState, String(e.fence), e.actor, e.reason]),
        ).trimEnd(),
      ),
    );
  }
  return `${out.join("\n")}\n`;
}
