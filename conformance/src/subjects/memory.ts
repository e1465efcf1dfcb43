import { MemoryLedger, type LedgerRow } from "@dispatch-once/core";
import type { LedgerFixture, LedgerSubject } from "../types.js";

type StoredMemoryRow = LedgerRow & { expiresAt?: number };

/**
 * MemoryLedger keeps its rows in a private Map; the raw hooks reach into it the way a
 * Postgres subject's hooks would run SQL against the table. It is the reference ledger, so a
 * kit change that breaks this access is caught by the kit's own tests.
 */
function rowsOf(ledger: MemoryLedger): Map<string, StoredMemoryRow> {
  const rows = (ledger as unknown as { rows?: unknown }).rows;
  if (!(rows instanceof Map)) throw new Error("MemoryLedger no longer keeps its rows in `rows`: update the memory subject");
  return rows as Map<string, StoredMemoryRow>;
}

/** MemoryLedger's retired claim ids per key, each with the time it may be forgotten (LEDGER-28). */
function retiredOf(ledger: MemoryLedger): Map<string, Map<string, number>> {
  const retired = (ledger as unknown as { retired?: unknown }).retired;
  if (!(retired instanceof Map)) throw new Error("MemoryLedger no longer keeps its retired claim ids in `retired`: update the memory subject");
  return retired as Map<string, Map<string, number>>;
}

/**
 * The in-memory reference ledger as a conformance subject. Its injected clock is the store
 * clock: expiring a lease or a retention moves that one row's deadline into the past.
 * It is one process and volatile, so it declares no restart, sharing, corruption or
 * unavailability capability; `reopen` returns the same instance. `Ledger` may be a subclass of
 * MemoryLedger (the kit's own tests plant bugs that way).
 */
export function memoryLedgerSubject(name = "ledger-memory", Ledger: typeof MemoryLedger = MemoryLedger): LedgerSubject {
  return {
    name,
    capabilities: {
      sharedAcrossProcesses: false,
      survivesRestart: false,
      corruption: false,
      unavailability: false,
      // n/a: an in-process map has no connection that could go silent (LEDGER-12's silent-store checks).
      silentStore: false,
      listRows: true,
      resolve: true,
      auditTrail: true,
      retire: true,
      listExpiredInFlight: true,
    },
    async create(options = {}): Promise<LedgerFixture> {
      // A monotonic wall clock: leases taken by the end-to-end level lapse in real time, and the
      // hooks move one row's deadline to "now" without touching any other row.
      let last = 0;
      const now = () => (last = Math.max(last, Date.now()));
      // A subclass (a planted bug in the kit's own tests) keeps the reference ledger's storage.
      const ledger = new Ledger({ now, ...options });
      const rows = rowsOf(ledger);
      return {
        ledger,
        reopen: async () => ledger,
        raw: {
          async read(key) {
            const row = rows.get(key);
            if (row === undefined) return undefined;
            const { expiresAt: _expiresAt, ...visible } = structuredClone(row);
            return visible as Record<string, unknown>;
          },
          async expireLease(key) {
            const row = rows.get(key);
            if (row?.state !== "in_flight") throw new Error(`expireLease: ${key} has no in-flight claim`);
            row.leaseExpiresAt = now() - 1;
          },
          async expireRetired(key) {
            // As if retired longer ago than the retention (LEDGER-28): each id's end moves into the past.
            const ids = retiredOf(ledger).get(key);
            for (const id of ids?.keys() ?? []) ids!.set(id, now() - 1);
          },
          async expireRetention(key) {
            const row = rows.get(key);
            if (row === undefined || row.state === "in_flight") throw new Error(`expireRetention: ${key} has no finished row`);
            row.expiresAt = now() - 1;
          },
        },
        async destroy() {
          rows.clear();
          await ledger.close();
        },
      };
    },
  };
}
