import Database from "better-sqlite3";
import { openSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, defineTool, effectOf, isDispatchOnceError, retryableOf, type DispatchEvent } from "@dispatch-once/core";
import { SqliteLedger } from "../src/index.js";
import { rawConnection, selectRow, tempDir } from "./helpers.js";

// SQLite answers, but with an error class of its own (LEDGER-11, LEDGER-12, DISPATCH-10): the
// database full (SQLITE_FULL, reached for real with PRAGMA max_page_count on the ledger's own
// connection), a connection that may not write (SQLITE_READONLY: query_only, or the file opened
// read-only, as a process without write permission opens it), the table dropped under a running
// ledger, a file that is not a database (SQLITE_NOTADB). The oracle: what the caller is told
// (code, effectOf, retryableOf), how often the tool ran, and the row a second connection reads.

const TABLE = "dispatch_once_ledger";
let dir: string;
let cleanup: () => void;
const open: Database.Database[] = [];
beforeEach(() => ({ dir, cleanup } = tempDir("storeerr")));
afterEach(() => {
  for (const db of open.splice(0)) if (db.open) db.close();
  cleanup();
});

function connection(path: string, options?: Database.Options): Database.Database {
  const db = new Database(path, options);
  open.push(db);
  return db;
}

/** The connection may grow the file no further: the next write that needs a page is SQLITE_FULL. */
function full(db: Database.Database): void {
  db.pragma(`max_page_count = ${Number(db.pragma("page_count", { simple: true }))}`);
}

