import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { LEASE_GRANT_RETENTION_MS, isDispatchOnceError, type JsonValue } from "@dispatch-once/core";
import { NOW_MS, PostgresConversationStore, schemaSql } from "../src/index.js";
import { DATABASE_URL, adminPool, closedPort, dropSchema, uniqueSchema } from "./helpers.js";

const admin = adminPool();
const schemas: string[] = [];
afterAll(async () => {
  for (const s of schemas) await dropSchema(admin, s);
  await admin.end();
});

async function fresh(tag: string, options: Partial<ConstructorParameters<typeof PostgresConversationStore>[0]> = {}): Promise<{ store: PostgresConversationStore; schema: string }> {
  const schema = uniqueSchema(tag);
  schemas.push(schema);
  const store = new PostgresConversationStore({ connectionString: DATABASE_URL, schema, ...options } as never);
  await store.migrate();
  return { store, schema };
}

async function rejectsWith(promise: Promise<unknown>, code: string, field?: string): Promise<unknown> {
  const error = await promise.then(
    (value) => {
      throw new Error(`expected ${code}, resolved with ${JSON.stringify(value)}`);
    },
    (e: unknown) => e,
  );
  expect(isDispatchOnceError(error, code as never), String(error)).toBe(true);
  if (field !== undefined) expect((error as { field?: string }).field).toBe(field);
  return error;
}

function throwsWith(fn: () => unknown, code: string, field?: string): void {
  try {
    fn();
  } catch (error) {
    expect(isDispatchOnceError(error, code as never), String(error)).toBe(true);
    if (field !== undefined) expect((error as { field?: string }).field).toBe(field);
    return;
  }
  throw new Error(`expected ${code}`);
}

const user = (text: string): JsonValue => ({ role: "user", content: [{ type: "text", text }] });

