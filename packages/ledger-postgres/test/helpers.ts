import { randomBytes } from "node:crypto";
import { createServer } from "node:net";
import pg from "pg";
import { PostgresLedger, type PostgresLedgerOptions } from "../src/index.js";

export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

/** A schema name no one else uses: every test file and fixture gets its own, and drops only that. */
export function uniqueSchema(tag: string): string {
  return `do_test_${tag}_${randomBytes(5).toString("hex")}`;
}

/**
 * A pool for the tests' own direct SQL. Connecting fails loudly when the server is
 * missing: these tests are never skipped.
 */
export function adminPool(max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max, connectionTimeoutMillis: 10_000 });
  pool.on("error", () => {});
  return pool;
}

export async function dropSchema(pool: pg.Pool | pg.Client, schema: string): Promise<void> {
  if (!schema.startsWith("do_test_")) throw new Error(`refusing to drop ${schema}: not a test schema`);
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

/** A loopback port with nothing listening on it (bound to port 0, then closed). */
export async function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") return reject(new Error("no port"));
      server.close(() => resolve(address.port));
    });
  });
}

export function closedUrl(port: number): string {
  return `postgres://postgres@127.0.0.1:${port}/test`;
}

/** Server-clock now, epoch ms, as the ledger measures it. */
export async function serverNow(pool: pg.Pool | pg.Client): Promise<number> {
  const { rows } = await pool.query(`SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS now`);
  return Number(rows[0].now);
}

export function table(schema: string, name = "dispatch_once_ledger"): string {
  return `"${schema}"."${name}"`;
}

/** The stored row, columns as PostgreSQL holds them (bigints as strings), or undefined. */
export async function storedColumns(
  pool: pg.Pool | pg.Client,
  schema: string,
  key: string,
  name?: string,
): Promise<Record<string, unknown> | undefined> {
  const { rows } = await pool.query(`SELECT * FROM ${table(schema, name)} WHERE key = $1`, [key]);
  return rows[0];
}

/**
 * The stored row decoded by the test itself (not by the adapter), with core's LedgerRow
 * field names: only the fields of its state, like the reference ledger.
 */
export async function readStoredRow(
  pool: pg.Pool | pg.Client,
  schema: string,
  key: string,
  name?: string,
): Promise<Record<string, unknown> | undefined> {
  const c = await storedColumns(pool, schema, key, name);
  if (c === undefined) return undefined;
  const row: Record<string, unknown> = {
    key: c.key,
    toolName: c.tool_name,
    effect: c.effect,
    fence: Number(c.fence),
    claimedAt: Number(c.claimed_at),
    request: c.request,
    state: c.state,
  };
  switch (c.state) {
    case "in_flight":
      row.owner = c.owner;
      row.leaseExpiresAt = Number(c.lease_expires_at);
      break;
    case "completed":
      row.result = c.result;
      row.finishedAt = Number(c.finished_at);
      break;
    case "failed":
      row.error = JSON.parse(String(c.error));
      row.finishedAt = Number(c.finished_at);
      break;
    case "unknown":
      row.reason = c.reason;
      row.finishedAt = Number(c.finished_at);
      break;
    case "released":
      row.finishedAt = Number(c.finished_at);
      break;
  }
  return row;
}

/** Put the key's in-flight lease 1 ms in the past on the server clock. */
export async function expireLease(pool: pg.Pool | pg.Client, schema: string, key: string, name?: string): Promise<void> {
  const { rowCount } = await pool.query(
    `UPDATE ${table(schema, name)}
        SET lease_expires_at = floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint - 1
      WHERE key = $1 AND state = 'in_flight'`,
    [key],
  );
  if (rowCount !== 1) throw new Error(`expireLease: ${key} has no in-flight claim`);
}

/**
 * Let a finished row's retention pass, as if time had gone by: every timestamp of the row
 * moves back by the same amount, so expires_at lies 1 ms in the past and the row's own
 * history stays consistent (claimed_at <= finished_at, expires_at = finished_at + retention).
 */
export async function expireRetention(pool: pg.Pool | pg.Client, schema: string, key: string, name?: string): Promise<void> {
  const { rowCount } = await pool.query(
    `UPDATE ${table(schema, name)} AS r
        SET claimed_at = r.claimed_at - s.shift, finished_at = r.finished_at - s.shift, expires_at = r.expires_at - s.shift
       FROM (SELECT expires_at - floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint + 1 AS shift
               FROM ${table(schema, name)} WHERE key = $1) AS s
      WHERE r.key = $1 AND r.state <> 'in_flight'`,
    [key],
  );
  if (rowCount !== 1) throw new Error(`expireRetention: ${key} has no finished row`);
}

/** A table's columns as information_schema describes them, in order: to compare an upgraded table with a fresh one. */
export async function tableShape(pool: pg.Pool | pg.Client, schema: string, name = "dispatch_once_ledger"): Promise<Record<string, unknown>[]> {
  const { rows } = await pool.query(
    `SELECT column_name, data_type, is_nullable, ordinal_position FROM information_schema.columns
      WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
    [schema, name],
  );
  return rows;
}

/** A ledger in a brand-new schema, migrated. */
export async function freshLedger(
  pool: pg.Pool,
  tag: string,
  options: Omit<PostgresLedgerOptions, "pool" | "connectionString" | "schema"> = {},
): Promise<{ ledger: PostgresLedger; schema: string }> {
  const schema = uniqueSchema(tag);
  const ledger = new PostgresLedger({ pool, schema, ...options });
  await ledger.migrate();
  return { ledger, schema };
}
