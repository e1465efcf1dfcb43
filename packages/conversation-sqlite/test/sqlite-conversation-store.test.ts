import Database from "better-sqlite3";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LEASE_GRANT_RETENTION_MS, isDispatchOnceError, type JsonValue } from "@dispatch-once/core";
import { STORE_NOW_SQL, SqliteConversationStore, failedAtTriggerSql, schemaSql, tablesFor } from "../src/index.js";
import { packageDir, rawConnection, tempDir } from "./helpers.js";

let dir: string;
let cleanup: () => void;
beforeAll(() => ({ dir, cleanup } = tempDir("unit")));
afterAll(() => cleanup());

let counter = 0;
const freshPath = () => join(dir, `db-${++counter}.db`);

async function rejectsWith(promise: Promise<unknown>, code: string, field?: string): Promise<void> {
  const error = await promise.then(
    (value) => {
      throw new Error(`expected ${code}, resolved with ${JSON.stringify(value)}`);
    },
    (e: unknown) => e,
  );
  expect(isDispatchOnceError(error, code as never), String(error)).toBe(true);
  if (field !== undefined) expect((error as { field?: string }).field).toBe(field);
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

describe("TURN-14 restart: a store closed and opened again (a new instance, a new connection) sees everything", () => {
  it("messages in every state, turns, the log, records, the held lease and its fence, and the binding", async () => {
    const path = freshPath();
    const first = new SqliteConversationStore({ path });
    const c = "restart-1";
    for (const id of ["m1", "m2", "m3", "m4"]) await first.appendUserMessage(c, { id, content: user(`${id}: Zahlung an Zoë 😀`) });
    const lease = await first.acquireLease(c, "worker-a", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    const s1 = await first.beginTurn(c, lease.fence);
    await first.commitTurn(c, { fence: lease.fence, messageId: "m1", turnIndex: 0, assistant: { tool: "use" }, toolResults: { tool: "result" }, stopReason: "tool_use", answers: false });
    await first.commitTurn(c, { fence: lease.fence, messageId: "m1", turnIndex: 1, assistant: { text: "done" }, stopReason: null, answers: true });
    await first.beginTurn(c, lease.fence);
    await first.failMessage(c, lease.fence, "m2", { failed: "m2", effects: ["may_have_happened"] });
    await first.addRecord(c, { superseded: true });
    const bound = await first.beginTurn(c, lease.fence);
    const read = async (s: SqliteConversationStore) => ({
      messages: await Promise.all(["m1", "m2", "m3", "m4"].map((id) => s.message(c, id))),
      turns: await s.turnsOf(c, "m1"),
      log: await s.log(c),
      records: await s.records(c),
    });
    const before = await read(first);
    await first.close();
    await rejectsWith(first.log(c), "store_unavailable");

    const second = new SqliteConversationStore({ path });
    expect(await read(second)).toEqual(before);
    expect(before.messages.map((m) => m?.state)).toEqual(["answered", "failed", "in_progress", "queued"]);
    expect(s1?.message.id).toBe("m1");
    // The lease is still held by worker-a under its fence, and the bound m3 continues.
    expect(await second.acquireLease(c, "worker-b", 1000)).toMatchObject({ acquired: false, owner: "worker-a" });
    // The same binding, continued: not bound by this call (TURN-11).
    expect(await second.beginTurn(c, lease.fence)).toEqual({ ...bound, bound: false });
    await second.releaseLease(c, lease.fence);
    await second.close();

    // A third instance: the fence goes on from where it was, never back.
    const third = new SqliteConversationStore({ path });
    expect(await third.acquireLease(c, "worker-c", 1000)).toMatchObject({ acquired: true, fence: lease.fence + 1 });
    await third.close();
  });

  it("an acknowledged write is on disk before the call returns: a process killed right after it loses nothing", async () => {
    const path = freshPath();
    // The child writes and acknowledges, then is SIGKILLed: no close(), no checkpoint.
    const child = spawn(
      process.execPath,
      [
        "--import",
        "tsx",
        "-e",
        `import { SqliteConversationStore } from "./src/index.ts";
         const store = new SqliteConversationStore({ path: process.argv[1] });
         await store.appendUserMessage("killed", { id: "m1", content: { text: "before the kill" } });
         const lease = await store.acquireLease("killed", "child", 600000);
         await store.beginTurn("killed", lease.fence);
         await store.commitTurn("killed", { fence: lease.fence, messageId: "m1", turnIndex: 0, assistant: { text: "answer" }, stopReason: "end_turn", answers: true });
         process.stdout.write("acknowledged\\n");
         setInterval(() => {}, 1000);`,
        path,
      ],
      { cwd: packageDir },
    );
    let stderr = "";
    child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    await new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => chunk.includes("acknowledged") && resolve());
      child.on("exit", (code) => reject(new Error(`child exited ${code}: ${stderr}`)));
    });
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
    const store = new SqliteConversationStore({ path });
    expect(await store.log("killed")).toEqual([{ text: "before the kill" }, { text: "answer" }]);
    expect(await store.message("killed", "m1")).toMatchObject({ state: "answered", turnIndex: 0 });
    await store.close();
  });
});

describe("TURN-15 resumed, on disk", () => {
  it("tables made before begun_turn/begun_fence existed get them on open; a turn under way then is resumed, a finished one is not", async () => {
    const path = freshPath();
    const old = new SqliteConversationStore({ path });
    // legacy-a: m1 in progress under worker-a's lease; legacy-b: m1 answered; legacy-c: m1 failed (reopenable).
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
    const raw = rawConnection(path);
    raw.exec(`ALTER TABLE dispatch_once_conversations DROP COLUMN begun_turn; ALTER TABLE dispatch_once_conversations DROP COLUMN begun_fence;`);
    raw.close();

    const upgraded = new SqliteConversationStore({ path });
    const columns = (rawConnection(path).prepare("SELECT name FROM pragma_table_info('dispatch_once_conversations')").all() as { name: string }[]).map((r) => r.name);
    expect(columns).toEqual(expect.arrayContaining(["begun_turn", "begun_fence"]));
    // Who began legacy-a's turn 0 is unknown (it may be a paused worker of the old version): resumed, even for the same fence.
    expect(await upgraded.beginTurn("legacy-a", fences["legacy-a"]!)).toMatchObject({ turnIndex: 0, resumed: true });
    // legacy-b finished its turn: the next message's index is new.
    await upgraded.appendUserMessage("legacy-b", { id: "m2", content: user("pay bob") });
    const b = await upgraded.acquireLease("legacy-b", "worker-b", 600_000);
    if (!b.acquired) throw new Error("not acquired");
    expect(await upgraded.beginTurn("legacy-b", b.fence)).toMatchObject({ turnIndex: 1, resumed: false });
    // legacy-c's failed turn may be reopened: its index was begun by an unknown earlier grant.
    expect((await upgraded.appendUserMessage("legacy-c", { id: "m1", content: user("legacy-c pay alice") })).reopened).toBe(true);
    const c = await upgraded.acquireLease("legacy-c", "worker-c", 600_000);
    if (!c.acquired) throw new Error("not acquired");
    expect(await upgraded.beginTurn("legacy-c", c.fence)).toMatchObject({ turnIndex: 0, resumed: true });
    upgraded.migrate(); // idempotent: the columns are there, nothing is marked again
    await upgraded.close();
    const again = new SqliteConversationStore({ path });
    expect(await again.beginTurn("legacy-b", b.fence)).toMatchObject({ turnIndex: 1, resumed: false });
    await again.close();
  });

  it("with migrate: false on old tables the store refuses to open (store_unavailable), never answers without the columns", async () => {
    const path = freshPath();
    await new SqliteConversationStore({ path }).close();
    const raw = rawConnection(path);
    raw.exec(`ALTER TABLE dispatch_once_conversations DROP COLUMN begun_turn; ALTER TABLE dispatch_once_conversations DROP COLUMN begun_fence;`);
    raw.close();
    throwsWith(() => new SqliteConversationStore({ path, migrate: false }), "store_unavailable");
  });
});