describe("TURN-14 restart: a store closed and opened again (a new instance, a new pool) sees everything", () => {
  it("messages in every state, turns, the log, records, the held lease and its fence, and the binding", async () => {
    const { store: first, schema } = await fresh("restart");
    const c = "restart-1";
    for (const id of ["m1", "m2", "m3", "m4"]) await first.appendUserMessage(c, { id, content: user(`${id}: Zahlung an Zoë 😀`) });
    const lease = await first.acquireLease(c, "worker-a", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await first.beginTurn(c, lease.fence);
    await first.commitTurn(c, { fence: lease.fence, messageId: "m1", turnIndex: 0, assistant: { tool: "use" }, toolResults: { tool: "result" }, stopReason: "tool_use", answers: false });
    await first.commitTurn(c, { fence: lease.fence, messageId: "m1", turnIndex: 1, assistant: { text: "done" }, stopReason: null, answers: true });
    await first.beginTurn(c, lease.fence);
    await first.failMessage(c, lease.fence, "m2", { failed: "m2", effects: ["may_have_happened"] });
    await first.addRecord(c, { superseded: true });
    const bound = await first.beginTurn(c, lease.fence);
    const read = async (s: PostgresConversationStore) => ({
      messages: await Promise.all(["m1", "m2", "m3", "m4"].map((id) => s.message(c, id))),
      turns: await s.turnsOf(c, "m1"),
      log: await s.log(c),
      records: await s.records(c),
    });
    const before = await read(first);
    await first.close();
    await rejectsWith(first.log(c), "store_unavailable");

    const second = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    expect(await read(second)).toEqual(before);
    expect(before.messages.map((m) => m?.state)).toEqual(["answered", "failed", "in_progress", "queued"]);
    expect(await second.acquireLease(c, "worker-b", 1000)).toMatchObject({ acquired: false, owner: "worker-a" });
    // The same binding, continued: not bound by this call (TURN-11).
    expect(await second.beginTurn(c, lease.fence)).toEqual({ ...bound, bound: false });
    await second.releaseLease(c, lease.fence);
    await second.close();

    const third = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    expect(await third.acquireLease(c, "worker-c", 1000)).toMatchObject({ acquired: true, fence: lease.fence + 1 });
    await third.close();
  });
});

describe("TURN-15 resumed, in the database", () => {
  it("tables made before begun_turn/begun_fence existed get them from migrate(); a turn under way then is resumed, a finished one is not", async () => {
    const { store: old, schema } = await fresh("legacy");
    for (const c of ["legacy-a", "legacy-b", "legacy-c"]) await old.appendUserMessage(c, { id: "m1", content: user(`${c} pay alice`) });
    const fences: Record<string, number> = {};
    for (const c of ["legacy-a", "legacy-b", "legacy-c"]) {
      const lease = await old.acquireLease(c, "worker-a", 600_000);
      if (!lease.acquired) throw new Error("not acquired");
      fences[c] = lease.fence;
      await old.beginTurn(c, lease.fence);
    }
    await old.commitTurn("legacy-b", { fence: fences["legacy-b"]!, messageId: "m1", turnIndex: 0, assistant: { text: "done" }, stopReason: "end_turn", answers: true });
    await old.failMessage("legacy-c", fences["legacy-c"]!, "m1", { failed: "m1" });
    await old.releaseLease("legacy-b", fences["legacy-b"]!);
    await old.releaseLease("legacy-c", fences["legacy-c"]!);
    await old.close();
    // What an earlier version's tables look like: no begun_turn, no begun_fence.
    await admin.query(`ALTER TABLE "${schema}".dispatch_once_conversations DROP COLUMN begun_turn, DROP COLUMN begun_fence`);

    const upgraded = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    await rejectsWith(upgraded.beginTurn("legacy-a", fences["legacy-a"]!), "store_unavailable"); // not migrated yet: refused, never answered
    await upgraded.migrate();
    // Who began legacy-a's turn 0 is unknown (it may be a paused worker of the old version): resumed, even for the same fence.
    expect(await upgraded.beginTurn("legacy-a", fences["legacy-a"]!)).toMatchObject({ turnIndex: 0, resumed: true });
    await upgraded.appendUserMessage("legacy-b", { id: "m2", content: user("pay bob") });
    const b = await upgraded.acquireLease("legacy-b", "worker-b", 600_000);
    if (!b.acquired) throw new Error("not acquired");
    expect(await upgraded.beginTurn("legacy-b", b.fence)).toMatchObject({ turnIndex: 1, resumed: false });
    expect((await upgraded.appendUserMessage("legacy-c", { id: "m1", content: user("legacy-c pay alice") })).reopened).toBe(true);
    const c = await upgraded.acquireLease("legacy-c", "worker-c", 600_000);
    if (!c.acquired) throw new Error("not acquired");
    expect(await upgraded.beginTurn("legacy-c", c.fence)).toMatchObject({ turnIndex: 0, resumed: true });
    await upgraded.migrate(); // idempotent: nothing is marked again
    expect(await upgraded.beginTurn("legacy-b", b.fence)).toMatchObject({ turnIndex: 1, resumed: false });
    await upgraded.close();
  });
});

describe("TURN-10 leases are measured on the server's clock", () => {
  it("leaseExpiresAt is the server's now plus the lease, and a lease past it is taken over", async () => {
    const { store, schema } = await fresh("clock");
    const { rows } = await admin.query(`SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now`);
    const serverBefore = Number(rows[0].now);
    const lease = await store.acquireLease("clock", "a", 60_000);
    if (!lease.acquired) throw new Error("not acquired");
    expect(lease.leaseExpiresAt).toBeGreaterThanOrEqual(serverBefore + 60_000);
    expect(lease.leaseExpiresAt).toBeLessThan(serverBefore + 60_000 + 5_000);
    // The lease ends at the server's now: the next acquire (in a later statement) takes it over.
    await admin.query(`UPDATE "${schema}".dispatch_once_conversations SET lease_expires_at = floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`);
    expect(await store.acquireLease("clock", "b", 60_000)).toMatchObject({ acquired: true, fence: 2 });
    await store.close();
  });
});

describe("pools, transactions and timeouts", () => {
  it("only a pg.Pool is accepted (a Client could be inside the application's transaction); a brought pool is not ended", async () => {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    throwsWith(() => new PostgresConversationStore({ pool: client as never }), "invalid_store_input", "pool");
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
    const poolClient = await pool.connect();
    throwsWith(() => new PostgresConversationStore({ pool: poolClient as never }), "invalid_store_input", "pool");
    poolClient.release();
    const schema = uniqueSchema("byo");
    schemas.push(schema);
    const store = new PostgresConversationStore({ pool, schema });
    await store.migrate();
    await store.appendUserMessage("byo", { id: "m1", content: "hi" });
    await store.close();
    expect((await pool.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    await pool.end();
  });

  it("a conversation row locked past statementTimeoutMs fails the write with store_unavailable, and nothing is written", async () => {
    const { store, schema } = await fresh("timeout", { statementTimeoutMs: 300 });
    await store.appendUserMessage("locked", { id: "m1", content: "first" });
    const holder = await admin.connect();
    try {
      await holder.query("BEGIN");
      await holder.query(`SELECT 1 FROM "${schema}".dispatch_once_conversations WHERE conversation_id = 'locked' FOR UPDATE`);
      const started = Date.now();
      const error = await rejectsWith(store.appendUserMessage("locked", { id: "m2", content: "second" }), "store_unavailable");
      expect(String(error)).toMatch(/statement timeout/);
      expect(Date.now() - started).toBeLessThan(5_000);
      await rejectsWith(store.acquireLease("locked", "a", 1000), "store_unavailable");
    } finally {
      await holder.query("ROLLBACK");
      holder.release();
    }
    expect(await store.message("locked", "m2")).toBeUndefined();
    expect(await store.acquireLease("locked", "a", 1000)).toMatchObject({ acquired: true, fence: 1 });
    await store.close();
  });

  it("TURN-10 on your own pool too, a transaction whose process stops inside it (SIGSTOP, a frozen container, a partition) is ended by the server after idle_in_transaction_session_timeout: its conversation's row lock is not held for good", async () => {
    const schema = uniqueSchema("idle");
    schemas.push(schema);
    // A pool without the session defaults the store gives a pool of its own.
    const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    const store = new PostgresConversationStore({ pool, schema, statementTimeoutMs: 2_000 });
    await store.migrate();
    // What the server would apply if the process stopped right before its COMMIT, read on the transaction's own connection.
    let inForce: string | undefined;
    const connect = pool.connect.bind(pool) as () => Promise<pg.PoolClient>;
    (pool as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
      const client = await connect();
      const query = client.query.bind(client) as (...args: unknown[]) => Promise<pg.QueryResult>;
      (client as unknown as { query: unknown }).query = async (...args: unknown[]) => {
        if (args[0] === "COMMIT") inForce = String((await query("SHOW idle_in_transaction_session_timeout")).rows[0].idle_in_transaction_session_timeout);
        return query(...args);
      };
      return client;
    };
    await store.appendUserMessage("idle", { id: "m1", content: "hi" });
    expect(inForce).toBe("30s");
    await store.close();
    await pool.end();
  });

  it("an unreachable server is store_unavailable; tables that were never migrated say so", async () => {
    const down = new PostgresConversationStore({ connectionString: `postgres://postgres@127.0.0.1:${await closedPort()}/test`, poolConfig: { connectionTimeoutMillis: 2_000 } });
    await rejectsWith(down.appendUserMessage("x", { id: "m1", content: 1 }), "store_unavailable");
    await rejectsWith(down.migrate(), "store_unavailable");
    await down.close();
    const schema = uniqueSchema("nomigrate");
    schemas.push(schema);
    const unmigrated = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    const error = await rejectsWith(unmigrated.log("x"), "store_unavailable");
    expect(String(error)).toMatch(/has migrate\(\) been run/);
    // Across conversations there is no id to name: no "listFailedTurns of  failed".
    const listed = await rejectsWith(unmigrated.listFailedTurns(), "store_unavailable");
    expect((listed as Error).message).toMatch(/^PostgreSQL conversation store listFailedTurns failed: /);
    await unmigrated.close();
  });

  it("migrate is idempotent and safe from several stores at once", async () => {
    const schema = uniqueSchema("migrate");
    schemas.push(schema);
    const stores = Array.from({ length: 4 }, () => new PostgresConversationStore({ connectionString: DATABASE_URL, schema }));
    await Promise.all(stores.map((s) => s.migrate()));
    await stores[0]!.migrate();
    expect(stores[0]!.schemaSql()).toBe(schemaSql(schema));
    for (const s of stores) await s.close();
  });
});

describe("bad input is refused with invalid_store_input before anything is stored", () => {
  it("content PostgreSQL or JSON cannot carry, ids with NUL, lease arguments, options", async () => {
    const { store } = await fresh("inputs");
    for (const value of [{ n: Number.NaN }, undefined, "\ud800", new Date(0), { n: 1n }]) {
      await rejectsWith(store.appendUserMessage("bad", { id: "m1", content: value as JsonValue }), "invalid_store_input", "content");
    }
    // JSON escapes U+0000 inside strings: content with it round-trips; an id with it is refused.
    await store.appendUserMessage("bad", { id: "m-nul-content", content: "a\u0000b" });
    expect((await store.message("bad", "m-nul-content"))?.content).toBe("a\u0000b");
    await rejectsWith(store.appendUserMessage("bad", { id: "m\u0000", content: 1 }), "invalid_store_input", "messageId");
    await rejectsWith(store.acquireLease("bad", "a\u0000", 1000), "invalid_store_input", "owner");
    for (const leaseMs of [-1, Number.NaN, 400 * 24 * 3600 * 1000]) await rejectsWith(store.acquireLease("bad", "a", leaseMs), "invalid_store_input", "leaseMs");
    await rejectsWith(store.log("bad id"), "invalid_store_input", "conversationId");
    for (const fence of [0, 1.5, -1]) await rejectsWith(store.beginTurn("bad", fence), "conversation_lease_lost");
    await store.appendUserMessage("bad", { id: "m1", content: "ok" });
    const lease = await store.acquireLease("bad", "a", 60_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("bad", lease.fence);
    const commit = { fence: lease.fence, messageId: "m-nul-content", turnIndex: 0, assistant: "a" as JsonValue, stopReason: null, answers: true };
    await rejectsWith(store.commitTurn("bad", { ...commit, assistant: { n: Number.POSITIVE_INFINITY } }), "invalid_store_input", "assistant");
    await rejectsWith(store.commitTurn("bad", { ...commit, stopReason: "x\u0000" }), "invalid_store_input", "stopReason");
    expect(await store.commitTurn("bad", { ...commit, turnIndex: 0.5 })).toEqual({ committed: false });
    expect(await store.commitTurn("bad", commit)).toEqual({ committed: true });
    await store.close();
    throwsWith(() => new PostgresConversationStore({} as never), "invalid_store_input", "pool");
    throwsWith(() => new PostgresConversationStore({ connectionString: DATABASE_URL, schema: "bad-schema" }), "invalid_store_input", "schema");
    throwsWith(() => new PostgresConversationStore({ connectionString: DATABASE_URL, tablePrefix: "x".repeat(41) }), "invalid_store_input", "tablePrefix");
    throwsWith(() => new PostgresConversationStore({ connectionString: DATABASE_URL, statementTimeoutMs: 0 }), "invalid_store_input", "statementTimeoutMs");
    // TURN-21's bound: a whole number of ms a timer can hold (past 2^31 - 1 ms setTimeout fires at once).
    for (const timeoutMs of [0, -1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 31, "300" as never]) {
      throwsWith(() => new PostgresConversationStore({ connectionString: DATABASE_URL, timeoutMs }), "invalid_store_input", "timeoutMs");
    }
    throwsWith(() => new PostgresConversationStore({ connectionString: DATABASE_URL, durability: "maybe" as never }), "invalid_store_input", "durability");
  });

  it("content is stored as JSON text (not jsonb) with the caller's member order; capabilities are declared", async () => {
    const { store, schema } = await fresh("layout");
    await store.appendUserMessage("layout", { id: "m1", content: { z: 1, a: "é", n: [1.5, -0.25] } });
    const { rows } = await admin.query(`SELECT content FROM "${schema}".dispatch_once_messages`);
    expect(rows).toEqual([{ content: '{"z":1,"a":"é","n":[1.5,-0.25]}' }]);
    expect(store.capabilities).toEqual({ durability: "durable", clock: "store", sharedAcrossProcesses: true, recordsWithCommit: true, supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true } });
    await store.close();
    const volatile = new PostgresConversationStore({ connectionString: DATABASE_URL, durability: "volatile" });
    expect(volatile.capabilities.durability).toBe("volatile");
    await volatile.close();
  });
});

describe("TURN-17 listFailedTurns: failed messages across conversations, oldest failure first, paged", () => {
  async function failNext(store: PostgresConversationStore, c: string, id: string): Promise<void> {
    await store.appendUserMessage(c, { id, content: user(`${c} ${id}`) });
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn(c, lease.fence);
    await store.failMessage(c, lease.fence, id, { failed: id, conversation: c });
    await store.releaseLease(c, lease.fence);
  }

  it("lists them in failure order; filters by conversation and age; pages by cursor; a reopened message leaves the list", async () => {
    const { store } = await fresh("failed");
    await failNext(store, "conv-b", "m1");
    await failNext(store, "conv-a", "m1");
    await failNext(store, "conv-b", "m2");
    await store.appendUserMessage("conv-c", { id: "m1", content: user("queued, never failed") });

    const all = await store.listFailedTurns();
    expect(all.cursor).toBeUndefined();
    // Failures in the same millisecond order by conversation id, then message id: sort to compare.
    const order = (t: { failedAt: number; conversationId: string; messageId: string }) => `${String(t.failedAt).padStart(16, "0")} ${t.conversationId} ${t.messageId}`;
    expect(all.turns.map(order)).toEqual(all.turns.map(order).sort());
    expect(all.turns.map((t) => [t.conversationId, t.messageId, t.turnIndex, t.failure, t.reopenable]).sort()).toEqual([
      ["conv-a", "m1", 0, { failed: "m1", conversation: "conv-a" }, true],
      // conv-b's m2 was bound after m1 failed: a re-send of m1 no longer reopens it (TURN-12).
      ["conv-b", "m1", 0, { failed: "m1", conversation: "conv-b" }, false],
      ["conv-b", "m2", 0, { failed: "m2", conversation: "conv-b" }, true],
    ]);
    expect(Math.abs((all.turns[0]?.failedAt ?? 0) - Date.now())).toBeLessThan(3_600_000);
    expect((await store.listFailedTurns({ conversationId: "conv-b" })).turns.map((t) => t.messageId)).toEqual(["m1", "m2"]);
    expect((await store.listFailedTurns({ olderThanMs: 3_600_000 })).turns).toEqual([]);

    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.listFailedTurns({ limit: 1, ...(cursor !== undefined ? { cursor } : {}) });
      paged.push(...page.turns.map((t) => `${t.conversationId}/${t.messageId}`));
      cursor = page.cursor;
    } while (cursor !== undefined);
    expect(paged).toEqual(all.turns.map((t) => `${t.conversationId}/${t.messageId}`));

    expect((await store.appendUserMessage("conv-a", { id: "m1", content: user("again") })).reopened).toBe(true);
    expect((await store.listFailedTurns()).turns.map((t) => `${t.conversationId}/${t.messageId}`).sort()).toEqual(["conv-b/m1", "conv-b/m2"]);
    await rejectsWith(store.listFailedTurns({ limit: 0 }), "invalid_store_input", "limit");
    await store.close();
  });

  it("migrate() gives a messages table made before failed_at the column; messages that already failed list as failed at 0", async () => {
    const { store, schema } = await fresh("failed_upgrade");
    await failNext(store, "legacy", "m1");
    // What that table had: none of the index, the triggers and the column.
    await admin.query(
      `DROP INDEX "${schema}".dispatch_once_messages_failed;
       DROP TRIGGER dispatch_once_failed_at_insert ON "${schema}".dispatch_once_messages;
       DROP TRIGGER dispatch_once_failed_at_update ON "${schema}".dispatch_once_messages;
       ALTER TABLE "${schema}".dispatch_once_messages DROP COLUMN failed_at;
       ALTER TABLE "${schema}".dispatch_once_messages DROP COLUMN first_failed_at;
       ALTER TABLE "${schema}".dispatch_once_messages DROP COLUMN bound_at`,
    );
    await store.migrate();
    expect((await store.listFailedTurns()).turns).toEqual([{ conversationId: "legacy", messageId: "m1", turnIndex: 0, failedAt: 0, firstFailedAt: 0, failure: { failed: "m1", conversation: "legacy" }, reopenable: true }]);
    await store.close();
  });

  it("reopenable: true while the failed message is the conversation's last bound (last_bound), false once another was bound at its index; still listed; a re-send does not reopen it", async () => {
    const { store, schema } = await fresh("reopenable");
    const stored = async (c: string) => ({
      lastBound: (await admin.query(`SELECT last_bound FROM "${schema}".dispatch_once_conversations WHERE conversation_id = $1`, [c])).rows[0]?.last_bound,
      messages: (await admin.query(`SELECT message_id, state, turn_index, failure FROM "${schema}".dispatch_once_messages WHERE conversation_id = $1 ORDER BY seq`, [c])).rows,
    });
    const listed = async (c: string, s: PostgresConversationStore = store) =>
      (await s.listFailedTurns({ conversationId: c })).turns.map((t) => [t.messageId, t.turnIndex, t.reopenable, t.failure]);
    const record = { failed: "a", retryable: true };
    await store.appendUserMessage("conv-r", { id: "a", content: user("pay alice") });
    const lease = await store.acquireLease("conv-r", "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-r", lease.fence);
    await store.failMessage("conv-r", lease.fence, "a", record);
    expect(await stored("conv-r")).toEqual({ lastBound: "a", messages: [{ message_id: "a", state: "failed", turn_index: 0, failure: JSON.stringify(record) }] });
    expect(await listed("conv-r")).toEqual([["a", 0, true, record]]);

    // b is bound at a's index (TURN-12): a is no longer the most recently bound message.
    await store.appendUserMessage("conv-r", { id: "b", content: user("something else") });
    const next = await store.beginTurn("conv-r", lease.fence);
    expect([next?.message.id, next?.turnIndex]).toEqual(["b", 0]);
    expect((await stored("conv-r")).lastBound).toBe("b");
    // Still failed, so still listed, with the record as stored at the failure (retryable: true), but not reopenable.
    expect(await listed("conv-r")).toEqual([["a", 0, false, record]]);
    const resend = await store.appendUserMessage("conv-r", { id: "a", content: user("pay alice") });
    expect([resend.reopened, resend.message.state]).toEqual([false, "failed"]);
    expect((await stored("conv-r")).messages).toEqual([
      { message_id: "a", state: "failed", turn_index: 0, failure: JSON.stringify(record) },
      { message_id: "b", state: "in_progress", turn_index: 0, failure: null },
    ]);
    expect(await listed("conv-r")).toEqual([["a", 0, false, record]]);
    // b fails too: b is reopenable, a is not; a fresh instance (a new pool) reads the same.
    await store.failMessage("conv-r", lease.fence, "b", { failed: "b" });
    const reopened = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    expect((await reopened.listFailedTurns()).turns.map((t) => [t.messageId, t.reopenable])).toEqual([["a", false], ["b", true]]);
    await reopened.close();
    await store.close();
  });

  describe("in a rolling upgrade: a process of the version before failed_at still writes to the migrated tables", () => {
    // That version's own statements, verbatim (src/sql.ts before c841b92): none names failed_at.
    const legacy = (schema: string) => {
      const msgs = `"${schema}".dispatch_once_messages`;
      const recs = `"${schema}".dispatch_once_records`;
      return {
        insertMessage: `INSERT INTO ${msgs} (conversation_id, message_id, seq, state, content)
       VALUES ($1, $2, (SELECT coalesce(max(seq), 0) + 1 FROM ${msgs} WHERE conversation_id = $1), 'queued', $3) RETURNING seq`,
        reopen: `UPDATE ${msgs} SET state = 'queued', failure = NULL WHERE conversation_id = $1 AND message_id = $2`,
        fail: `WITH failed AS (UPDATE ${msgs} SET state = 'failed', failure = $3 WHERE conversation_id = $1 AND message_id = $2 RETURNING 1)
       INSERT INTO ${recs} (conversation_id, seq, record)
       SELECT $1, (SELECT coalesce(max(seq), 0) + 1 FROM ${recs} WHERE conversation_id = $1), $3 WHERE EXISTS (SELECT 1 FROM failed)`,
      };
    };
    const serverNow = async (): Promise<number> => Number((await admin.query(`SELECT ${NOW_MS} AS now`)).rows[0].now);
    const storedFailedAt = async (schema: string, c: string, m: string): Promise<string | null> =>
      (await admin.query(`SELECT failed_at FROM "${schema}".dispatch_once_messages WHERE conversation_id = $1 AND message_id = $2`, [c, m])).rows[0].failed_at;
    const ids = (page: { turns: { conversationId: string; messageId: string }[] }) => page.turns.map((t) => `${t.conversationId}/${t.messageId}`);
    async function pageByOne(store: PostgresConversationStore): Promise<string[]> {
      const out: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.listFailedTurns({ limit: 1, ...(cursor !== undefined ? { cursor } : {}) });
        out.push(...ids(page));
        cursor = page.cursor;
      } while (cursor !== undefined);
      return out;
    }
    /** Bound by the current version (the old one binds with the same statement), then failed by the old one. */
    async function failByOldVersion(store: PostgresConversationStore, schema: string, c: string, m: string): Promise<void> {
      const lease = await store.acquireLease(c, "worker", 600_000);
      if (!lease.acquired) throw new Error("not acquired");
      expect((await store.beginTurn(c, lease.fence))?.message.id).toBe(m);
      expect((await admin.query(legacy(schema).fail, [c, m, JSON.stringify({ failed: m, conversation: c })])).rowCount).toBe(1);
      await store.releaseLease(c, lease.fence);
    }

    it("a message it fails gets the server's time of that failure: listed in order, paged across, counted by olderThanMs; migrate() again changes nothing", async () => {
      const { store, schema } = await fresh("rolling");
      await failNext(store, "conv-a", "m1");
      // Appended by the old version too: its INSERT names no failed_at either.
      await admin.query(legacy(schema).insertMessage, ["conv-b", "m1", JSON.stringify(user("conv-b m1"))]);
      const before = await serverNow();
      await failByOldVersion(store, schema, "conv-b", "m1");
      const after = await serverNow();
      const stored = await storedFailedAt(schema, "conv-b", "m1");
      expect(stored).not.toBeNull();
      expect(Number(stored)).toBeGreaterThanOrEqual(before);
      expect(Number(stored)).toBeLessThanOrEqual(after);
      await failNext(store, "conv-c", "m1");

      // failedAt never decreases from a to b to c, and ties order by conversation id: a, b, c.
      const all = await store.listFailedTurns();
      expect(ids(all)).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1"]);
      expect(all.turns[1]).toEqual({ conversationId: "conv-b", messageId: "m1", turnIndex: 0, failedAt: Number(stored), firstFailedAt: Number(stored), failure: { failed: "m1", conversation: "conv-b" }, reopenable: true });
      expect(await pageByOne(store)).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1"]);
      expect(ids(await store.listFailedTurns({ olderThanMs: 0 }))).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1"]);
      expect(ids(await store.listFailedTurns({ olderThanMs: 3_600_000 }))).toEqual([]);

      // Any writer that does not know the column, inserting a failed row outright, gets the same.
      const beforeInsert = await serverNow();
      await admin.query(`INSERT INTO "${schema}".dispatch_once_messages (conversation_id, message_id, seq, state, turn_index, failure, content) VALUES ('conv-d', 'm1', 1, 'failed', 0, '{}', '"x"')`);
      expect(Number(await storedFailedAt(schema, "conv-d", "m1"))).toBeGreaterThanOrEqual(beforeInsert);
      expect(ids(await store.listFailedTurns())).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1", "conv-d/m1"]);

      const listed = await store.listFailedTurns();
      await store.migrate();
      await store.migrate();
      expect(await storedFailedAt(schema, "conv-b", "m1")).toBe(stored);
      expect(await store.listFailedTurns()).toEqual(listed);
      await store.close();
    });

    it("a message it failed before this version's migrate() ran (the column there, nothing filling it) is listed at failedAt 0 once migrate() has run", async () => {
      const { store, schema } = await fresh("rolling_before");
      // The tables as the release before this one left them: failed_at and its index, no trigger.
      await admin.query(
        `DROP TRIGGER IF EXISTS dispatch_once_failed_at_insert ON "${schema}".dispatch_once_messages;
         DROP TRIGGER IF EXISTS dispatch_once_failed_at_update ON "${schema}".dispatch_once_messages`,
      );
      await failNext(store, "conv-a", "m1");
      await store.appendUserMessage("conv-b", { id: "m1", content: user("conv-b m1") });
      await failByOldVersion(store, schema, "conv-b", "m1");
      expect(await storedFailedAt(schema, "conv-b", "m1")).toBeNull();
      // Not migrated yet: the listing names the row and the remedy rather than guess where it sorts.
      const error = await rejectsWith(store.listFailedTurns(), "store_corrupt");
      expect((error as Error).message).toMatch(/conv-b.*message m1 has no failure time.*migrate\(\)/);

      await store.migrate();
      // Its failure time was not kept: 0, the oldest (TURN-17), as for messages failed before the column existed.
      expect(await storedFailedAt(schema, "conv-b", "m1")).toBe("0");
      const all = await store.listFailedTurns();
      expect(all.turns.map((t) => [t.conversationId, t.messageId, t.failedAt === 0])).toEqual([["conv-b", "m1", true], ["conv-a", "m1", false]]);
      expect(await pageByOne(store)).toEqual(["conv-b/m1", "conv-a/m1"]);
      expect(ids(await store.listFailedTurns({ olderThanMs: 3_600_000 }))).toEqual(["conv-b/m1"]);
      await store.close();
    });

    it("its reopen leaves the earlier failure time on the queued row; its next failure is listed at that failure's time, not the earlier one", async () => {
      const { store, schema } = await fresh("rolling_refail");
      await failNext(store, "legacy", "m1");
      // A table made before failed_at (CASCADE: what reads the column goes with it), then migrated: 0.
      await admin.query(`ALTER TABLE "${schema}".dispatch_once_messages DROP COLUMN failed_at CASCADE`);
      await store.migrate();
      expect(await storedFailedAt(schema, "legacy", "m1")).toBe("0");
      // A re-send reaches the old version: its reopen does not clear failed_at.
      expect((await admin.query(legacy(schema).reopen, ["legacy", "m1"])).rowCount).toBe(1);
      const before = await serverNow();
      await failByOldVersion(store, schema, "legacy", "m1");
      expect(Number(await storedFailedAt(schema, "legacy", "m1"))).toBeGreaterThanOrEqual(before);
      const [turn] = (await store.listFailedTurns()).turns;
      expect(turn?.failedAt).toBeGreaterThanOrEqual(before);
      expect(ids(await store.listFailedTurns({ olderThanMs: 3_600_000 }))).toEqual([]);
      await store.close();
    });
  });

  it("the listing's own statement reads an index over messages and each conversation row by its primary key: no sequential scan, one statement per page", async () => {
    const { store, schema } = await fresh("failed_plan");
    const conv = `"${schema}".dispatch_once_conversations`;
    const msgs = `"${schema}".dispatch_once_messages`;
    await admin.query(`INSERT INTO ${conv} (conversation_id, last_bound) SELECT 'conv-' || i, 'm2' FROM generate_series(0, 49999) AS i`);
    await admin.query(
      `INSERT INTO ${msgs} (conversation_id, message_id, seq, state, turn_index, failure, failed_at, content)
       SELECT 'conv-' || i, 'm' || k, k, CASE WHEN i % (100 * k) = 0 THEN 'failed' ELSE 'answered' END, 0,
              CASE WHEN i % (100 * k) = 0 THEN '{}' END, CASE WHEN i % (100 * k) = 0 THEN i END, '"x"'
         FROM generate_series(0, 49999) AS i, generate_series(1, 2) AS k`,
    );
    await admin.query(`ANALYZE ${conv}; ANALYZE ${msgs}`);
    const sql = (store as unknown as { sql: { listFailed: { text: string } } }).sql.listFailed.text;
    for (const values of [
      [null, null, null, null, null, 101, null],
      [null, 5, 100, "conv-100", "m1", 101, null],
      ["conv-200", null, null, null, null, 101, 3600000],
    ]) {
      const plan = (await admin.query({ text: `EXPLAIN ${sql}`, values })).rows.map((r: { "QUERY PLAN": string }) => r["QUERY PLAN"]).join("\n");
      expect(plan, JSON.stringify(values)).toMatch(/Index (Only )?Scan using dispatch_once_messages_(failed|state) on dispatch_once_messages m/);
      expect(plan, JSON.stringify(values)).toMatch(/Index Scan using dispatch_once_conversations_pkey on dispatch_once_conversations c/);
      expect(plan, JSON.stringify(values)).not.toMatch(/Seq Scan/);
    }
    // migrate() mends failed rows without a time at every start: it reads the NULL end of the same index, no scan.
    const mend = store.schemaSql().split("\n").find((line) => line.startsWith("UPDATE") && line.includes("failed_at IS NULL"));
    expect(mend).toBeDefined();
    const mendPlan = (await admin.query(`EXPLAIN ${mend}`)).rows.map((r: { "QUERY PLAN": string }) => r["QUERY PLAN"]).join("\n");
    expect(mendPlan).toMatch(/Index (Only )?Scan (using|on) dispatch_once_messages_failed/);
    expect(mendPlan).not.toMatch(/Seq Scan/);
    const page = await store.listFailedTurns({ limit: 1000 });
    expect(page.turns).toHaveLength(750);
    expect(page.turns.filter((t) => t.reopenable).map((t) => `${t.conversationId}/${t.messageId}`)).toEqual(
      Array.from({ length: 250 }, (_, k) => `conv-${k * 200}/m2`),
    );
    await store.close();
  });
});

describe("TURN-10 lease grant ids, in the database and across versions", () => {
  const G1 = "grant-one-0123456789";
  const G2 = "grant-two-0123456789";
  // The version before grant ids, its own lease statements verbatim: none names lease_grant.
  const legacy = (schema: string) => {
    const conv = `"${schema}"."dispatch_once_conversations"`;
    return {
      grant: `UPDATE ${conv} c SET fence = c.fence + 1, lease_owner = $2, lease_expires_at = n.now + $3::bigint
       FROM (SELECT ${NOW_MS} AS now) n
       WHERE c.conversation_id = $1 AND (c.lease_owner IS NULL OR c.lease_expires_at <= n.now)
       RETURNING c.fence, c.lease_expires_at`,
      release: `UPDATE ${conv} SET lease_owner = NULL, lease_expires_at = NULL WHERE conversation_id = $1 AND lease_owner IS NOT NULL AND fence = $2`,
      lock: `SELECT fence, lease_owner, lease_expires_at, last_bound, begun_turn, begun_fence FROM ${conv} WHERE conversation_id = $1`,
    };
  };

  it("a re-sent grant id is the same grant from another pool; once released, or expired, its late copy is refused and changes nothing", async () => {
    const { store, schema } = await fresh("grants");
    const other = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    const first = await store.acquireLease("c", "w", 60_000, G1);
    expect(first).toMatchObject({ acquired: true, fence: 1 });
    const again = await other.acquireLease("c", "w", 60_000, G1);
    expect(again).toMatchObject({ acquired: true, fence: 1 });
    expect(again.leaseExpiresAt).toBeGreaterThanOrEqual(first.leaseExpiresAt);
    expect(await other.acquireLease("c", "w", 60_000, G2)).toMatchObject({ acquired: false, owner: "w" });
    await other.releaseLeaseGrant("c", G1);
    const over = (await rejectsWith(store.acquireLease("c", "w", 60_000, G1), "conversation_lease_lost")) as { fence: number };
    expect(over.fence).toBe(1);
    // Expired, nobody took it: also over.
    expect(await store.acquireLease("c", "w", 0, G2)).toMatchObject({ acquired: true, fence: 2 });
    await rejectsWith(store.acquireLease("c", "w", 60_000, G2), "conversation_lease_lost");
    const row = (await admin.query(`SELECT fence, lease_owner FROM "${schema}".dispatch_once_conversations WHERE conversation_id = 'c'`)).rows[0];
    expect(row).toEqual({ fence: "2", lease_owner: "w" });
    await rejectsWith(store.acquireLease("c", "w", 60_000, "x".repeat(65)), "invalid_store_input", "grantId");
    await rejectsWith(store.releaseLeaseGrant("c", "short"), "invalid_store_input", "grantId");
    await other.close();
    await store.close();
  });

  it("migrate() adds the columns to tables made before them; in a rolling upgrade the old version's grant is never taken for an earlier grant id", async () => {
    const { store, schema } = await fresh("grants_upgrade");
    const old = legacy(schema);
    await admin.query(`ALTER TABLE "${schema}".dispatch_once_conversations DROP COLUMN lease_grant, DROP COLUMN lease_grant_fence`);
    await rejectsWith(store.acquireLease("c", "new", 0, G1), "store_unavailable"); // not migrated yet: refused, never answered
    await store.migrate();
    await store.migrate(); // idempotent
    const columns = (await admin.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'dispatch_once_conversations'`, [schema])).rows.map((r: { column_name: string }) => r.column_name);
    expect(columns).toEqual(expect.arrayContaining(["lease_grant", "lease_grant_fence"]));
    expect(await store.acquireLease("c", "new", 0, G1)).toMatchObject({ acquired: true, fence: 1 });
    await admin.query(`INSERT INTO "${schema}".dispatch_once_conversations (conversation_id) VALUES ('d')`);
    // The old version's statements run against the migrated table; it takes the expired lease.
    expect((await admin.query(old.grant, ["c", "old", "60000"])).rows[0]).toMatchObject({ fence: "2" });
    expect((await admin.query(old.lock, ["c"])).rows[0]).toMatchObject({ fence: "2", lease_owner: "old" });
    // A late copy of G1 is not answered with the old version's fence (G1 is an earlier grant now), and cannot give its lease back.
    expect(await rejectsWith(store.acquireLease("c", "new", 60_000, G1), "conversation_lease_lost")).toMatchObject({ fence: 1 });
    await store.releaseLeaseGrant("c", G1);
    expect((await admin.query(old.lock, ["c"])).rows[0]).toMatchObject({ fence: "2", lease_owner: "old" });
    expect((await admin.query(old.release, ["c", "2"])).rowCount).toBe(1);
    expect(await store.acquireLease("c", "new", 60_000, G2)).toMatchObject({ acquired: true, fence: 3 });
    await store.close();
  });
});

describe("TURN-10 earlier grants: a late copy of an earlier grant's acquire takes nothing", () => {
  const G1 = "grant-one-0123456789";
  const G2 = "grant-two-0123456789";
  const kept = async (schema: string, c: string) =>
    (await admin.query(`SELECT grant_id, fence FROM "${schema}".dispatch_once_lease_grants WHERE conversation_id = $1 ORDER BY grant_id`, [c])).rows;

  it("TURN-10: a late copy of an earlier grant on a free lease, from another pool, is refused naming its fence and writes nothing; kept LEASE_GRANT_RETENTION_MS, then pruned by the next grant", async () => {
    const { store, schema } = await fresh("earlier_grants");
    const other = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    expect(await store.acquireLease("c", "a", 60_000, G1)).toMatchObject({ acquired: true, fence: 1 });
    await store.releaseLease("c", 1);
    expect(await store.acquireLease("c", "b", 60_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    await store.releaseLease("c", 2);
    const row = async () => (await admin.query(`SELECT fence, lease_owner, lease_grant FROM "${schema}".dispatch_once_conversations WHERE conversation_id = 'c'`)).rows[0];
    const before = await row();
    expect(await rejectsWith(other.acquireLease("c", "a", 60_000, G1), "conversation_lease_lost")).toMatchObject({ fence: 1 });
    expect(await row()).toEqual(before);
    expect(await store.acquireLease("c", "next", 60_000)).toMatchObject({ acquired: true, fence: 3 });
    expect(await kept(schema, "c")).toEqual([{ grant_id: G1, fence: "1" }, { grant_id: G2, fence: "2" }]);
    // Superseded a retention ago (the server's clock cannot be set: the rows are moved back).
    await admin.query(`UPDATE "${schema}".dispatch_once_lease_grants SET superseded_at = superseded_at - $1::bigint WHERE grant_id = $2`, [LEASE_GRANT_RETENTION_MS - 60_000, G1]);
    expect(await rejectsWith(store.acquireLease("c", "a", 60_000, G1), "conversation_lease_lost")).toMatchObject({ fence: 1 });
    await admin.query(`UPDATE "${schema}".dispatch_once_lease_grants SET superseded_at = superseded_at - 60000 WHERE grant_id = $1`, [G1]);
    await store.releaseLease("c", 3);
    expect(await store.acquireLease("c", "a", 60_000, G1)).toMatchObject({ acquired: true, fence: 4 });
    expect(await kept(schema, "c")).toEqual([{ grant_id: G2, fence: "2" }]);
    await other.close();
    await store.close();
  });

  it("TURN-10: a grant id given back before any grant carried it is refused to a later copy of its acquire, from another pool, naming fence 0; kept and pruned as earlier grants are", async () => {
    const { store, schema } = await fresh("given_back");
    const other = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
    // The runner gave up on G1 (its acquire never applied while it waited): the give-back finds no grant.
    await store.releaseLeaseGrant("c", G1);
    expect(await kept(schema, "c")).toEqual([{ grant_id: G1, fence: "0" }]);
    // The copy lands on a free lease: refused, nothing taken.
    expect(await rejectsWith(other.acquireLease("c", "a", 60_000, G1), "conversation_lease_lost")).toMatchObject({ fence: 0 });
    expect(await store.acquireLease("c", "next", 60_000)).toMatchObject({ acquired: true, fence: 1 });
    // Given back again: nothing changes. Past the retention the next grant forgets it.
    await store.releaseLeaseGrant("c", G1);
    await store.releaseLease("c", 1);
    await admin.query(`UPDATE "${schema}".dispatch_once_lease_grants SET superseded_at = superseded_at - $1::bigint WHERE grant_id = $2`, [LEASE_GRANT_RETENTION_MS, G1]);
    expect(await store.acquireLease("c", "b", 60_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    expect(await kept(schema, "c")).toEqual([]);
    await other.close();
    await store.close();
  });

  it("a schema made by the version before earlier grants: migrate() adds the table, and the grant id left in the row is refused once a later grant supersedes it", async () => {
    const { store, schema } = await fresh("earlier_grants_upgrade");
    expect(await store.acquireLease("c", "a", 60_000, G1)).toMatchObject({ acquired: true, fence: 1 });
    await store.releaseLease("c", 1);
    await admin.query(`DROP TABLE "${schema}".dispatch_once_lease_grants`);
    await store.migrate();
    await rejectsWith(store.acquireLease("c", "a", 60_000, G1), "conversation_lease_lost");
    expect(await store.acquireLease("c", "b", 60_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    expect(await rejectsWith(store.acquireLease("c", "a", 60_000, G1), "conversation_lease_lost")).toMatchObject({ fence: 1 });
    expect(await kept(schema, "c")).toEqual([{ grant_id: G1, fence: "1" }]);
    await store.close();
  });
});

describe("TURN-12 the re-send window (supports.reopenWindow), on the server's clock, under the conversation's row lock", () => {
  const WINDOW = 3_600_000;
  async function failOnce(store: PostgresConversationStore, c: string, id: string): Promise<void> {
    await store.appendUserMessage(c, { id, content: user(id) }, { reopenWithinMs: WINDOW });
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    expect((await store.beginTurn(c, lease.fence))?.message.id).toBe(id);
    await store.failMessage(c, lease.fence, id, { failed: id });
    await store.releaseLease(c, lease.fence);
  }
  /** Moves a message's failure times `ms` into the past on the server's clock (the store's clock cannot be set). */
  const age = async (schema: string, c: string, ms: number, columns = ["failed_at", "first_failed_at"]) =>
    admin.query(`UPDATE "${schema}".dispatch_once_messages SET ${columns.map((col) => `${col} = ${col} - $2::bigint`).join(", ")} WHERE conversation_id = $1`, [c, ms]);

  it("declares it; reopens well inside the window, not past it; measured from the FIRST failure, which a retry that fails again does not move", async () => {
    const { store, schema } = await fresh("window");
    expect(store.capabilities.supports?.reopenWindow).toBe(true);
    await failOnce(store, "conv-w", "m1");
    await age(schema, "conv-w", WINDOW - 60_000);
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true, message: { state: "queued" } });
    // The retry fails again now; the first failure stays WINDOW - 1 min old, then passes the window.
    await failOnce(store, "conv-w", "m1");
    await age(schema, "conv-w", 60_000, ["first_failed_at"]);
    const past = await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW });
    expect(past).toMatchObject({ appended: false, reopened: false, pastReopenWindow: true, message: { state: "failed", failure: { failed: "m1" } } });
    expect((await store.message("conv-w", "m1"))?.state).toBe("failed");
    // Without a window it reopens as TURN-12 always did (a runner of an earlier version).
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") })).toMatchObject({ reopened: true });
    await store.close();
  });

  it("a message failed before first_failed_at existed is measured from failed_at; 0 (an unknown time) is past the window", async () => {
    const { store, schema } = await fresh("window_legacy");
    await failOnce(store, "conv-a", "m1");
    await failOnce(store, "conv-b", "m1");
    await admin.query(`UPDATE "${schema}".dispatch_once_messages SET first_failed_at = NULL`);
    await admin.query(`UPDATE "${schema}".dispatch_once_messages SET failed_at = 0 WHERE conversation_id = 'conv-b'`);
    expect(await store.appendUserMessage("conv-a", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true });
    expect(await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: false, pastReopenWindow: true });
    await store.close();
  });

  it("TURN-12: a failure whose first time was not kept (before first_failed_at, or an earlier version's process) keeps its failed_at as the first across a reopen: a retry that fails again does not restart the window", async () => {
    const { store, schema } = await fresh("window_legacy_reopen");
    await failOnce(store, "conv-l", "m1");
    await admin.query(`UPDATE "${schema}".dispatch_once_messages SET first_failed_at = NULL`);
    await age(schema, "conv-l", WINDOW - 60_000, ["failed_at"]);
    expect(await store.appendUserMessage("conv-l", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true });
    await failOnce(store, "conv-l", "m1");
    await age(schema, "conv-l", 60_000, ["first_failed_at"]);
    // The calls of the first attempt finished WINDOW ago: past the window, as for any message.
    expect(await store.appendUserMessage("conv-l", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: false, pastReopenWindow: true });
    await store.close();
  });

  it("migrate() adds first_failed_at to a messages table made without it", async () => {
    const { store, schema } = await fresh("window_migrate");
    await admin.query(`ALTER TABLE "${schema}".dispatch_once_messages DROP COLUMN first_failed_at`);
    await store.migrate();
    await failOnce(store, "conv-m", "m1");
    const { rows } = await admin.query(`SELECT first_failed_at FROM "${schema}".dispatch_once_messages WHERE conversation_id = 'conv-m'`);
    expect(rows[0].first_failed_at).not.toBeNull();
    await store.close();
  });

  /** Binds (or takes over) `c`'s next message under a fresh lease; fails it when `fail` is set. */
  async function bindNext(store: PostgresConversationStore, c: string, fail = false): Promise<void> {
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    const begun = await store.beginTurn(c, lease.fence);
    if (fail) await store.failMessage(c, lease.fence, begun!.message.id, { failed: begun!.message.id });
    await store.releaseLease(c, lease.fence);
  }

  it("TURN-12 counts from the first binding (bound_at) where it is earlier than the first failure (a holder died, the take-over failed later); a row bound before bound_at existed counts from its first failure and a later binding does not date it", async () => {
    const { store, schema } = await fresh("window_bound");
    for (const c of ["conv-b", "conv-n"]) {
      await store.appendUserMessage(c, { id: "m1", content: user("m1") });
      await bindNext(store, c);
      // The take-over fails the message half a window after its binding.
      await age(schema, c, WINDOW / 2, ["bound_at"]);
      await bindNext(store, c, true);
    }
    await admin.query(`UPDATE "${schema}".dispatch_once_messages SET bound_at = NULL WHERE conversation_id = 'conv-n'`);
    // Half a window later: a window after the binding, half a window after the first failure.
    await age(schema, "conv-b", WINDOW / 2, ["bound_at", "failed_at", "first_failed_at"]);
    await age(schema, "conv-n", WINDOW / 2, ["failed_at", "first_failed_at"]);
    const listed = (await store.listFailedTurns({ reopenWithinMs: WINDOW })).turns.map((t) => [t.conversationId, t.reopenable, t.pastReopenWindow]);
    expect(listed).toEqual([["conv-b", false, true], ["conv-n", true, false]]);
    expect(await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: false, pastReopenWindow: true });
    expect(await store.appendUserMessage("conv-n", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true });
    await bindNext(store, "conv-n");
    expect((await store.message("conv-n", "m1"))?.boundAt).toBeUndefined();
    await store.close();
  });

  it("migrate() adds bound_at to a messages table made without it: a message bound before stays undated, the next one is dated at its binding", async () => {
    const { store, schema } = await fresh("window_bound_migrate");
    await store.appendUserMessage("conv-m", { id: "m1", content: user("m1") });
    await bindNext(store, "conv-m");
    await admin.query(`ALTER TABLE "${schema}".dispatch_once_messages DROP COLUMN bound_at`);
    await store.migrate();
    await bindNext(store, "conv-m");
    expect((await store.message("conv-m", "m1"))?.boundAt).toBeUndefined();
    await store.appendUserMessage("conv-m2", { id: "m1", content: user("m1") });
    const { rows } = await admin.query(`SELECT ${NOW_MS} AS now`);
    await bindNext(store, "conv-m2");
    expect((await store.message("conv-m2", "m1"))?.boundAt).toBeGreaterThanOrEqual(Number(rows[0].now));
    await store.close();
  });

  it("a window that is not a finite number of milliseconds, 0 or more, is refused with invalid_store_input, changing nothing", async () => {
    const { store } = await fresh("window_bad");
    for (const bad of [-1, Number.NaN, Infinity, "60000"]) {
      await rejectsWith(store.appendUserMessage("conv-x", { id: "m1", content: user("m1") }, { reopenWithinMs: bad as number }), "invalid_store_input", "reopenWithinMs");
    }
    expect(await store.message("conv-x", "m1")).toBeUndefined();
    await store.close();
  });
});

describe("TURN-24 committed call keys", () => {
  async function commitWith(store: PostgresConversationStore, c: string, callKeys?: { callId: string; key: string; ordinal?: number; carriedFromTurn?: number }[]) {
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    try {
      const begun = (await store.beginTurn(c, lease.fence))!;
      return await store.commitTurn(c, { fence: lease.fence, messageId: begun.message.id, turnIndex: begun.turnIndex, assistant: { calls: ["toolu_1"] }, toolResults: { toolu_1: "paid" }, stopReason: "tool_use", answers: false, ...(callKeys !== undefined ? { callKeys } : {}) });
    } finally {
      await store.releaseLease(c, lease.fence);
    }
  }

  it("migrate() adds call_keys to a turns table made without it: turns committed before read back without keys, the earlier version's insert still runs (its turn without keys), a new commit keeps them as JSON text; stored text that is not a list of keys is store_corrupt; a malformed value is refused, nothing written", async () => {
    const { store, schema } = await fresh("call_keys");
    await store.appendUserMessage("conv-k", { id: "m1", content: user("m1") });
    expect(await commitWith(store, "conv-k")).toEqual({ committed: true });
    await admin.query(`ALTER TABLE "${schema}".dispatch_once_turns DROP COLUMN call_keys`);
    await store.migrate();
    const { rows: columns } = await admin.query(`SELECT data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'dispatch_once_turns' AND column_name = 'call_keys'`, [schema]);
    expect(columns).toEqual([{ data_type: "text" }]);
    // The earlier version's insert (it names the columns it knows), against the migrated table.
    await admin.query(`INSERT INTO "${schema}".dispatch_once_turns (conversation_id, turn_index, message_id, stop_reason, assistant, tool_results) VALUES ($1, $2, $3, $4, $5, $6)`, ["conv-k", 1, "m1", "tool_use", "{}", null]);
    // A NUL and a non-ASCII id: JSON text keeps them (jsonb could not hold \u0000).
    const keys = [{ callId: "toolu_1", key: "k-\u00e9\u0000", ordinal: 0, carriedFromTurn: 0 }, { callId: "toolu_1", key: "k2" }];
    expect(await commitWith(store, "conv-k", keys)).toEqual({ committed: true });
    const turns = await store.turnsOf("conv-k", "m1");
    expect(turns.map((t) => [t.turnIndex, "callKeys" in t, t.callKeys])).toEqual([[0, false, undefined], [1, false, undefined], [2, true, keys]]);
    for (const text of ["not json", '{"callId":"toolu_1","key":"k"}', '[{"callId":"toolu_1"}]']) {
      await admin.query(`UPDATE "${schema}".dispatch_once_turns SET call_keys = $1 WHERE turn_index = 2`, [text]);
      await rejectsWith(store.turnsOf("conv-k", "m1"), "store_corrupt");
    }
    await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") });
    await rejectsWith(commitWith(store, "conv-b", "k1" as never), "invalid_store_input", "callKeys");
    await rejectsWith(commitWith(store, "conv-b", [{ callId: "toolu_1", key: "k1", ordinal: 1.5 }]), "invalid_store_input", "callKeys[0].ordinal");
    expect(await store.turnsOf("conv-b", "m1")).toEqual([]);
    await store.close();
  });
});
