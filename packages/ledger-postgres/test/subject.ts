import type { Ledger } from "@dispatch-once/core";
import { skewProcessClock, storeAddressOf, urlVia, type LedgerFixture, type LedgerSubject } from "@dispatch-once/conformance/ledger";
import type pg from "pg";
import { PostgresLedger } from "../src/index.js";
import {
  DATABASE_URL,
  adminPool,
  closedPort,
  closedUrl,
  dropSchema,
  expireLease,
  expireRetention,
  expireRetired,
  readStoredRow,
  table,
  uniqueSchema,
} from "./helpers.js";

/** The timeoutMs of the instance behind the kit's SilenceProxy (LEDGER-12's silent-store checks). */
export const SILENT_BOUND_MS = 300;

let shared: pg.Pool | undefined;
/** One pool for every fixture's own ledger and raw hooks (the shared-pool case, bring-your-own). */
function sharedPool(): pg.Pool {
  shared ??= adminPool(6);
  return shared;
}

/**
 * The PostgreSQL ledger as a conformance subject: every create() gets a fresh schema
 * do_test_<tag>_<random> (dropped by destroy()); raw hooks are SQL against that table.
 * `LedgerClass` is the class to certify (a blind round's mutant of it, test/round-k-blind.test.ts);
 * `viaTimeoutMs` the timeoutMs of raw.openVia's instance (test/silent-store.test.ts plants a day).
 */
export function createPostgresSubject(LedgerClass: typeof PostgresLedger = PostgresLedger, name = "ledger-postgres", tag = "conf", viaTimeoutMs = SILENT_BOUND_MS): LedgerSubject {
  return {
    name,
    // clockSkew: PostgresLedger has no clock option (every time is the server's clock_timestamp()),
    // so the skewed instance is a second instance whose calls run with this process's Date off
    // (skewProcessClock): one that read Date.now() for a lease would take over live claims.
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, clockSkew: true, listRows: true, resolve: true, auditTrail: true, retire: true, listExpiredInFlight: true, silentStore: true },
    // LEDGER-12: timeoutMs bounds every operation (a connection, connecting, the statement, retries);
    // raw.openVia's instance is configured with it, small so that the silent windows stay short.
    limits: { operationBoundMs: SILENT_BOUND_MS },
    async create(options = {}): Promise<LedgerFixture> {
      const pool = sharedPool();
      const schema = uniqueSchema(tag);
      const ledger = new LedgerClass({ pool, schema, ...options });
      await ledger.migrate();
      const others: Ledger[] = [];
      return {
        ledger,
        // A restart: a new instance with its own pool (ended by its close()).
        async reopen() {
          const other = new LedgerClass({ connectionString: DATABASE_URL, poolConfig: { max: 4 }, schema, ...options });
          others.push(other);
          // What a restarted process does before it hands the ledger to a Dispatcher: decide
          // the durability from the server (migrate() does the same on first open).
          await other.probeDurability();
          return other;
        },
        raw: {
          read: (key: string) => readStoredRow(pool, schema, key),
          expireLease: (key: string) => expireLease(pool, schema, key),
          expireRetention: (key: string) => expireRetention(pool, schema, key),
          expireRetired: (key: string) => expireRetired(pool, schema, key),
          // An unknown row format version: the adapter must refuse it, never treat it as absent.
          async corrupt(key: string) {
            const { rowCount } = await pool.query(`UPDATE ${table(schema)} SET v = 0 WHERE key = $1`, [key]);
            if (rowCount !== 1) throw new Error(`corrupt: no row ${key}`);
          },
          async skewedInstance(offsetMs: number) {
            const other = new LedgerClass({ connectionString: DATABASE_URL, poolConfig: { max: 2 }, schema, ...options });
            others.push(other);
            return skewProcessClock(other, offsetMs);
          },
          storeAddress: async () => storeAddressOf(DATABASE_URL, 5432),
          // An instance whose connections go through the kit's SilenceProxy: nothing here reaches the store.
          // viaTimeoutMs is SILENT_BOUND_MS but in the planted test that removes the bound (a day).
          async openVia(via) {
            const other = new LedgerClass({ connectionString: urlVia(DATABASE_URL, via), poolConfig: { max: 4 }, timeoutMs: viaTimeoutMs, schema, ...options });
            others.push(other);
            return other;
          },
          async disconnected() {
            const broken = new LedgerClass({
              connectionString: closedUrl(await closedPort()),
              poolConfig: { connectionTimeoutMillis: 2_000 },
              schema,
              ...options,
            });
            others.push(broken);
            return broken;
          },
        },
        async destroy() {
          await Promise.all(others.map((l) => l.close()));
          await ledger.close();
          await dropSchema(pool, schema);
        },
      };
    },
  };
}

export const postgresSubject: LedgerSubject = createPostgresSubject();

/** End the shared pool (call from afterAll). */
export async function closeSubjectPool(): Promise<void> {
  const pool = shared;
  shared = undefined;
  await pool?.end();
}

export default postgresSubject;
