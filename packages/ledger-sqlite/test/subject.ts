// The SQLite ledger as a conformance subject (API: @dispatch-once/conformance LedgerSubject).
// Every create() gets its own database file; the raw hooks use a second, independent
// connection and plain SQL, never the adapter.
import Database from "better-sqlite3";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_RETENTION_MS, type Ledger } from "@dispatch-once/core";
import { skewProcessClock, type LedgerFixture, type LedgerSubject } from "@dispatch-once/conformance/ledger";
import type { SqliteLedger, SqliteLedgerOptions } from "../src/index.js";

const TABLE = "dispatch_once_ledger";

interface Row {
  key: string;
  v: unknown;
  state: unknown;
  tool_name: unknown;
  effect: unknown;
  fence: unknown;
  claimed_at: unknown;
  owner: unknown;
  lease_expires_at: unknown;
  result: unknown;
  error: unknown;
  reason: unknown;
  finished_at: unknown;
  request: unknown;
}

/** The hook's own reading of a stored row, in core's LedgerRow field names. */
function asLedgerRow(r: Row): Record<string, unknown> {
  const base = {
    key: r.key,
    toolName: r.tool_name,
    effect: r.effect,
    fence: r.fence,
    claimedAt: r.claimed_at,
    request: r.request,
    state: r.state,
  };
  switch (r.state) {
    case "in_flight":
      return { ...base, owner: r.owner, leaseExpiresAt: r.lease_expires_at };
    case "completed":
      return { ...base, result: r.result, finishedAt: r.finished_at };
    case "failed":
      return { ...base, error: typeof r.error === "string" ? safeParse(r.error) : r.error, finishedAt: r.finished_at };
    case "unknown":
      return { ...base, reason: r.reason, finishedAt: r.finished_at };
    case "released":
      return { ...base, finishedAt: r.finished_at };
    default:
      return { ...base, v: r.v };
  }
}

function safeParse(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * `Ledger` is the class to certify: the TypeScript source under vitest, the built dist/
 * when the conformance CLI loads test/conformance-subject.mjs.
 */
export function createSqliteSubject(
  LedgerClass: new (options: SqliteLedgerOptions) => SqliteLedger,
  name = "ledger-sqlite",
): LedgerSubject {
  return {
    name,
    // clockSkew: without the `now` test hook every time is SQLite's julianday('now'), read by the
    // SQLite library from the OS; the processes sharing a file share a host, hence that clock.
    // The skewed instance is another instance whose calls run with this process's JavaScript
    // Date off (skewProcessClock): a ledger that took leases from Date.now() (as `now: Date.now`
    // does) takes over live claims through it and fails LEDGER-20.
    // silentStore: n/a. SQLite is a library in this process over a local file: no connection can go
    // silent, so LEDGER-12's silent-store checks are reported not applicable (a stuck file lock is
    // LEDGER-23's busy wait, bounded by busyTimeoutMs).
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, clockSkew: true, listRows: true, resolve: true, auditTrail: true, retire: true, listExpiredInFlight: true, silentStore: false },
    async create(options = {}): Promise<LedgerFixture> {
      // The kit checks semantics, not the disk: on a memory-backed filesystem fsync is cheap, so
      // synchronous=FULL (the default) stays on while 1,000 end-to-end runs fit in CI. The
      // benchmark measures the real disk.
      // One directory per fixture, removed by its destroy: a shared root made once per process
      // was never removed, and every CI run left a few empty ones in /dev/shm.
      const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "ledger-sqlite-conformance-"));
      const path = join(dir, "ledger.db");
      const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
      const ledgers: SqliteLedger[] = [];
      const open = (): SqliteLedger => {
        const ledger = new LedgerClass({ path, table: TABLE, ...options });
        ledgers.push(ledger);
        return ledger;
      };
      const ledger = open();
      const raw = new Database(path, { timeout: 5000 });
      const select = raw.prepare(
        `SELECT key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, result, error, reason, finished_at, request
         FROM ${TABLE} WHERE key = ?`,
      );
      const change = (sql: string, ...params: unknown[]): void => {
        const { changes } = raw.prepare(sql).run(...params);
        if (changes !== 1) throw new Error(`raw hook changed ${changes} rows: ${sql}`);
      };
      return {
        ledger,
        reopen: async (): Promise<Ledger> => open(),
        raw: {
          async read(key) {
            const row = select.get(key) as Row | undefined;
            return row === undefined ? undefined : asLedgerRow(row);
          },
          // SQLite leases are on the process clock, so "the past" is Date.now() - 1.
          async expireLease(key) {
            change(`UPDATE ${TABLE} SET lease_expires_at = ? WHERE key = ? AND state = 'in_flight'`, Date.now() - 1, key);
          },
          // As if the row had been claimed and finished longer than the retention ago: all of
          // its times move back together and it moves to the front of claim order, which is
          // where a row that old sits (sweep walks claim order; see the README).
          async expireRetention(key) {
            const expiresAt = Date.now() - 1;
            const finishedAt = expiresAt - retentionMs;
            change(
              `UPDATE ${TABLE} SET expires_at = ?, finished_at = ?, claimed_at = min(claimed_at, ?),
                 seq = (SELECT min(seq) FROM ${TABLE}) - 1
               WHERE key = ? AND state <> 'in_flight'`,
              expiresAt,
              finishedAt,
              finishedAt,
              key,
            );
          },
          // As if every claim id of the key had been retired longer than the retention ago (LEDGER-28).
          async expireRetired(key) {
            raw.prepare(`UPDATE "${TABLE}_retired" SET retired_until = ? WHERE key = ?`).run(Date.now() - 1, key);
          },
          async corrupt(key) {
            // A row from a format version this reader does not know.
            change(`UPDATE ${TABLE} SET v = 999, state = 'in_flight?' WHERE key = ?`, key);
          },
          skewedInstance: async (offsetMs: number) => skewProcessClock(open(), offsetMs),
          async disconnected() {
            // A ledger whose connection is gone (closed under it): every call must fail closed.
            const broken = open();
            broken.database.close();
            return broken;
          },
        },
        async destroy() {
          for (const l of ledgers) await l.close();
          raw.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  };
}
