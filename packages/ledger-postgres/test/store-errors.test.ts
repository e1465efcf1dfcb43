import { randomBytes } from "node:crypto";
import { Dispatcher, defineTool, effectOf, isDispatchOnceError, retryableOf, type DispatchEvent } from "@dispatch-once/core";
import pg from "pg";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, uniqueSchema } from "./helpers.js";

// The server answers, but with an error class of its own (LEDGER-12, DISPATCH-10): a read-only
// session after a failover (25006), a table renamed or dropped under a running ledger (42P01), the
// ledger's backend terminated (57P01 admin_shutdown, what a "fast" shutdown sends) or its statement
// cancelled (57014) while it waits on a lock. Each is produced for real, on a role and a schema of
// this file's own (ALTER ROLE on that role only; the shared server's settings are never changed).
// The oracle: what the caller is told (code, effectOf, retryableOf), how often the tool ran, the
// row the table holds, and that the ledger answers again once the cause is gone.

const role = `do_test_storeerr_${randomBytes(4).toString("hex")}`;
let admin: pg.Pool;
const schemas: string[] = [];
const ledgers: PostgresLedger[] = [];

beforeAll(async () => {
  admin = adminPool();
  await admin.query(`CREATE ROLE ${role} LOGIN`);
  // migrate() creates its schema IF NOT EXISTS, which asks for CREATE on the database.
  await admin.query(`GRANT CREATE ON DATABASE "${new URL(DATABASE_URL).pathname.slice(1)}" TO ${role}`);
});

afterEach(async () => {
  await admin.query(`ALTER ROLE ${role} RESET ALL`);
  await Promise.all(ledgers.splice(0).map((l) => l.close()));
});

afterAll(async () => {
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
  // The grant and anything else the role owns go with it (its schemas were dropped above).
  await admin.query(`DROP OWNED BY ${role}`);
  await admin.query(`DROP ROLE IF EXISTS ${role}`);
  await admin.end();
});

/** A ledger that connects as this file's role, on a schema that role owns, with one connection. */
async function subject(options: { timeoutMs?: number } = {}) {
  const schema = uniqueSchema("storeerr");
  schemas.push(schema);
  await admin.query(`CREATE SCHEMA "${schema}" AUTHORIZATION ${role}`);
  const url = new URL(DATABASE_URL);
  url.username = role;
  const ledger = new PostgresLedger({ connectionString: url.toString(), schema, timeoutMs: options.timeoutMs ?? 5000, poolConfig: { max: 1 } });
  ledgers.push(ledger);
  await ledger.migrate();
  const effects: string[] = [];
  let during: (() => Promise<void>) | undefined;
  const tool = defineTool({
    name: "send_payment",
    effect: "unkeyed_write",
    // A pass-through schema: the test is about the store's refusals, not validation (no zod here).
    input: { safeParse: (value: unknown) => ({ success: true, data: value }) } as never,
    async run(_args, ctx) {
      effects.push(ctx.idempotencyKey);
      await during?.();
      return { paymentId: `pay_${effects.length}` };
    },
  });
  const events: DispatchEvent[] = [];
  const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 5, claimRetryMs: 50, recordRetryMs: 50, onEvent: (e) => events.push(e) });
  const dispatch = () => dispatcher.turn({ conversationId: "conv_storeerr", turnIndex: 0 }).dispatch({ name: "send_payment", input: { payee: "acme", amount: 125 } });
  const rows = async () =>
    (await admin.query<{ state: string; fence: number }>(`SELECT state, fence FROM "${schema}".dispatch_once_ledger ORDER BY key`)).rows.map((r) => [r.state, Number(r.fence)]);
  return { schema, ledger, effects, events, dispatch, rows, setDuring: (fn: () => Promise<void>) => (during = fn) };
}

async function refusal(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error("expected a refusal");
}

/**
 * After its sessions were terminated, the pool may still hand out a connection whose end it has not
 * read yet (57P01 on its first statement, on a loaded host): a read drops each such connection, so
 * read until one answers. Nothing is written, so nothing is judged here.
 */
async function untilPoolReconnected(ledger: PostgresLedger): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await ledger.lookup("reconnect-probe");
      return;
    } catch (error) {
      if (attempt >= 10 || !isDispatchOnceError(error, "ledger_unavailable")) throw error;
    }
  }
}

/** New sessions of the role are read-only (a replica, or default_transaction_read_only after a failover); its open ones are ended. */
async function readOnly(): Promise<void> {
  await admin.query(`ALTER ROLE ${role} SET default_transaction_read_only = on`);
  await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
}

/**
 * Hold the ledger's table locked from another session, wait until the ledger's statement waits on
 * it, then end that statement with `signal` (pg_terminate_backend: 57P01, pg_cancel_backend:
 * 57014), and let the table go.
 */
async function whileWaiting(schema: string, signal: "pg_terminate_backend" | "pg_cancel_backend", operation: () => Promise<unknown>): Promise<unknown> {
  const locker = await admin.connect();
  try {
    await locker.query("BEGIN");
    await locker.query(`LOCK TABLE "${schema}".dispatch_once_ledger IN ACCESS EXCLUSIVE MODE`);
    let settled = false;
    const outcome = refusal(operation()).finally(() => (settled = true));
    // Until the statement waits on the lock, or the operation settles without having waited: a count of
    // polls would bound how soon a loaded host opens the ledger's session.
    for (;;) {
      const { rowCount } = await admin.query(`SELECT ${signal}(pid) FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'`, [role]);
      if (rowCount !== null && rowCount > 0) break;
      if (settled) throw new Error(`the ledger's statement never waited on the lock: it settled with ${String(await outcome.catch((e: unknown) => e))}`);
      await new Promise((r) => setTimeout(r, 10));
    }
    return await outcome;
  } finally {
    await locker.query("ROLLBACK");
    locker.release();
  }
}

