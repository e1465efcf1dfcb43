import { randomBytes } from "node:crypto";
import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner } from "@dispatch-once/anthropic";
import { Dispatcher, StoreUnavailableError, defineTool, effectOf, retryableOf } from "@dispatch-once/core";
import { PostgresLedger } from "@dispatch-once/ledger-postgres";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import pg from "pg";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { PostgresConversationStore } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, uniqueSchema } from "./helpers.js";

// The conversation store's PostgreSQL answers with an error class of its own while a runner pays
// (TURN-14, RECORD-9): the store's role read-only after a failover (25006) when the turn that paid
// is committed, and the store's backend terminated (57P01, what a fast shutdown sends) while that
// commit waits on a lock. Produced for real on a role and schemas of this file's own (ALTER ROLE on
// that role only). The ledger connects as the test server's user, so only the store is refused.
// The oracle: what the user is told (code, effects, effectOf/retryableOf), the payments made, the
// ledger's row, the stored message, and that a re-send completes the message without paying again.

const role = `do_conv_test_storeerr_${randomBytes(4).toString("hex")}`;
let admin: pg.Pool;
let provider: MockProvider;
const schemas: string[] = [];
const closing: Array<{ close(): Promise<void> }> = [];

beforeAll(async () => {
  admin = adminPool();
  await admin.query(`CREATE ROLE ${role} LOGIN`);
  await admin.query(`GRANT CREATE ON DATABASE "${new URL(DATABASE_URL).pathname.slice(1)}" TO ${role}`);
});
beforeEach(async () => {
  provider = await startMockProvider({ script: scriptFromPlans({ "pay acme": turn(toolUse("pay", { to: "acme" })) }) });
});
afterEach(async () => {
  await admin.query(`ALTER ROLE ${role} RESET ALL`);
  await Promise.all(closing.splice(0).map((c) => c.close()));
  await provider.close();
});
afterAll(async () => {
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
  await admin.query(`DROP OWNED BY ${role}`);
  await admin.query(`DROP ROLE IF EXISTS ${role}`);
  await admin.end();
});

async function world() {
  const storeSchema = uniqueSchema("storeerr");
  const ledgerSchema = `do_test_storeerr_ledger_${randomBytes(4).toString("hex")}`;
  schemas.push(storeSchema);
  await admin.query(`CREATE SCHEMA "${storeSchema}" AUTHORIZATION ${role}`);
  const url = new URL(DATABASE_URL);
  url.username = role;
  const store = new PostgresConversationStore({ connectionString: url.toString(), schema: storeSchema, poolConfig: { max: 1 } });
  closing.push(store);
  await store.migrate();
  const ledger = new PostgresLedger({ connectionString: DATABASE_URL, schema: ledgerSchema });
  closing.push({ close: async () => { await admin.query(`DROP SCHEMA IF EXISTS "${ledgerSchema}" CASCADE`); await ledger.close(); } });
  await ledger.migrate();
  const paid: string[] = [];
  let during: (() => Promise<void>) | undefined;
  const pay = defineTool({
    name: "pay",
    effect: "unkeyed_write",
    input: z.object({ to: z.string() }),
    run: async (args, ctx) => {
      paid.push(ctx.idempotencyKey);
      await during?.();
      return { to: args.to };
    },
  });
  const runner = new ConversationRunner({
    client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
    dispatcher: new Dispatcher({ tools: [pay], ledger }),
    store,
    model: "claude-test",
    tools: [{ name: "pay", input_schema: { type: "object" } }],
    retry: { backoffMs: () => 5 },
    turnLeaseMs: 1_000,
  });
  const send = () => runner.send("c1", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
  const messageState = async () =>
    (await admin.query<{ state: string }>(`SELECT state FROM "${storeSchema}".dispatch_once_messages WHERE conversation_id = 'c1' AND message_id = 'm1'`)).rows[0]?.state;
  return { storeSchema, ledger, paid, send, messageState, setDuring: (fn: () => Promise<void>) => (during = fn) };
}

/** What a store that could not keep the turn that paid must say (RECORD-9), and what it left. */
async function expectPaidButUnstored(w: Awaited<ReturnType<typeof world>>, error: unknown, said: RegExp): Promise<void> {
  expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
  expect((error as Error).message).toMatch(said);
  expect((error as StoreUnavailableError).effects).toEqual([{ key: w.paid[0], name: "pay", effect: "happened", input: { to: "acme" } }]);
  expect([effectOf(error), retryableOf(error)]).toEqual(["possibly", "same_message"]);
  expect(await w.ledger.lookup(w.paid[0]!)).toMatchObject({ state: "completed", fence: 1 });
  expect(await w.messageState()).toBe("in_progress");
}

describe("the conversation store's PostgreSQL refuses while a runner pays", () => {
  it("RECORD-9 25006 read-only at the commit of the turn that paid: store_unavailable that says the payment happened; a re-send once writable completes the message without paying again", async () => {
    const w = await world();
    w.setDuring(async () => {
      await admin.query(`ALTER ROLE ${role} SET default_transaction_read_only = on`);
      await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    });
    await expectPaidButUnstored(w, await w.send(), /read-only transaction \(25006\)/);
    await admin.query(`ALTER ROLE ${role} RESET ALL`);
    await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, [role]);
    expect(await w.send()).toMatchObject({ status: "answered", appended: false });
    expect(w.paid).toHaveLength(1);
    expect(await w.messageState()).toBe("answered");
  });

  it("RECORD-9 57P01 the store's backend terminated while the commit of the turn that paid waits on a lock: store_unavailable that says the payment happened; the next send on the same pool completes the message without paying again", async () => {
    const w = await world();
    const locker = await admin.connect();
    w.setDuring(async () => {
      await locker.query("BEGIN");
      await locker.query(`LOCK TABLE "${w.storeSchema}".dispatch_once_turns IN ACCESS EXCLUSIVE MODE`);
      void (async () => {
        for (let i = 0; i < 1000; i++) {
          const { rowCount } = await admin.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1 AND wait_event_type = 'Lock'`, [role]);
          if (rowCount !== null && rowCount > 0) break;
          await new Promise((r) => setTimeout(r, 10));
        }
        await locker.query("ROLLBACK");
        locker.release();
      })();
    });
    await expectPaidButUnstored(w, await w.send(), /57P01|terminat/);
    expect(await w.send()).toMatchObject({ status: "answered", appended: false });
    expect(w.paid).toHaveLength(1);
  });
});
