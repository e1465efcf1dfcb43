import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner } from "@dispatch-once/anthropic";
import { Dispatcher, StoreUnavailableError, defineTool, effectOf, isDispatchOnceError, retryableOf } from "@dispatch-once/core";
import { SqliteLedger } from "@dispatch-once/ledger-sqlite";
import { scriptFromPlans, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import Database from "better-sqlite3";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { SqliteConversationStore } from "../src/index.js";

// The conversation store's SQLite answers with an error class of its own while a runner drives a
// payment (TURN-14, RECORD-9): the database full (PRAGMA max_page_count on the store's own
// connection) when the turn that paid is committed, the connection made read-only before the
// message is appended, the tables dropped under a running store. The oracle: what the user is told
// (code, effects, effectOf/retryableOf), the payments made, the ledger's row and the stored message.

let dir: string;
let provider: MockProvider;
const open: Database.Database[] = [];

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), "conversation-sqlite-storeerr-"));
  provider = await startMockProvider({ script: scriptFromPlans({ "pay acme": turn(toolUse("pay", { to: "acme" })) }) });
});
afterEach(async () => {
  await provider.close();
  for (const db of open.splice(0)) if (db.open) db.close();
  rmSync(dir, { recursive: true, force: true });
});

function connection(name: string): Database.Database {
  const db = new Database(join(dir, name));
  db.pragma("journal_mode = WAL");
  db.pragma("synchronous = FULL");
  open.push(db);
  return db;
}

/** A runner over a store and a ledger on files of their own; `during` runs inside the payment. */
function world() {
  const storeDb = connection("store.db");
  const ledger = new SqliteLedger({ path: join(dir, "ledger.db") });
  const store = new SqliteConversationStore({ database: storeDb });
  const paid: string[] = [];
  let during: (() => void) | undefined;
  const pay = defineTool({
    name: "pay",
    effect: "unkeyed_write",
    input: z.object({ to: z.string() }),
    run: async (args, ctx) => {
      paid.push(ctx.idempotencyKey);
      during?.();
      // Text the turn's commit stores (the tool_result): pages a full database does not have.
      return { to: args.to, receipt: "r".repeat(16_384) };
    },
  });
  const runner = new ConversationRunner({
    client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
    dispatcher: new Dispatcher({ tools: [pay], ledger }),
    store,
    model: "claude-test",
    tools: [{ name: "pay", input_schema: { type: "object" } }],
    retry: { backoffMs: () => 5 },
    turnLeaseMs: 5_000,
  });
  const send = () => runner.send("c1", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
  return { storeDb, ledger, store, paid, send, setDuring: (fn: () => void) => (during = fn) };
}

describe("the conversation store's SQLite refuses while a runner pays", () => {
  it("RECORD-9 SQLITE_FULL at the commit of the turn that paid: store_unavailable that says the payment happened; the ledger row completed; a re-send completes the message without paying again", async () => {
    const w = world();
    w.setDuring(() => w.storeDb.pragma(`max_page_count = ${Number(w.storeDb.pragma("page_count", { simple: true }))}`));
    const error = await w.send();
    expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/database or disk is full/);
    expect((error as StoreUnavailableError).effects).toEqual([{ key: w.paid[0], name: "pay", effect: "happened", input: { to: "acme" } }]);
    expect(effectOf(error)).toBe("possibly");
    expect(retryableOf(error)).toBe("same_message");
    expect(await w.ledger.lookup(w.paid[0]!)).toMatchObject({ state: "completed", fence: 1 });
    expect(await w.store.message("c1", "m1")).toMatchObject({ state: "in_progress", turnIndex: 0 });
    w.storeDb.pragma("max_page_count = 1073741823");
    const resent = await w.send();
    expect(resent).toMatchObject({ status: "answered", appended: false });
    expect(w.paid).toHaveLength(1);
    expect(await w.store.message("c1", "m1")).toMatchObject({ state: "answered" });
  });

  it("TURN-14 SQLITE_READONLY before the message is appended: store_unavailable naming the cause; no request, no payment, nothing stored", async () => {
    const w = world();
    w.storeDb.pragma("query_only = 1");
    const error = await w.send();
    expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/readonly database/);
    expect(provider.requests).toHaveLength(0);
    expect(w.paid).toHaveLength(0);
    w.storeDb.pragma("query_only = 0");
    expect(await w.store.message("c1", "m1")).toBeUndefined();
  });

  it("TURN-14 the tables dropped under a running store: every read is store_unavailable, never an answer of 'nothing stored'", async () => {
    const w = world();
    expect(await w.send()).toMatchObject({ status: "answered" });
    for (const name of w.storeDb.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all() as string[]) {
      w.storeDb.exec(`DROP TABLE "${name}"`);
    }
    const read = await w.store.message("c1", "m1").catch((e: unknown) => e);
    expect(isDispatchOnceError(read, "store_unavailable"), String(read)).toBe(true);
    expect((read as Error).message).toMatch(/no such table/);
    const resent = await w.send();
    expect(isDispatchOnceError(resent, "store_unavailable"), String(resent)).toBe(true);
    expect(w.paid).toHaveLength(1);
  });
});
