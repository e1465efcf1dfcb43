import type { Ledger, LedgerRow } from "@dispatch-once/core";

/** How long `resolve --not-performed` waits by default, as a dispatcher's reconcile does (reconcileGraceMs). */
export const DEFAULT_GRACE_MS = 60_000;

/**
 * Whether an unkeyed_write row's outcome has been open for at least `graceMs` on the LEDGER's clock
 * (RESOLVE-6): an `unknown` row since its `finishedAt` (its own listing of unknown rows at least
 * that old, LIST-1), an `in_flight` row since its lease expired (LEDGER-25). `live` is an in-flight
 * row whose lease has not run out: refused as the ledger refuses it (RESOLVE-2), but by the caller,
 * since the lease may run out before a write reaches the ledger, which would then accept it.
 */
export async function openForGrace(ledger: Ledger, row: LedgerRow, graceMs: number): Promise<{ passed: true } | { passed: false; live?: true; why: string }> {
  const tooSoon = (since: string) => ({ passed: false as const, why: `the row has been ${since} for less than --grace (${graceMs} ms) on the ledger's clock; its request may still be in transit, or its owner paused with it unsent` });
  if (row.state === "unknown") {
    if (ledger.capabilities.supports?.listRows !== true || typeof ledger.listRows !== "function") return { passed: false, why: "the ledger does not list rows, so how long the row has been unknown cannot be read on its clock" };
    let cursor: string | undefined;
    do {
      const page = await ledger.listRows({
        state: "unknown",
        toolName: row.toolName,
        ...(row.conversationId !== undefined ? { conversationId: row.conversationId } : {}),
        olderThanMs: graceMs,
        limit: 1000,
        ...(cursor !== undefined ? { cursor } : {}),
      });
      for (const listed of page.rows) {
        if (listed.key === row.key) return listed.fence === row.fence ? { passed: true } : tooSoon("unknown");
        if (listed.state === "unknown" && listed.finishedAt > row.finishedAt) return tooSoon("unknown");
      }
      cursor = page.cursor;
    } while (cursor !== undefined);
    return tooSoon("unknown");
  }
  if (row.state === "in_flight") {
    if (ledger.capabilities.supports?.listExpiredInFlight !== true || typeof ledger.listExpiredInFlight !== "function") {
      return { passed: false, why: "the ledger does not list expired claims, so how long ago the lease ran out cannot be read on its clock" };
    }
    const mine = (rows: readonly LedgerRow[]) => rows.some((r) => r.key === row.key && r.fence === row.fence);
    const limit = 1000;
    const expired = await ledger.listExpiredInFlight({ olderThanMs: 0, limit });
    if (!mine(expired) && expired.length < limit) return { passed: false, live: true, why: "its lease is live" };
    const longAgo = await ledger.listExpiredInFlight({ olderThanMs: graceMs, limit });
    if (mine(longAgo)) return { passed: true };
    if (longAgo.length >= limit) return { passed: false, why: `more than ${limit} claims expired longer ago than --grace, so this one's expiry cannot be told among them` };
    return tooSoon("in flight with an expired lease");
  }
  return { passed: true };
}
