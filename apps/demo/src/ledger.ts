import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Ledger } from "@dispatch-once/core";
import type { LedgerSpec } from "./options.js";

// Each store's adapter and driver load only for the run that uses them (pg and ioredis alone
// kept about 20 MB of the demo's thread for a SQLite run).

export interface OpenLedger {
  ledger: Ledger;
  kind: LedgerSpec["kind"];
  /** Where the rows are, for the printout (no credentials). */
  location: string;
  durability: "durable" | "volatile";
  warnings: string[];
  /** Close the ledger and remove what the demo created (unless asked to keep it). */
  close(): Promise<void>;
}

/**
 * The bound on one ledger operation for the server-backed ledgers (Redis `commandTimeoutMs`,
 * PostgreSQL `timeoutMs`; 5 s by default). A run's counts are a function of its seed, and the
 * test compares them across ledgers: on a loaded host (CI runs five demos beside other suites on
 * two cores) a Redis reply once took over 5 s, three claims and completions failed as
 * ledger_unavailable, and those turns rightly said "may have happened", so the counts were the
 * host's, not the seed's. The demo measures the protocol under planned faults; it waits as long
 * as it waits for its own mocks (30 s) before calling a store unavailable.
 */
const DEMO_LEDGER_TIMEOUT_MS = 30_000;

/** The demo's own table/schema/prefix per run, so repeated runs and parallel tests never share rows. */
export function defaultNamespace(runId: string): string {
  return `dispatch_once_demo_${runId}`;
}

export async function openLedger(spec: LedgerSpec, namespace: string, keep: boolean): Promise<OpenLedger> {
  const warnings: string[] = [];
  switch (spec.kind) {
    case "sqlite": {
      const { createSqliteLedger } = await import("@dispatch-once/ledger-sqlite");
      const tempDir = spec.path === undefined ? mkdtempSync(join(tmpdir(), "dispatch-once-demo-")) : undefined;
      const path = spec.path ?? join(tempDir!, "ledger.sqlite");
      // Group commit: the claims and completions that queue up while one commit waits for its
      // fsync share the next one (a third of the main thread went to per-write commits).
      const ledger = createSqliteLedger({ path, table: namespace, groupCommit: true });
      return {
        ledger,
        kind: "sqlite",
        location: `${path} (table ${namespace})`,
        durability: ledger.capabilities.durability,
        warnings,
        async close() {
          await ledger.close();
          // A file the user named is theirs; the temporary one goes unless asked to keep it.
          if (tempDir !== undefined && !keep) rmSync(tempDir, { recursive: true, force: true });
          if (tempDir !== undefined && keep) warnings.push(`ledger kept at ${path}`);
        },
      };
    }
    case "postgres": {
      const [{ createPostgresLedger }, { default: pg }] = await Promise.all([import("@dispatch-once/ledger-postgres"), import("pg")]);
      // The pool waits for a connection as long as the ledger waits for an answer (a brought pool
      // keeps its own settings): a CI run once saw a completion fail as ledger_unavailable after a
      // 10 s connect on a loaded host, and that turn rightly said "may have happened".
      // Idle connections stay open for the run: each new one is a fork on the server, slowest
      // exactly when the host is loaded.
      const pool = new pg.Pool({ connectionString: spec.url, max: 8, connectionTimeoutMillis: DEMO_LEDGER_TIMEOUT_MS, idleTimeoutMillis: 0 });
      pool.on("error", () => {});
      let schemaExisted: boolean;
      try {
        const { rows } = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_namespace WHERE nspname = $1", [namespace]);
        schemaExisted = (rows[0]?.n ?? 0) > 0;
      } catch (error) {
        await pool.end();
        throw new Error(`cannot reach PostgreSQL at ${redact(spec.url)}: ${(error as Error).message}`, { cause: error });
      }
      const ledger = createPostgresLedger({ pool, schema: namespace, table: "ledger", timeoutMs: DEMO_LEDGER_TIMEOUT_MS });
      await ledger.migrate();
      return {
        ledger,
        kind: "postgres",
        location: `${redact(spec.url)} (table ${namespace}.ledger)`,
        durability: ledger.capabilities.durability,
        warnings,
        async close() {
          await ledger.close();
          // Only a schema this run created is dropped; an existing one is left as it was.
          if (!keep && !schemaExisted) await pool.query(`DROP SCHEMA IF EXISTS "${namespace}" CASCADE`);
          await pool.end();
        },
      };
    }
    case "redis": {
      const [{ LEDGER_REDIS_OPTIONS, createRedisLedger }, { Redis }] = await Promise.all([import("@dispatch-once/ledger-redis"), import("ioredis")]);
      // The ledger refuses clients that could re-send a claim after a reconnect (issue 18).
      const client = new Redis(spec.url, { ...LEDGER_REDIS_OPTIONS, lazyConnect: true });
      try {
        await client.connect();
      } catch (error) {
        client.disconnect();
        throw new Error(`cannot reach Redis at ${redact(spec.url)}: ${(error as Error).message}`, { cause: error });
      }
      const prefix = `dispatch-once-demo:${namespace}`;
      const ledger = await createRedisLedger({ client, prefix, commandTimeoutMs: DEMO_LEDGER_TIMEOUT_MS, onWarning: (m) => warnings.push(m) });
      return {
        ledger,
        kind: "redis",
        location: `${redact(spec.url)} (keys ${prefix}:*)`,
        durability: ledger.capabilities.durability,
        warnings,
        async close() {
          await ledger.close();
          if (!keep) {
            // Delete only this run's keys: other users share the server (never FLUSHDB).
            let cursor = "0";
            do {
              const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}:*`, "COUNT", 1000);
              cursor = next;
              if (keys.length > 0) await client.unlink(...keys);
            } while (cursor !== "0");
          }
          client.disconnect();
        },
      };
    }
  }
}

function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password !== "") u.password = "***";
    return u.toString();
  } catch {
    return url;
  }
}