describe("PostgreSQL answers with an error class of its own", () => {
  it("LEDGER-12 DISPATCH-10 25006 read-only at the claim: ledger_unavailable naming the cause, retryable; the tool does not run, no row; once writable the call runs once", async () => {
    const s = await subject();
    await readOnly();
    // The pool's connection from migrate() was terminated; on a loaded host the claim could be handed
    // it before its end is read and fail 57P01 instead (CI, 2026-12-06): a read first lands on a new,
    // read-only session (reads pass there).
    await untilPoolReconnected(s.ledger);
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/read-only transaction \(25006\)/);
    expect([effectOf(error), retryableOf(error)]).toEqual(["possibly", "same_message"]);
    expect(s.effects).toHaveLength(0);
    expect(await s.rows()).toEqual([]);
    await admin.query(`ALTER ROLE ${role} RESET ALL`);
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    await untilPoolReconnected(s.ledger);
    expect(await s.dispatch()).toMatchObject({ replayed: false, result: { paymentId: "pay_1" } });
    expect(await s.rows()).toEqual([["completed", 1]]);
    expect(s.effects).toHaveLength(1);
  });

  it("DISPATCH-10 25006 read-only at the completion, after the payment ran: ledger_unavailable (effect happened: the run returned its result, ERR-4; never failed), the row in flight at fence 1, the tool ran once", async () => {
    const s = await subject();
    s.setDuring(readOnly);
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/25006/);
    // The run returned its result: the effect happened and a re-send cannot help (DISPATCH-10, ERR-4).
    expect([effectOf(error), retryableOf(error)]).toEqual(["yes", "no"]);
    expect(s.events.find((e) => e.type === "record_failed")).toMatchObject({ write: "complete", state: "completed" });
    expect(await s.rows()).toEqual([["in_flight", 1]]);
    expect(s.effects).toHaveLength(1);
  });

  it("DISPATCH-10 42P01 the table renamed away after the payment ran: ledger_unavailable that says to check the migration, the row kept in flight", async () => {
    const s = await subject();
    s.setDuring(async () => {
      await admin.query(`ALTER TABLE "${s.schema}".dispatch_once_ledger RENAME TO moved`);
    });
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/does not exist \(42P01\) \(has migrate\(\) been run\?\)/);
    // The run returned its result: the effect happened and a re-send cannot help (DISPATCH-10, ERR-4).
    expect([effectOf(error), retryableOf(error)]).toEqual(["yes", "no"]);
    await admin.query(`ALTER TABLE "${s.schema}".moved RENAME TO dispatch_once_ledger`);
    expect(await s.rows()).toEqual([["in_flight", 1]]);
    expect(s.effects).toHaveLength(1);
  });

  it("ERR-5 LEDGER-12 55P03 a lock held past the role's lock_timeout at the claim: ledger_unavailable naming it; the tool does not run, nothing written", async () => {
    const s = await subject();
    await s.ledger.lookup("warm-up");
    await admin.query(`ALTER ROLE ${role} SET lock_timeout = '50ms'`);
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    const locker = await admin.connect();
    try {
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${s.schema}".dispatch_once_ledger IN ACCESS EXCLUSIVE MODE`);
      const error = await refusal(s.dispatch());
      expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
      expect((error as Error).message).toMatch(/55P03/);
      expect(retryableOf(error)).toBe("same_message");
    } finally {
      await locker.query("ROLLBACK");
      locker.release();
    }
    expect(s.effects).toHaveLength(0);
    expect(await s.rows()).toEqual([]);
  });

  it("ERR-5 53100 disk_full, SIMULATED (a trigger raises that SQLSTATE; a real full disk is not produced here) at the completion after the payment ran: ledger_unavailable, effect happened (ERR-4), the row in flight", async () => {
    const s = await subject();
    await admin.query(`CREATE FUNCTION "${s.schema}".disk_full() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = '53100'; END $$`);
    s.setDuring(async () => {
      await admin.query(`CREATE TRIGGER disk_full BEFORE UPDATE ON "${s.schema}".dispatch_once_ledger FOR EACH ROW EXECUTE FUNCTION "${s.schema}".disk_full()`);
    });
    const error = await refusal(s.dispatch());
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/No space left on device \(53100\)/);
    // The run returned its result: the effect happened and a re-send cannot help (DISPATCH-10, ERR-4).
    expect([effectOf(error), retryableOf(error)]).toEqual(["yes", "no"]);
    expect(await s.rows()).toEqual([["in_flight", 1]]);
    expect(s.effects).toHaveLength(1);
  });

  it.each([
    ["pg_terminate_backend", /57P01/],
    ["pg_cancel_backend", /57014/],
  ] as const)("ERR-5 LEDGER-12 %s of the ledger's backend while its statement waits: ledger_unavailable, and the ledger's next operation answers (the connection is not handed out again)", async (signal, said) => {
    const s = await subject();
    await s.ledger.lookup("warm-up");
    const error = await whileWaiting(s.schema, signal, () => s.ledger.lookup("k1"));
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(said);
    // The only connection of the pool is the one the server ended (57P01): it must not be reused.
    await expect(s.ledger.lookup("k1")).resolves.toBeUndefined();
    await expect(s.ledger.claim({ key: "k2", toolName: "send_payment", effect: "unkeyed_write", owner: "o", leaseMs: 30_000, request: "{}" })).resolves.toMatchObject({ outcome: "claimed", fence: 1 });
  });
});