describe("TURN-14 durability is declared from the connection's settings", () => {
  it("a file with WAL and synchronous=FULL is durable, shared across processes, on the store's clock", async () => {
    const store = new SqliteConversationStore({ path: freshPath() });
    expect(store.capabilities).toEqual({ durability: "durable", clock: "store", sharedAcrossProcesses: true, recordsWithCommit: true, supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true } });
    expect(store.database.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(store.database.pragma("synchronous", { simple: true })).toBe(2);
    await store.close();
  });

  it("synchronous=NORMAL and :memory: are volatile; a test clock is the process's", async () => {
    const normal = new SqliteConversationStore({ path: freshPath(), synchronous: "NORMAL" });
    expect(normal.capabilities.durability).toBe("volatile");
    await normal.close();
    const memory = new SqliteConversationStore({ path: ":memory:" });
    expect(memory.capabilities).toEqual({ durability: "volatile", clock: "store", sharedAcrossProcesses: false, recordsWithCommit: true, supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true } });
    await memory.close();
    const clocked = new SqliteConversationStore({ path: freshPath(), now: () => 1_000 });
    expect(clocked.capabilities.clock).toBe("process");
    await clocked.close();
  });

  it("TURN-14 a brought connection on a new file, journal_mode set to WAL and synchronous never set, is declared by the setting it runs with (volatile), not the one it reported before the file was first read", async () => {
    // SQLite (as better-sqlite3 builds it, SQLITE_DEFAULT_WAL_SYNCHRONOUS=1) reports FULL until the
    // connection first reads the file in WAL mode, then runs with NORMAL unless the application set it.
    const db = new Database(freshPath());
    db.pragma("journal_mode = WAL");
    const store = new SqliteConversationStore({ database: db });
    const runsWith = Number(db.pragma("synchronous", { simple: true }));
    expect([store.capabilities.durability, runsWith]).toEqual([runsWith >= 2 ? "durable" : "volatile", runsWith]);
    await store.close();
    db.close();
  });

  it("a brought connection keeps its settings, is not closed, and is refused while inside the caller's transaction", async () => {
    const db = new Database(freshPath());
    db.pragma("journal_mode = WAL");
    db.pragma("synchronous = FULL");
    const store = new SqliteConversationStore({ database: db, tablePrefix: "app_" });
    expect(store.capabilities.durability).toBe("durable");
    await store.appendUserMessage("byo", { id: "m1", content: "hi" });
    expect(db.prepare("SELECT count(*) AS n FROM app_messages").get()).toEqual({ n: 1 });
    db.exec("BEGIN");
    await rejectsWith(store.appendUserMessage("byo", { id: "m2", content: "inside" }), "store_unavailable");
    db.exec("ROLLBACK");
    await store.close();
    expect(db.open).toBe(true);
    db.close();
  });
});

describe("TURN-10 leases on the store's clock", () => {
  it("a lease expires when the clock passes it, and not before", async () => {
    let now = 1_000_000;
    const store = new SqliteConversationStore({ path: freshPath(), now: () => now });
    const first = await store.acquireLease("clock", "a", 5_000);
    expect(first).toEqual({ acquired: true, fence: 1, leaseExpiresAt: 1_005_000 });
    now = 1_004_999;
    expect(await store.acquireLease("clock", "b", 5_000)).toEqual({ acquired: false, owner: "a", leaseExpiresAt: 1_005_000 });
    now = 1_005_000;
    expect(await store.acquireLease("clock", "b", 5_000)).toEqual({ acquired: true, fence: 2, leaseExpiresAt: 1_010_000 });
    expect(await store.renewLease("clock", 2, 10_000)).toEqual({ leaseExpiresAt: 1_015_000 });
    await rejectsWith(store.renewLease("clock", 1, 10_000), "conversation_lease_lost");
    await store.close();
  });

  it("without a test clock, lease times are SQLite's wall clock", async () => {
    const store = new SqliteConversationStore({ path: freshPath() });
    const before = Date.now();
    const lease = await store.acquireLease("wall", "a", 60_000);
    const after = Date.now();
    if (!lease.acquired) throw new Error("not acquired");
    expect(lease.leaseExpiresAt).toBeGreaterThanOrEqual(before + 60_000 - 1);
    expect(lease.leaseExpiresAt).toBeLessThanOrEqual(after + 60_000 + 1);
    await store.close();
  });

  it("a process holding the write lock past busyTimeoutMs makes a write fail with store_unavailable, and nothing is written", async () => {
    const path = freshPath();
    const store = new SqliteConversationStore({ path, busyTimeoutMs: 100 });
    const holder = rawConnection(path);
    holder.exec("BEGIN IMMEDIATE");
    await rejectsWith(store.appendUserMessage("busy", { id: "m1", content: "x" }), "store_unavailable");
    await rejectsWith(store.acquireLease("busy", "a", 1000), "store_unavailable");
    holder.exec("ROLLBACK");
    expect(await store.message("busy", "m1")).toBeUndefined();
    expect(await store.acquireLease("busy", "a", 1000)).toMatchObject({ acquired: true, fence: 1 });
    holder.close();
    await store.close();
  });
});