/** A dispatcher over `ledger` with one unkeyed_write payment; `during` runs inside the payment. */
function payments(ledger: SqliteLedger) {
  const effects: string[] = [];
  let during: (() => void) | undefined;
  const tool = defineTool({
    name: "send_payment",
    effect: "unkeyed_write",
    input: z.object({ payee: z.string(), note: z.string() }),
    async run(_args, ctx) {
      effects.push(ctx.idempotencyKey);
      during?.();
      // A result that needs pages of its own, so a full database cannot take it.
      return { paymentId: `pay_${effects.length}`, receipt: "r".repeat(16_384) };
    },
  });
  const events: DispatchEvent[] = [];
  const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 5, waitMs: 100, claimRetryMs: 50, recordRetryMs: 50, onEvent: (e) => events.push(e) });
  const dispatch = (note = "n") => dispatcher.turn({ conversationId: "conv_storeerr", turnIndex: 0 }).dispatch({ name: "send_payment", input: { payee: "acme", note } });
  return { effects, events, dispatch, setDuring: (fn: () => void) => (during = fn) };
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
 * `afterRun`: the completion refused after the tool returned its result, so the error says the
 * effect happened and a re-send cannot help (DISPATCH-10's effectHappened, ERR-4).
 */
function expectUnavailable(error: unknown, said: RegExp, afterRun = false): void {
  expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
  expect((error as Error).message).toMatch(said);
  expect([effectOf(error), retryableOf(error)]).toEqual(afterRun ? ["yes", "no"] : ["possibly", "same_message"]);
}

describe("SQLite answers with an error class of its own", () => {
  it("LEDGER-12 DISPATCH-10 SQLITE_FULL at the claim: ledger_unavailable, the tool does not run, no row; with room again the call runs once", async () => {
    const path = join(dir, "ledger.db");
    const db = connection(path);
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    const ledger = new SqliteLedger({ database: db });
    const pay = payments(ledger);
    full(db);
    // The claim stores the request: one this large needs new pages.
    const error = await refusal(pay.dispatch("n".repeat(16_384)));
    expectUnavailable(error, /database or disk is full/);
    expect(pay.effects).toHaveLength(0);
    expect(rawConnection(path).prepare(`SELECT count(*) FROM ${TABLE}`).pluck().get()).toBe(0);
    db.pragma("max_page_count = 1073741823");
    expect(await pay.dispatch("n".repeat(16_384))).toMatchObject({ replayed: false, result: { paymentId: "pay_1" } });
    expect(pay.effects).toHaveLength(1);
  });

  it("DISPATCH-10 SQLITE_FULL at the completion, after the payment ran: ledger_unavailable (effect happened: the run returned its result, ERR-4; never failed), record_failed, the row in flight at fence 1; a replay does not run it again", async () => {
    const path = join(dir, "ledger.db");
    const db = connection(path);
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    const ledger = new SqliteLedger({ database: db });
    const pay = payments(ledger);
    pay.setDuring(() => full(db));
    const error = await refusal(pay.dispatch());
    expectUnavailable(error, /database or disk is full/, true);
    expect(pay.events.find((e) => e.type === "record_failed")).toMatchObject({ write: "complete", state: "completed" });
    const key = pay.effects[0]!;
    expect(selectRow(rawConnection(path), TABLE, key)).toMatchObject({ state: "in_flight", fence: 1 });
    db.pragma("max_page_count = 1073741823");
    // The claim is live: a replay waits for it and is told so, and runs nothing.
    const replay = await refusal(pay.dispatch());
    expect(isDispatchOnceError(replay, "in_flight_elsewhere"), String(replay)).toBe(true);
    expect(pay.effects).toHaveLength(1);
  });

  it("LEDGER-12 SQLITE_READONLY (PRAGMA query_only on the ledger's connection) at the claim and at the completion: ledger_unavailable; nothing claimed, then the row kept in flight", async () => {
    const path = join(dir, "ledger.db");
    const db = connection(path);
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    const ledger = new SqliteLedger({ database: db });
    const pay = payments(ledger);
    db.pragma("query_only = 1");
    expectUnavailable(await refusal(pay.dispatch()), /readonly database/);
    expect(pay.effects).toHaveLength(0);
    db.pragma("query_only = 0");
    pay.setDuring(() => db.pragma("query_only = 1"));
    expectUnavailable(await refusal(pay.dispatch()), /readonly database/, true);
    expect(pay.effects).toHaveLength(1);
    expect(selectRow(rawConnection(path), TABLE, pay.effects[0]!)).toMatchObject({ state: "in_flight", fence: 1 });
  });

  it("LEDGER-12 a file opened read-only (a process without write permission): the ledger opens on the existing table, reads answer, and a claim is ledger_unavailable with nothing run", async () => {
    const path = join(dir, "ledger.db");
    const writer = new SqliteLedger({ path });
    const first = await payments(writer).dispatch();
    await writer.close();
    const reader = connection(path, { readonly: true });
    reader.pragma("synchronous = FULL"); // per connection: what the ledger reads to declare itself durable
    const ledger = new SqliteLedger({ database: reader });
    // A completed call is still answered from its row: nothing to write.
    expect(await ledger.lookup(first.key)).toMatchObject({ state: "completed", fence: 1 });
    const pay = payments(ledger);
    expectUnavailable(await refusal(pay.dispatch("other")), /readonly database/);
    expect(pay.effects).toHaveLength(0);
  });

  it("LEDGER-12 LEDGER-11 the table dropped under a running ledger: every operation is ledger_unavailable naming the table, never an empty answer; the call is not run", async () => {
    const path = join(dir, "ledger.db");
    const ledger = new SqliteLedger({ path });
    const pay = payments(ledger);
    const first = await pay.dispatch();
    rawConnection(path).exec(`DROP TABLE ${TABLE}`);
    // A completed row read as absent would run the payment again: the lookup must fail, not answer undefined.
    expectUnavailable(await refusal(ledger.lookup(first.key)), /no such table: dispatch_once_ledger/);
    expectUnavailable(await refusal(ledger.listRows({})), /no such table/);
    expectUnavailable(await refusal(pay.dispatch()), /no such table/);
    expect(pay.effects).toHaveLength(1);
    await ledger.close();
  });

  it("LEDGER-11 a file that is not a database: opening is a typed error naming the file and the cause, not a driver error", () => {
    const path = join(dir, "not-a-database.db");
    const fd = openSync(path, "w");
    writeSync(fd, Buffer.alloc(8192, "x"));
    closeSync(fd);
    let error: unknown;
    try {
      new SqliteLedger({ path });
    } catch (thrown) {
      error = thrown;
    }
    expect(isDispatchOnceError(error), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/file is not a database/);
  });
});