describe("bad input is refused with invalid_store_input before anything is stored", () => {
  it("content, records and turns JSON cannot carry", async () => {
    const store = new SqliteConversationStore({ path: freshPath() });
    const bad: Array<[string, unknown]> = [
      ["NaN", { n: Number.NaN }],
      ["Infinity", [Number.POSITIVE_INFINITY]],
      ["undefined", undefined],
      ["undefined in an array", [1, undefined]],
      ["a lone surrogate", "\ud800"],
      ["a Date", new Date(0)],
      ["a bigint", { n: 1n }],
      ["a function", { f: () => 1 }],
      ["a Map", new Map()],
    ];
    for (const [label, value] of bad) {
      await rejectsWith(store.appendUserMessage("bad", { id: `m-${label}`, content: value as JsonValue }), "invalid_store_input", "content");
      await rejectsWith(store.addRecord("bad", value as JsonValue), "invalid_store_input", "record");
    }
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await rejectsWith(store.appendUserMessage("bad", { id: "m-cycle", content: cyclic as JsonValue }), "invalid_store_input", "content");
    expect(await store.message("bad", "m-NaN")).toBeUndefined();
    expect(await store.records("bad")).toEqual([]);

    await store.appendUserMessage("bad", { id: "m1", content: "ok" });
    const lease = await store.acquireLease("bad", "a", 60_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("bad", lease.fence);
    const commit = { fence: lease.fence, messageId: "m1", turnIndex: 0, assistant: "a" as JsonValue, stopReason: null, answers: true };
    await rejectsWith(store.commitTurn("bad", { ...commit, assistant: { n: Number.NaN } }), "invalid_store_input", "assistant");
    await rejectsWith(store.commitTurn("bad", { ...commit, toolResults: [undefined] as unknown as JsonValue }), "invalid_store_input", "toolResults");
    await rejectsWith(store.commitTurn("bad", { ...commit, stopReason: 7 as unknown as string }), "invalid_store_input", "stopReason");
    await rejectsWith(store.commitTurn("bad", { ...commit, answers: "yes" as unknown as boolean }), "invalid_store_input", "answers");
    await rejectsWith(store.commitTurn("bad", { ...commit, turnIndex: "0" as unknown as number }), "invalid_store_input", "turnIndex");
    await rejectsWith(store.commitTurn("bad", null as never), "invalid_store_input", "commit");
    await rejectsWith(store.failMessage("bad", lease.fence, "m1", { n: 1n } as unknown as JsonValue), "invalid_store_input", "record");
    expect(await store.log("bad")).toEqual([]);
    expect((await store.message("bad", "m1"))?.state).toBe("in_progress");
    // A turn index that is no whole number can never be the committed count: refused, not an error.
    expect(await store.commitTurn("bad", { ...commit, turnIndex: 0.5 })).toEqual({ committed: false });
    expect(await store.commitTurn("bad", commit)).toEqual({ committed: true });
    await store.close();
  });

  it("lease arguments, ids and options", async () => {
    const store = new SqliteConversationStore({ path: freshPath() });
    for (const leaseMs of [-1, Number.NaN, Number.POSITIVE_INFINITY, "5" as unknown as number, 400 * 24 * 3600 * 1000]) {
      await rejectsWith(store.acquireLease("args", "a", leaseMs), "invalid_store_input", "leaseMs");
    }
    await rejectsWith(store.acquireLease("args", 7 as unknown as string, 1000), "invalid_store_input", "owner");
    await rejectsWith(store.acquireLease("args", "x".repeat(1025), 1000), "invalid_store_input", "owner");
    await rejectsWith(store.message("bad id", "m1"), "invalid_store_input", "conversationId");
    await rejectsWith(store.message("args", 1 as unknown as string), "invalid_store_input", "messageId");
    await rejectsWith(store.records("x".repeat(257)), "invalid_store_input", "conversationId");
    // Fences that cannot hold a lease are refused as such, never as bad input.
    for (const fence of [0, -1, 1.5, Number.NaN]) {
      await rejectsWith(store.beginTurn("args", fence), "conversation_lease_lost");
      await rejectsWith(store.renewLease("args", fence, 1000), "conversation_lease_lost");
    }
    await store.close();
    throwsWith(() => new SqliteConversationStore({} as never), "invalid_store_input", "path");
    throwsWith(() => new SqliteConversationStore({ path: freshPath(), tablePrefix: 'x"; DROP' }), "invalid_store_input", "tablePrefix");
    throwsWith(() => new SqliteConversationStore({ path: freshPath(), synchronous: "OFF" as never }), "invalid_store_input", "synchronous");
    throwsWith(() => new SqliteConversationStore({ path: freshPath(), busyTimeoutMs: -5 }), "invalid_store_input", "busyTimeoutMs");
    throwsWith(() => new SqliteConversationStore(null as never), "invalid_store_input", "options");
    throwsWith(() => new SqliteConversationStore({ path: join(dir, "no-such-dir", "x.db") }), "store_unavailable");
  });
});

describe("storage", () => {
  it("content is stored as JSON text with the caller's member order, and the schema is plain SQL", async () => {
    const path = freshPath();
    const store = new SqliteConversationStore({ path });
    await store.appendUserMessage("layout", { id: "m1", content: { z: 1, a: "é", n: [1.5, -0.25] } });
    const raw = rawConnection(path);
    expect(raw.prepare("SELECT content FROM dispatch_once_messages").get()).toEqual({ content: '{"z":1,"a":"é","n":[1.5,-0.25]}' });
    raw.close();
    expect(schemaSql()).toContain('CREATE TABLE IF NOT EXISTS "dispatch_once_turns"');
    expect(tablesFor("app_")).toEqual({ conversations: "app_conversations", messages: "app_messages", turns: "app_turns", records: "app_records", leaseGrants: "app_lease_grants" });
    store.migrate();
    await store.close();
  });

  it("a turn whose message is missing is store_corrupt, not a shorter log", async () => {
    const path = freshPath();
    const store = new SqliteConversationStore({ path });
    await store.appendUserMessage("orphan", { id: "m1", content: "hi" });
    const lease = await store.acquireLease("orphan", "a", 60_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("orphan", lease.fence);
    await store.commitTurn("orphan", { fence: lease.fence, messageId: "m1", turnIndex: 0, assistant: "a", stopReason: null, answers: true });
    const raw = rawConnection(path);
    raw.prepare("DELETE FROM dispatch_once_messages WHERE message_id = 'm1'").run();
    raw.close();
    await rejectsWith(store.log("orphan"), "store_corrupt");
    await store.close();
  });
});

describe("TURN-17 listFailedTurns: failed messages across conversations, oldest failure first, paged", () => {
  /** Fail the next message of a conversation at the store-clock time `at`. */
  async function failNext(store: SqliteConversationStore, c: string, id: string): Promise<void> {
    await store.appendUserMessage(c, { id, content: user(`${c} ${id}`) });
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn(c, lease.fence);
    await store.failMessage(c, lease.fence, id, { failed: id, conversation: c });
    await store.releaseLease(c, lease.fence);
  }

  it("lists them in failure order with turn index and record; filters by conversation and age; a reopened message leaves the list", async () => {
    let clock = 1_000_000;
    const store = new SqliteConversationStore({ path: freshPath(), now: () => clock });
    await failNext(store, "conv-b", "m1");
    clock += 1000;
    await failNext(store, "conv-a", "m1");
    clock += 1000;
    await failNext(store, "conv-b", "m2"); // binds at turn index 0 again (no turn committed)
    await store.appendUserMessage("conv-c", { id: "m1", content: user("queued, never failed") });

    const all = await store.listFailedTurns();
    expect(all).toEqual({
      turns: [
        // conv-b's m2 was bound after m1 failed: a re-send of m1 no longer reopens it (TURN-12).
        { conversationId: "conv-b", messageId: "m1", turnIndex: 0, failedAt: 1_000_000, firstFailedAt: 1_000_000, failure: { failed: "m1", conversation: "conv-b" }, reopenable: false },
        { conversationId: "conv-a", messageId: "m1", turnIndex: 0, failedAt: 1_001_000, firstFailedAt: 1_001_000, failure: { failed: "m1", conversation: "conv-a" }, reopenable: true },
        { conversationId: "conv-b", messageId: "m2", turnIndex: 0, failedAt: 1_002_000, firstFailedAt: 1_002_000, failure: { failed: "m2", conversation: "conv-b" }, reopenable: true },
      ],
    });
    expect((await store.listFailedTurns({ conversationId: "conv-b" })).turns.map((t) => t.messageId)).toEqual(["m1", "m2"]);
    clock += 500;
    // Failed at least 1.5 s ago: the first two.
    expect((await store.listFailedTurns({ olderThanMs: 1500 })).turns.map((t) => [t.conversationId, t.messageId])).toEqual([["conv-b", "m1"], ["conv-a", "m1"]]);

    // Paging: one at a time through the cursor gives the same three, each once.
    const paged: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await store.listFailedTurns({ limit: 1, ...(cursor !== undefined ? { cursor } : {}) });
      paged.push(...page.turns.map((t) => `${t.conversationId}/${t.messageId}`));
      cursor = page.cursor;
    } while (cursor !== undefined);
    expect(paged).toEqual(["conv-b/m1", "conv-a/m1", "conv-b/m2"]);

    // conv-a's m1 is its most recently bound message: a re-send reopens it (TURN-12), and it leaves the list.
    expect((await store.appendUserMessage("conv-a", { id: "m1", content: user("again") })).reopened).toBe(true);
    expect((await store.listFailedTurns()).turns.map((t) => `${t.conversationId}/${t.messageId}`)).toEqual(["conv-b/m1", "conv-b/m2"]);
    await rejectsWith(store.listFailedTurns({ limit: 1001 }), "invalid_store_input", "limit");
    await rejectsWith(store.listFailedTurns({ cursor: "not-a-cursor" }), "invalid_store_input", "cursor");
    await store.close();
  });

  it("a messages table made before failed_at gets it on open; messages that already failed list as failed at 0", async () => {
    const path = freshPath();
    const old = new SqliteConversationStore({ path });
    await failNext(old, "legacy", "m1");
    await old.close();
    const raw = rawConnection(path);
    // What that table had: none of the index, the triggers and the column.
    raw.exec(`DROP INDEX dispatch_once_messages_failed; DROP TRIGGER dispatch_once_messages_failed_at_insert; DROP TRIGGER dispatch_once_messages_failed_at_update;
              ALTER TABLE dispatch_once_messages DROP COLUMN failed_at; ALTER TABLE dispatch_once_messages DROP COLUMN first_failed_at;
              ALTER TABLE dispatch_once_messages DROP COLUMN bound_at;`);
    raw.close();
    const upgraded = new SqliteConversationStore({ path });
    expect((await upgraded.listFailedTurns()).turns).toEqual([{ conversationId: "legacy", messageId: "m1", turnIndex: 0, failedAt: 0, firstFailedAt: 0, failure: { failed: "m1", conversation: "legacy" }, reopenable: true }]);
    // The listing reads the partial index, not the table.
    const plan = rawConnection(path)
      .prepare(`EXPLAIN QUERY PLAN SELECT conversation_id FROM dispatch_once_messages WHERE state = 'failed' AND failed_at <= 5 ORDER BY failed_at, conversation_id, message_id`)
      .all() as { detail: string }[];
    expect(plan.map((p) => p.detail).join(" | ")).toContain("dispatch_once_messages_failed");
    await upgraded.close();
  });

  it("reopenable: true while the failed message is the conversation's last bound (last_bound), false once another was bound at its index; still listed; a re-send does not reopen it", async () => {
    const path = freshPath();
    const store = new SqliteConversationStore({ path });
    const raw = rawConnection(path);
    const stored = (c: string) => ({
      lastBound: (raw.prepare("SELECT last_bound FROM dispatch_once_conversations WHERE conversation_id = ?").get(c) as { last_bound: string | null }).last_bound,
      messages: raw.prepare("SELECT message_id, state, turn_index, failure FROM dispatch_once_messages WHERE conversation_id = ? ORDER BY seq").all(c),
    });
    const listed = async (c: string, s: SqliteConversationStore = store) =>
      (await s.listFailedTurns({ conversationId: c })).turns.map((t) => [t.messageId, t.turnIndex, t.reopenable, t.failure]);
    const record = { failed: "a", retryable: true };
    await store.appendUserMessage("conv-r", { id: "a", content: user("pay alice") });
    const lease = await store.acquireLease("conv-r", "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    await store.beginTurn("conv-r", lease.fence);
    await store.failMessage("conv-r", lease.fence, "a", record);
    expect(stored("conv-r")).toEqual({ lastBound: "a", messages: [{ message_id: "a", state: "failed", turn_index: 0, failure: JSON.stringify(record) }] });
    expect(await listed("conv-r")).toEqual([["a", 0, true, record]]);

    // b is bound at a's index (TURN-12): a is no longer the most recently bound message.
    await store.appendUserMessage("conv-r", { id: "b", content: user("something else") });
    const next = await store.beginTurn("conv-r", lease.fence);
    expect([next?.message.id, next?.turnIndex]).toEqual(["b", 0]);
    expect(stored("conv-r").lastBound).toBe("b");
    // Still failed, so still listed, with the record as stored at the failure (retryable: true), but not reopenable.
    expect(await listed("conv-r")).toEqual([["a", 0, false, record]]);
    const resend = await store.appendUserMessage("conv-r", { id: "a", content: user("pay alice") });
    expect([resend.reopened, resend.message.state]).toEqual([false, "failed"]);
    expect(stored("conv-r").messages).toEqual([
      { message_id: "a", state: "failed", turn_index: 0, failure: JSON.stringify(record) },
      { message_id: "b", state: "in_progress", turn_index: 0, failure: null },
    ]);
    expect(await listed("conv-r")).toEqual([["a", 0, false, record]]);
    // b fails too: b is reopenable, a is not; a fresh instance reads the same from the file.
    await store.failMessage("conv-r", lease.fence, "b", { failed: "b" });
    const reopened = new SqliteConversationStore({ path });
    expect((await reopened.listFailedTurns()).turns.map((t) => [t.messageId, t.reopenable])).toEqual([["a", false], ["b", true]]);
    raw.close();
    await reopened.close();
    await store.close();
  });

  describe("in a rolling upgrade: a process of the version before failed_at still writes to the file", () => {
    // That version's own statements, verbatim (src/sqlite-conversation-store.ts before fa7c238): none names failed_at.
    const legacy = {
      nextSeq: `SELECT coalesce(max(seq), 0) + 1 AS next FROM "dispatch_once_messages" WHERE conversation_id = ?`,
      insertMessage: `INSERT INTO "dispatch_once_messages" (conversation_id, message_id, seq, state, content) VALUES (?, ?, ?, 'queued', ?)`,
      reopen: `UPDATE "dispatch_once_messages" SET state = 'queued', failure = NULL WHERE conversation_id = ? AND message_id = ?`,
      fail: `UPDATE "dispatch_once_messages" SET state = 'failed', failure = ? WHERE conversation_id = ? AND message_id = ?`,
      insertRecord: `INSERT INTO "dispatch_once_records" (conversation_id, seq, record) VALUES (?, (SELECT coalesce(max(seq), 0) + 1 FROM "dispatch_once_records" WHERE conversation_id = ?), ?)`,
    };
    const storeNow = (raw: Database.Database): number => (raw.prepare(`SELECT ${STORE_NOW_SQL} AS now`).get() as { now: number }).now;
    const storedFailedAt = (raw: Database.Database, c: string, m: string): unknown =>
      (raw.prepare("SELECT failed_at FROM dispatch_once_messages WHERE conversation_id = ? AND message_id = ?").get(c, m) as { failed_at: unknown }).failed_at;
    const ids = (page: { turns: { conversationId: string; messageId: string }[] }) => page.turns.map((t) => `${t.conversationId}/${t.messageId}`);
    async function pageByOne(store: SqliteConversationStore): Promise<string[]> {
      const out: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await store.listFailedTurns({ limit: 1, ...(cursor !== undefined ? { cursor } : {}) });
        out.push(...ids(page));
        cursor = page.cursor;
      } while (cursor !== undefined);
      return out;
    }
    /** Bound by the current version (the old one binds with the same statement), then failed by the old one, in one write as it did. */
    async function failByOldVersion(store: SqliteConversationStore, raw: Database.Database, c: string, m: string): Promise<void> {
      const lease = await store.acquireLease(c, "worker", 600_000);
      if (!lease.acquired) throw new Error("not acquired");
      expect((await store.beginTurn(c, lease.fence))?.message.id).toBe(m);
      const record = JSON.stringify({ failed: m, conversation: c });
      raw.transaction(() => {
        expect(raw.prepare(legacy.fail).run(record, c, m).changes).toBe(1);
        raw.prepare(legacy.insertRecord).run(c, c, record);
      }).immediate();
      await store.releaseLease(c, lease.fence);
    }

    it("a message it fails gets the store's time of that failure: listed in order, paged across, counted by olderThanMs; migrating again changes nothing", async () => {
      const path = freshPath();
      const store = new SqliteConversationStore({ path });
      const raw = rawConnection(path);
      await failNext(store, "conv-a", "m1");
      // Appended by the old version too: its INSERT names no failed_at either.
      raw.prepare(legacy.insertMessage).run("conv-b", "m1", (raw.prepare(legacy.nextSeq).get("conv-b") as { next: number }).next, JSON.stringify(user("conv-b m1")));
      const before = storeNow(raw);
      await failByOldVersion(store, raw, "conv-b", "m1");
      const after = storeNow(raw);
      const stored = storedFailedAt(raw, "conv-b", "m1");
      expect(typeof stored).toBe("number");
      expect(stored).toBeGreaterThanOrEqual(before);
      expect(stored).toBeLessThanOrEqual(after);
      await failNext(store, "conv-c", "m1");

      // failedAt never decreases from a to b to c, and ties order by conversation id: a, b, c.
      const all = await store.listFailedTurns();
      expect(ids(all)).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1"]);
      expect(all.turns[1]).toEqual({ conversationId: "conv-b", messageId: "m1", turnIndex: 0, failedAt: stored, firstFailedAt: stored, failure: { failed: "m1", conversation: "conv-b" }, reopenable: true });
      expect(await pageByOne(store)).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1"]);
      expect(ids(await store.listFailedTurns({ olderThanMs: 0 }))).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1"]);
      expect(ids(await store.listFailedTurns({ olderThanMs: 3_600_000 }))).toEqual([]);

      // Any writer that does not know the column, inserting a failed row outright, gets the same.
      const beforeInsert = storeNow(raw);
      raw.prepare(`INSERT INTO dispatch_once_messages (conversation_id, message_id, seq, state, turn_index, failure, content) VALUES ('conv-d', 'm1', 1, 'failed', 0, '{}', '"x"')`).run();
      expect(storedFailedAt(raw, "conv-d", "m1")).toBeGreaterThanOrEqual(beforeInsert);
      expect(ids(await store.listFailedTurns())).toEqual(["conv-a/m1", "conv-b/m1", "conv-c/m1", "conv-d/m1"]);

      const listed = await store.listFailedTurns();
      store.migrate();
      const reopened = new SqliteConversationStore({ path }); // migrates on open
      expect(storedFailedAt(raw, "conv-b", "m1")).toBe(stored);
      expect(await reopened.listFailedTurns()).toEqual(listed);
      raw.close();
      await reopened.close();
      await store.close();
    });

    it("a message it failed before this version's migration ran (the column there, nothing filling it) is listed at failedAt 0 once the store has migrated", async () => {
      const path = freshPath();
      const store = new SqliteConversationStore({ path });
      const raw = rawConnection(path);
      // The file as the release before this one left it: failed_at and its index, no trigger.
      raw.exec(`DROP TRIGGER IF EXISTS dispatch_once_messages_failed_at_insert; DROP TRIGGER IF EXISTS dispatch_once_messages_failed_at_update;`);
      await failNext(store, "conv-a", "m1");
      await store.appendUserMessage("conv-b", { id: "m1", content: user("conv-b m1") });
      await failByOldVersion(store, raw, "conv-b", "m1");
      expect(storedFailedAt(raw, "conv-b", "m1")).toBeNull();
      // Not migrated yet: the listing names the row and the remedy rather than guess where it sorts.
      await rejectsWith(store.listFailedTurns(), "store_corrupt");
      const error = await store.listFailedTurns().catch((e: unknown) => e);
      expect((error as Error).message).toMatch(/conv-b.*message m1 has no failure time.*migrate\(\)/);

      store.migrate();
      // Its failure time was not kept: 0, the oldest (TURN-17), as for messages failed before the column existed.
      expect(storedFailedAt(raw, "conv-b", "m1")).toBe(0);
      const all = await store.listFailedTurns();
      expect(all.turns.map((t) => [t.conversationId, t.messageId, t.failedAt === 0])).toEqual([["conv-b", "m1", true], ["conv-a", "m1", false]]);
      expect(await pageByOne(store)).toEqual(["conv-b/m1", "conv-a/m1"]);
      expect(ids(await store.listFailedTurns({ olderThanMs: 3_600_000 }))).toEqual(["conv-b/m1"]);
      raw.close();
      await store.close();
    });

    it("its reopen leaves the earlier failure time on the queued row; its next failure is listed at that failure's time, not the earlier one", async () => {
      const path = freshPath();
      const old = new SqliteConversationStore({ path });
      await failNext(old, "legacy", "m1");
      await old.close();
      const raw = rawConnection(path);
      // A file made before failed_at (what reads the column goes first), then opened by this version: 0.
      raw.exec(`DROP TRIGGER IF EXISTS dispatch_once_messages_failed_at_insert; DROP TRIGGER IF EXISTS dispatch_once_messages_failed_at_update;
                DROP INDEX dispatch_once_messages_failed; ALTER TABLE dispatch_once_messages DROP COLUMN failed_at;`);
      const store = new SqliteConversationStore({ path });
      expect(storedFailedAt(raw, "legacy", "m1")).toBe(0);
      // A re-send reaches the old version: its reopen does not clear failed_at.
      expect(raw.prepare(legacy.reopen).run("legacy", "m1").changes).toBe(1);
      const before = storeNow(raw);
      await failByOldVersion(store, raw, "legacy", "m1");
      expect(storedFailedAt(raw, "legacy", "m1")).toBeGreaterThanOrEqual(before);
      const [turn] = (await store.listFailedTurns()).turns;
      expect(turn?.failedAt).toBeGreaterThanOrEqual(before);
      expect(ids(await store.listFailedTurns({ olderThanMs: 3_600_000 }))).toEqual([]);
      raw.close();
      await store.close();
    });
  });

  it("the listing's own statement reads the failed-messages index and looks each conversation row up by its key: no scan, no sort, no query per turn", async () => {
    const path = freshPath();
    const store = new SqliteConversationStore({ path });
    const raw = rawConnection(path);
    raw.exec("BEGIN");
    const conversation = raw.prepare("INSERT INTO dispatch_once_conversations (conversation_id, last_bound) VALUES (?, ?)");
    const message = raw.prepare("INSERT INTO dispatch_once_messages (conversation_id, message_id, seq, state, turn_index, failure, failed_at, content) VALUES (?, ?, ?, ?, 0, ?, ?, '\"x\"')");
    for (let i = 0; i < 20_000; i++) {
      const c = `conv-${i}`;
      conversation.run(c, "m2");
      message.run(c, "m1", 1, i % 100 === 0 ? "failed" : "answered", i % 100 === 0 ? "{}" : null, i % 100 === 0 ? i : null);
      message.run(c, "m2", 2, i % 200 === 0 ? "failed" : "answered", i % 200 === 0 ? "{}" : null, i % 200 === 0 ? i : null);
    }
    raw.exec("COMMIT; ANALYZE");
    const sql = (store as unknown as { stmts: { listFailed: { source: string } } }).stmts.listFailed.source;
    for (const params of [
      { conversation: null, cutoff: null, within: null, after: null, afterConversation: "", afterMessage: "", limit: 101 },
      { conversation: null, cutoff: 5, within: null, after: 100, afterConversation: "conv-100", afterMessage: "m1", limit: 101 },
      { conversation: "conv-200", cutoff: null, within: 60_000, after: null, afterConversation: "", afterMessage: "", limit: 101 },
    ]) {
      const plan = (raw.prepare(`EXPLAIN QUERY PLAN ${sql}`).all(params) as { detail: string }[]).map((p) => p.detail).join(" | ");
      expect(plan, JSON.stringify(params)).toMatch(/USING (COVERING )?INDEX dispatch_once_messages_failed/);
      expect(plan, JSON.stringify(params)).toMatch(/SEARCH c USING PRIMARY KEY \(conversation_id=\?\)/);
      expect(plan, JSON.stringify(params)).not.toMatch(/TEMP B-TREE|SCAN c\b/);
    }
    // migrate() mends failed rows without a time at every open: it reads the NULL end of the same index, no scan.
    const mend = failedAtTriggerSql().split("\n").find((line) => line.startsWith("UPDATE") && line.includes("failed_at IS NULL"));
    expect(mend).toBeDefined();
    const mendPlan = (raw.prepare(`EXPLAIN QUERY PLAN ${mend}`).all() as { detail: string }[]).map((p) => p.detail).join(" | ");
    expect(mendPlan).toMatch(/SEARCH dispatch_once_messages USING INDEX dispatch_once_messages_failed \(failed_at=\?\)/);
    const page = await store.listFailedTurns({ limit: 1000 });
    expect(page.turns).toHaveLength(300);
    expect(page.turns.filter((t) => t.reopenable).map((t) => `${t.conversationId}/${t.messageId}`)).toEqual(
      Array.from({ length: 100 }, (_, k) => `conv-${k * 200}/m2`),
    );
    raw.close();
    await store.close();
  });
});

describe("TURN-10 lease grant ids, on disk and across versions", () => {
  const G1 = "grant-one-0123456789";
  const G2 = "grant-two-0123456789";
  // The version before grant ids, its own lease statements verbatim: none names lease_grant.
  const legacy = {
    grant: `UPDATE "dispatch_once_conversations" SET fence = ?, lease_owner = ?, lease_expires_at = ? WHERE conversation_id = ?`,
    release: `UPDATE "dispatch_once_conversations" SET lease_owner = NULL, lease_expires_at = NULL WHERE conversation_id = ? AND lease_owner IS NOT NULL AND fence = ?`,
    row: `SELECT fence, lease_owner, lease_expires_at, last_bound, begun_turn, begun_fence FROM "dispatch_once_conversations" WHERE conversation_id = ?`,
  };

  it("declares supports.leaseGrants; a re-sent grant id is the same grant after a restart, and its late copy is refused once released", async () => {
    const path = freshPath();
    let now = 1_000;
    const store = new SqliteConversationStore({ path, now: () => now });
    expect(store.capabilities.supports?.leaseGrants).toBe(true);
    const first = await store.acquireLease("c", "w", 1_000, G1);
    expect(first).toMatchObject({ acquired: true, fence: 1 });
    await store.close();
    now += 500;
    const reopened = new SqliteConversationStore({ path, now: () => now });
    expect(await reopened.acquireLease("c", "w", 1_000, G1)).toEqual({ acquired: true, fence: 1, leaseExpiresAt: 2_500 });
    expect(await reopened.acquireLease("c", "w", 1_000, G2)).toMatchObject({ acquired: false, owner: "w" });
    await reopened.releaseLeaseGrant("c", G1);
    await rejectsWith(reopened.acquireLease("c", "w", 1_000, G1), "conversation_lease_lost");
    expect(await reopened.acquireLease("c", "x", 1_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    await rejectsWith(reopened.acquireLease("c", "w", 1_000, "bad" as string), "invalid_store_input", "grantId");
    await rejectsWith(reopened.releaseLeaseGrant("c", undefined as unknown as string), "invalid_store_input", "grantId");
    await reopened.close();
  });

  it("a grant id given back before any grant carried it is refused to a later copy of its acquire, after a restart too, and forgotten after the grant retention", async () => {
    const path = freshPath();
    let now = 1_000;
    const store = new SqliteConversationStore({ path, now: () => now });
    // The runner gave up on G1 (its acquire never applied while it waited): the give-back finds no grant.
    await store.releaseLeaseGrant("c", G1);
    await store.close();
    now += 500;
    const reopened = new SqliteConversationStore({ path, now: () => now });
    // The copy lands on a free lease: refused with fence 0 (no grant was made under it), nothing taken.
    await expect(reopened.acquireLease("c", "w", 1_000, G1)).rejects.toMatchObject({ code: "conversation_lease_lost", fence: 0 });
    expect(await reopened.acquireLease("c", "x", 1_000)).toMatchObject({ acquired: true, fence: 1 });
    await reopened.releaseLease("c", 1);
    await reopened.releaseLeaseGrant("c", G1);
    await rejectsWith(reopened.acquireLease("c", "w", 1_000, G1), "conversation_lease_lost");
    now += LEASE_GRANT_RETENTION_MS;
    expect(await reopened.acquireLease("c", "x", 1_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    expect(rawConnection(path).prepare("SELECT count(*) AS n FROM dispatch_once_lease_grants WHERE conversation_id = 'c'").get()).toEqual({ n: 0 });
    await reopened.close();
  });

  it("a conversations table made before lease grants gets the columns on open, once; a held lease of the old version stays held", async () => {
    const path = freshPath();
    const old = new SqliteConversationStore({ path });
    const held = await old.acquireLease("c", "old-worker", 600_000);
    if (!held.acquired) throw new Error("not acquired");
    await old.close();
    const raw = rawConnection(path);
    raw.exec(`ALTER TABLE dispatch_once_conversations DROP COLUMN lease_grant; ALTER TABLE dispatch_once_conversations DROP COLUMN lease_grant_fence;`);
    raw.close();
    const upgraded = new SqliteConversationStore({ path });
    const columns = (rawConnection(path).prepare("SELECT name FROM pragma_table_info('dispatch_once_conversations')").all() as { name: string }[]).map((r) => r.name);
    expect(columns).toEqual(expect.arrayContaining(["lease_grant", "lease_grant_fence"]));
    upgraded.migrate();
    expect(await upgraded.acquireLease("c", "new-worker", 1_000, G1)).toMatchObject({ acquired: false, owner: "old-worker" });
    await upgraded.releaseLeaseGrant("c", G1);
    await expect(upgraded.renewLease("c", held.fence, 600_000)).resolves.toBeDefined();
    await upgraded.close();
  });

  it("in a rolling upgrade: a grant by the old version is never taken for an earlier grant id, and the old version's statements still run", async () => {
    const path = freshPath();
    let now = 1_000;
    const store = new SqliteConversationStore({ path, now: () => now });
    const raw = rawConnection(path);
    expect(await store.acquireLease("c", "new", 1_000, G1)).toMatchObject({ acquired: true, fence: 1 });
    now += 1_000;
    // The old version takes the expired lease: fence 2, lease_grant still G1 (it does not know the column).
    expect(raw.prepare(legacy.grant).run(2, "old", now + 1_000, "c").changes).toBe(1);
    expect(raw.prepare(legacy.row).get("c")).toMatchObject({ fence: 2, lease_owner: "old" });
    // A late copy of G1 must not be answered with the old version's fence 2: G1 is an earlier grant now.
    await rejectsWith(store.acquireLease("c", "new", 1_000, G1), "conversation_lease_lost");
    expect(raw.prepare(legacy.row).get("c")).toMatchObject({ fence: 2, lease_owner: "old" });
    await store.releaseLeaseGrant("c", G1);
    expect(raw.prepare(legacy.row).get("c")).toMatchObject({ fence: 2, lease_owner: "old" });
    expect(raw.prepare(legacy.release).run("c", 2).changes).toBe(1);
    // Released by the old version: G1 is an ordinary acquire (its grant is long over and not the latest).
    expect(await store.acquireLease("c", "new", 1_000, G2)).toMatchObject({ acquired: true, fence: 3 });
    raw.close();
    await store.close();
  });
});

describe("TURN-10 earlier grants: a late copy of an earlier grant's acquire takes nothing", () => {
  const G1 = "grant-one-0123456789";
  const G2 = "grant-two-0123456789";

  it("TURN-10: a late copy of an earlier grant on a free lease, after a restart, is refused naming its fence; the next acquire is served at once", async () => {
    const path = freshPath();
    let now = 1_000_000;
    const store = new SqliteConversationStore({ path, now: () => now });
    expect(await store.acquireLease("c", "a", 1_000, G1)).toMatchObject({ acquired: true, fence: 1 });
    await store.releaseLease("c", 1);
    expect(await store.acquireLease("c", "b", 1_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    await store.releaseLease("c", 2);
    await store.close();
    const reopened = new SqliteConversationStore({ path, now: () => now });
    const lost = await reopened.acquireLease("c", "a", 60_000, G1).catch((e: unknown) => e);
    expect(lost).toMatchObject({ code: "conversation_lease_lost", fence: 1 });
    expect(await reopened.acquireLease("c", "next", 1_000)).toMatchObject({ acquired: true, fence: 3 });
    // Kept LEASE_GRANT_RETENTION_MS from its supersession (fence 2's grant), then forgotten and pruned.
    now += LEASE_GRANT_RETENTION_MS - 1;
    await rejectsWith(reopened.acquireLease("c", "a", 1_000, G1), "conversation_lease_lost");
    now += 1;
    expect(await reopened.acquireLease("c", "a", 1_000, G1)).toMatchObject({ acquired: true, fence: 4 });
    const kept = rawConnection(path).prepare(`SELECT grant_id FROM dispatch_once_lease_grants WHERE conversation_id = 'c' ORDER BY grant_id`).all();
    // Both superseded a retention ago: the grant that forgot G1 deleted them in its own write.
    expect(kept).toEqual([]);
    await reopened.close();
  });

  it("a file made by the version before earlier grants: migrate() adds the table, and the latest grant id kept in the row is refused once a later grant supersedes it", async () => {
    const path = freshPath();
    const old = new SqliteConversationStore({ path });
    expect(await old.acquireLease("c", "a", 600_000, G1)).toMatchObject({ acquired: true, fence: 1 });
    await old.releaseLease("c", 1);
    await old.close();
    const raw = rawConnection(path);
    raw.exec(`DROP TABLE dispatch_once_lease_grants`);
    raw.close();
    const upgraded = new SqliteConversationStore({ path });
    await rejectsWith(upgraded.acquireLease("c", "a", 600_000, G1), "conversation_lease_lost");
    expect(await upgraded.acquireLease("c", "b", 600_000, G2)).toMatchObject({ acquired: true, fence: 2 });
    const lost = await upgraded.acquireLease("c", "a", 600_000, G1).catch((e: unknown) => e);
    expect(lost).toMatchObject({ code: "conversation_lease_lost", fence: 1 });
    await upgraded.close();
  });
});

describe("TURN-12 the re-send window (supports.reopenWindow), on the store's clock, in the reopen's own write", () => {
  const WINDOW = 60_000;
  async function failOnce(store: SqliteConversationStore, c: string, id: string): Promise<void> {
    await store.appendUserMessage(c, { id, content: user(id) }, { reopenWithinMs: WINDOW });
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    expect((await store.beginTurn(c, lease.fence))?.message.id).toBe(id);
    await store.failMessage(c, lease.fence, id, { failed: id });
    await store.releaseLease(c, lease.fence);
  }

  it("declares it; reopens below the window, not at it; measured from the FIRST failure, which a retry that fails again does not move", async () => {
    let clock = 1_000_000;
    const store = new SqliteConversationStore({ path: freshPath(), now: () => clock });
    expect(store.capabilities.supports?.reopenWindow).toBe(true);
    await failOnce(store, "conv-w", "m1");
    clock += WINDOW - 1;
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true, message: { state: "queued" } });
    // The retry fails again at once: 1 ms later the first failure is WINDOW old.
    await failOnce(store, "conv-w", "m1");
    clock += 1;
    const past = await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW });
    expect(past).toMatchObject({ appended: false, reopened: false, pastReopenWindow: true, message: { state: "failed", failure: { failed: "m1" } } });
    expect((await store.message("conv-w", "m1"))?.state).toBe("failed");
    expect((await store.listFailedTurns({ conversationId: "conv-w" })).turns.map((t) => [t.messageId, t.reopenable])).toEqual([["m1", true]]);
    // Without a window the store reopens as TURN-12 always did (a runner of an earlier version).
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") })).toMatchObject({ reopened: true });
    await store.close();
  });

  it("a message that failed before first_failed_at existed is measured from failed_at, and 0 (an unknown time) counts from the epoch, past any real window", async () => {
    let clock = 5_000_000;
    const path = freshPath();
    const store = new SqliteConversationStore({ path, now: () => clock });
    await failOnce(store, "conv-a", "m1");
    await failOnce(store, "conv-b", "m1");
    const raw = rawConnection(path);
    const { messages } = tablesFor();
    raw.prepare(`UPDATE "${messages}" SET first_failed_at = NULL, failed_at = ? WHERE conversation_id = 'conv-a'`).run(clock - 10);
    raw.prepare(`UPDATE "${messages}" SET first_failed_at = NULL, failed_at = 0 WHERE conversation_id = 'conv-b'`).run();
    raw.close();
    clock += 5;
    expect(await store.appendUserMessage("conv-a", { id: "m1", content: user("m1") }, { reopenWithinMs: 20 })).toMatchObject({ reopened: true });
    expect(await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") }, { reopenWithinMs: clock - 1 })).toMatchObject({ reopened: false, pastReopenWindow: true });
    await store.close();
  });

  it("TURN-12: a failure whose first time was not kept (before first_failed_at, or an earlier version's process) keeps its failed_at as the first across a reopen: a retry that fails again does not restart the window", async () => {
    let clock = 7_000_000;
    const path = freshPath();
    const store = new SqliteConversationStore({ path, now: () => clock });
    await failOnce(store, "conv-l", "m1");
    const raw = rawConnection(path);
    const { messages } = tablesFor();
    raw.prepare(`UPDATE "${messages}" SET first_failed_at = NULL WHERE conversation_id = 'conv-l'`).run();
    raw.close();
    clock += WINDOW - 10;
    expect(await store.appendUserMessage("conv-l", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true });
    await failOnce(store, "conv-l", "m1");
    clock += 10;
    // The calls of the first attempt finished WINDOW ago: past the window, as for any message.
    expect(await store.appendUserMessage("conv-l", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: false, pastReopenWindow: true });
    expect((await store.listFailedTurns({ conversationId: "conv-l" })).turns.map((t) => t.firstFailedAt)).toEqual([7_000_000]);
    await store.close();
  });

  /** Binds (or takes over) `c`'s next message under a fresh lease; fails it when `fail` is set. */
  async function bindNext(store: SqliteConversationStore, c: string, fail = false): Promise<void> {
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    const begun = await store.beginTurn(c, lease.fence);
    if (fail) await store.failMessage(c, lease.fence, begun!.message.id, { failed: begun!.message.id });
    await store.releaseLease(c, lease.fence);
  }

  it("TURN-12 counts from the first binding (bound_at) where it is earlier than the first failure (a holder died, the take-over failed later); a row bound before bound_at existed counts from its first failure and a later binding does not date it", async () => {
    let clock = 9_000_000;
    const path = freshPath();
    const store = new SqliteConversationStore({ path, now: () => clock });
    for (const c of ["conv-b", "conv-n"]) {
      await store.appendUserMessage(c, { id: "m1", content: user("m1") });
      await bindNext(store, c);
    }
    expect((await store.message("conv-b", "m1"))?.boundAt).toBe(9_000_000);
    const raw = rawConnection(path);
    raw.prepare(`UPDATE "${tablesFor().messages}" SET bound_at = NULL WHERE conversation_id = 'conv-n'`).run();
    raw.close();
    // Half a window later the next holder takes m1 over and fails it; half a window after that, a re-send.
    clock += WINDOW / 2;
    for (const c of ["conv-b", "conv-n"]) await bindNext(store, c, true);
    clock += WINDOW / 2;
    const listed = (await store.listFailedTurns({ reopenWithinMs: WINDOW })).turns.map((t) => [t.conversationId, t.reopenable, t.pastReopenWindow]);
    expect(listed).toEqual([["conv-b", false, true], ["conv-n", true, false]]);
    expect(await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: false, pastReopenWindow: true });
    expect(await store.appendUserMessage("conv-n", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true });
    await bindNext(store, "conv-n");
    expect((await store.message("conv-n", "m1"))?.boundAt).toBeUndefined();
    await store.close();
  });

  it("migrate() adds bound_at to a messages table made without it: a message bound before stays undated, the next one is dated at its binding", async () => {
    let clock = 3_000_000;
    const path = freshPath();
    const old = new SqliteConversationStore({ path, now: () => clock });
    await old.appendUserMessage("conv-m", { id: "m1", content: user("m1") });
    await bindNext(old, "conv-m");
    await old.close();
    const raw = rawConnection(path);
    raw.exec(`ALTER TABLE dispatch_once_messages DROP COLUMN bound_at`);
    raw.close();
    clock += 1_000;
    const upgraded = new SqliteConversationStore({ path, now: () => clock });
    await bindNext(upgraded, "conv-m");
    expect((await upgraded.message("conv-m", "m1"))?.boundAt).toBeUndefined();
    await upgraded.appendUserMessage("conv-m2", { id: "m1", content: user("m1") });
    await bindNext(upgraded, "conv-m2");
    expect((await upgraded.message("conv-m2", "m1"))?.boundAt).toBe(3_001_000);
    await upgraded.close();
  });

  it("a window that is not a finite number of milliseconds, 0 or more, is refused with invalid_store_input, changing nothing", async () => {
    const store = new SqliteConversationStore({ path: freshPath() });
    for (const bad of [-1, Number.NaN, Infinity, "60000"]) {
      await rejectsWith(store.appendUserMessage("conv-x", { id: "m1", content: user("m1") }, { reopenWithinMs: bad as number }), "invalid_store_input", "reopenWithinMs");
    }
    await rejectsWith(store.appendUserMessage("conv-x", { id: "m1", content: user("m1") }, 5 as never), "invalid_store_input", "options");
    expect(await store.message("conv-x", "m1")).toBeUndefined();
    await store.close();
  });
});

describe("TURN-24 committed call keys", () => {
  /** m1 bound in `c` under a fresh lease; commits its turn `turnIndex` (tool use) with the given keys. */
  async function commitWith(store: SqliteConversationStore, c: string, callKeys?: { callId: string; key: string; ordinal?: number; carriedFromTurn?: number }[]) {
    const lease = await store.acquireLease(c, "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    try {
      const begun = (await store.beginTurn(c, lease.fence))!;
      return await store.commitTurn(c, { fence: lease.fence, messageId: begun.message.id, turnIndex: begun.turnIndex, assistant: { calls: ["toolu_1"] }, toolResults: { toolu_1: "paid" }, stopReason: "tool_use", answers: false, ...(callKeys !== undefined ? { callKeys } : {}) });
    } finally {
      await store.releaseLease(c, lease.fence);
    }
  }

  it("migrate() adds call_keys to a turns table made without it: turns committed before read back without keys, the earlier version's insert still runs (its turn without keys), a new commit keeps them; stored text that is not a list of keys is store_corrupt", async () => {
    const path = freshPath();
    const old = new SqliteConversationStore({ path });
    await old.appendUserMessage("conv-k", { id: "m1", content: user("m1") });
    expect(await commitWith(old, "conv-k")).toEqual({ committed: true });
    await old.close();
    const raw = rawConnection(path);
    raw.exec(`ALTER TABLE dispatch_once_turns DROP COLUMN call_keys`);
    const upgraded = new SqliteConversationStore({ path });
    const columns = (raw.prepare("SELECT name FROM pragma_table_info('dispatch_once_turns')").all() as { name: string }[]).map((r) => r.name);
    expect(columns).toContain("call_keys");
    upgraded.migrate();
    // The earlier version's insert (it names the columns it knows), against the migrated table.
    raw.prepare(`INSERT INTO dispatch_once_turns (conversation_id, turn_index, message_id, stop_reason, assistant, tool_results) VALUES (?, ?, ?, ?, ?, ?)`).run("conv-k", 1, "m1", "tool_use", "{}", null);
    const keys = [{ callId: "toolu_1", key: "k-\u00e9\u0000", ordinal: 0, carriedFromTurn: 0 }, { callId: "toolu_1", key: "k2" }];
    expect(await commitWith(upgraded, "conv-k", keys)).toEqual({ committed: true });
    const turns = await upgraded.turnsOf("conv-k", "m1");
    expect(turns.map((t) => [t.turnIndex, "callKeys" in t, t.callKeys])).toEqual([[0, false, undefined], [1, false, undefined], [2, true, keys]]);
    expect(raw.prepare(`SELECT call_keys FROM dispatch_once_turns WHERE turn_index = 2`).get()).toEqual({ call_keys: JSON.stringify(keys) });
    for (const text of ["not json", '{"callId":"toolu_1","key":"k"}', '[{"callId":"toolu_1"}]']) {
      raw.prepare(`UPDATE dispatch_once_turns SET call_keys = ? WHERE turn_index = 2`).run(text);
      await rejectsWith(upgraded.turnsOf("conv-k", "m1"), "store_corrupt");
    }
    raw.close();
    await upgraded.close();
  });

  it("a malformed callKeys is refused with invalid_store_input naming it, and nothing of the commit is written", async () => {
    const store = new SqliteConversationStore({ path: freshPath() });
    await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") });
    await rejectsWith(commitWith(store, "conv-b", "k1" as never), "invalid_store_input", "callKeys");
    await rejectsWith(commitWith(store, "conv-b", [{ callId: "toolu_1", key: "k1", ordinal: -1 }]), "invalid_store_input", "callKeys[0].ordinal");
    await rejectsWith(commitWith(store, "conv-b", [{ callId: "toolu_1", key: "" }]), "invalid_store_input", "callKeys[0].key");
    expect(await store.turnsOf("conv-b", "m1")).toEqual([]);
    expect(await store.log("conv-b")).toEqual([]);
    await store.close();
  });
});
