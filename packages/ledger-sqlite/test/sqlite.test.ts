// Store-specific tests: every assertion about what was written reads the SQLite file through
// an independent connection. The general ledger contract is the conformance kit's job.
import Database from "better-sqlite3";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  DEFAULT_MAX_RESULT_BYTES,
  LedgerCorruptError,
  LedgerUnavailableError,
  ROW_FORMAT_VERSION,
  ResultNotStorableError,
  StaleClaimError,
} from "@dispatch-once/core";
import {
  InvalidLedgerInputError,
  SqliteLedger,
  addClaimIdColumnSql,
  addRequestColumnSql,
  auditTableSql,
  createSqliteLedger,
  listIndexesSql,
  retiredTableSql,
  schemaSql,
  tableSql,
} from "../src/index.js";
import {
  REQUEST,
  columnBytes,
  manualClock,
  rawConnection,
  request,
  resultBytes,
  selectRow,
  seqOf,
  tempDir,
  type StoredRow,
} from "./helpers.js";

const TABLE = "dispatch_once_ledger";
const RETENTION = 60_000;

let dir: string;
let cleanup: () => void;
let path: string;
let raw: Database.Database;
let clock: ReturnType<typeof manualClock>;
let ledger: SqliteLedger;
const opened: { close(): unknown }[] = [];

function open(options: Partial<ConstructorParameters<typeof SqliteLedger>[0]> = {}): SqliteLedger {
  const l = new SqliteLedger({ path, retentionMs: RETENTION, now: clock.now, ...options });
  opened.push(l);
  return l;
}

function stored(key: string): StoredRow | undefined {
  return selectRow(raw, TABLE, key);
}

beforeEach(() => {
  ({ dir, cleanup } = tempDir("store"));
  path = join(dir, "ledger.db");
  clock = manualClock();
  ledger = open();
  raw = rawConnection(path);
});

afterEach(async () => {
  for (const l of opened.splice(0)) await l.close();
  raw.close();
  cleanup();
});

describe("schema and settings", () => {
  it("creates the table (the key index, the in-flight partial index and the three listing indexes) and the audit table on open, in WAL mode with synchronous=FULL (durable)", () => {
    const storeClock = open({ now: undefined });
    const objects = raw
      .prepare("SELECT type, name FROM sqlite_master WHERE tbl_name = ? ORDER BY type, name")
      .all(TABLE) as { type: string; name: string }[];
    expect(objects.map((o) => `${o.type}:${o.name}`)).toEqual([
      `index:${TABLE}_by_conversation`,
      `index:${TABLE}_by_state`,
      `index:${TABLE}_by_tool`,
      `index:${TABLE}_in_flight`,
      `index:sqlite_autoindex_${TABLE}_1`,
      `table:${TABLE}`,
    ]);
    expect(raw.pragma("journal_mode", { simple: true })).toBe("wal");
    expect(storeClock.database.pragma("synchronous", { simple: true })).toBe(2);
    expect(storeClock.capabilities).toEqual({
      durability: "durable",
      clock: "store",
      sharedAcrossProcesses: true,
      maxResultBytes: DEFAULT_MAX_RESULT_BYTES,
      supports: { listRows: true, resolve: true, auditTrail: true, listExpiredInFlight: true, retire: true },
    });
    expect(raw.prepare("SELECT name FROM sqlite_master WHERE tbl_name = ? ORDER BY name").pluck().all(`${TABLE}_audit`)).toEqual([`${TABLE}_audit`, `${TABLE}_audit_by_key`]);
    // LEDGER-28: the retired claim ids (a WITHOUT ROWID table keyed by key and claim id), and the index sweep forgets them by.
    expect(raw.prepare("SELECT name FROM sqlite_master WHERE tbl_name = ? ORDER BY name").pluck().all(`${TABLE}_retired`)).toEqual([
      `${TABLE}_retired`,
      `${TABLE}_retired_by_until`,
    ]);
  });

  it("declares synchronous=NORMAL volatile, and an in-memory database volatile and unshared", () => {
    const normal = open({ synchronous: "NORMAL" });
    expect(normal.database.pragma("synchronous", { simple: true })).toBe(1);
    expect(normal.capabilities.durability).toBe("volatile");
    const memory = open({ path: ":memory:" });
    expect(memory.capabilities).toMatchObject({ durability: "volatile", sharedAcrossProcesses: false });
  });

  it("LEDGER-14 a brought connection on a new file, journal_mode set to WAL and synchronous never set, is declared by the setting it runs with (volatile), not the one it reported before the file was first read", async () => {
    // SQLite (as better-sqlite3 builds it, SQLITE_DEFAULT_WAL_SYNCHRONOUS=1) reports FULL until the
    // connection first reads the file in WAL mode, then runs with NORMAL unless the application set
    // synchronous itself: read before that, a connection that loses the last commits on power
    // loss was declared durable.
    const own = new Database(join(dir, "fresh-wal.db"));
    own.pragma("journal_mode = WAL");
    const adopted = new SqliteLedger({ database: own });
    expect(await adopted.claim(request("a"))).toMatchObject({ outcome: "claimed", fence: 1 });
    const runsWith = Number(own.pragma("synchronous", { simple: true }));
    expect([adopted.capabilities.durability, runsWith]).toEqual([runsWith >= 2 ? "durable" : "volatile", runsWith]);
    await adopted.close();
    own.close();
  });

  it("adopts a connection it is given: reads its settings, never changes or closes it", async () => {
    const own = new Database(join(dir, "own.db"));
    own.pragma("journal_mode = WAL");
    own.pragma("synchronous = NORMAL");
    const adopted = new SqliteLedger({ database: own, table: "calls" });
    expect(adopted.capabilities.durability).toBe("volatile");
    expect(own.pragma("synchronous", { simple: true })).toBe(1);
    expect(await adopted.claim(request("a"))).toMatchObject({ outcome: "claimed", fence: 1 });
    await adopted.close();
    expect(own.open).toBe(true);
    expect(own.prepare("SELECT state FROM calls WHERE key = 'a'").get()).toEqual({ state: "in_flight" });
    own.close();
  });

  it("sweep reads and deletes by ranges of claim order (rowid), never by a table scan", () => {
    const storeClock = open({ now: undefined });
    const { sweepScan, sweepRange } = (storeClock as unknown as { stmts: Record<string, { source: string }> }).stmts;
    for (const statement of [sweepScan, sweepRange]) {
      expect(statement?.source).toContain("julianday('now')");
      const plan = raw.prepare(`EXPLAIN QUERY PLAN ${statement?.source}`).all(1, 2) as { detail: string }[];
      expect(plan.map((p) => p.detail).join("\n")).toMatch(/SEARCH \S+ USING INTEGER PRIMARY KEY \(rowid>\? AND rowid<\?\)|SEARCH \S+ USING INTEGER PRIMARY KEY \(rowid>\?\)/);
    }
  });

  it("schemaSql() is the plain SQL migrate() runs, for a custom table", () => {
    const sql = schemaSql("tool_calls");
    const db = new Database(":memory:");
    db.exec(sql);
    db.exec(sql); // idempotent
    const names = (db.prepare("SELECT name FROM sqlite_master ORDER BY name").all() as { name: string }[]).map((r) => r.name);
    expect(names).toEqual([
      "sqlite_autoindex_tool_calls_1",
      "tool_calls",
      "tool_calls_audit",
      "tool_calls_audit_by_key",
      "tool_calls_by_conversation",
      "tool_calls_by_state",
      "tool_calls_by_tool",
      "tool_calls_in_flight",
      "tool_calls_retired",
      "tool_calls_retired_by_until",
    ]);
    db.close();
  });
});

describe("the store's clock (LEDGER-20)", () => {
  it("takes every time from SQLite inside the statement, never from the process clock", async () => {
    const storeClock = open({ now: undefined });
    expect(storeClock.capabilities.clock).toBe("store");
    const before = Date.now();
    // A process clock that is wildly wrong must not reach the ledger's rows.
    const wrong = vi.spyOn(Date, "now").mockReturnValue(0);
    let claim, renewed;
    try {
      claim = await storeClock.claim(request("t", { leaseMs: 5000 }));
      renewed = await storeClock.renew("t", 1, 7000);
      await storeClock.complete("t", 1, "1");
    } finally {
      wrong.mockRestore();
    }
    const after = Date.now();
    const row = stored("t");
    expect(row?.claimed_at).toBeGreaterThanOrEqual(before);
    expect(row?.claimed_at).toBeLessThanOrEqual(after);
    expect(claim).toEqual({ outcome: "claimed", fence: 1, leaseExpiresAt: (row?.claimed_at ?? 0) + 5000, takeover: false, request: REQUEST });
    expect(renewed?.leaseExpiresAt).toBeGreaterThanOrEqual((row?.claimed_at ?? 0) + 7000);
    expect(renewed?.leaseExpiresAt).toBeLessThanOrEqual(after + 7000);
    expect(row?.finished_at).toBeGreaterThanOrEqual(before);
    expect(row?.expires_at).toBe((row?.finished_at ?? 0) + RETENTION);
  });

  it("a lease set in the past on the store's clock is expired for every process", async () => {
    const storeClock = open({ now: undefined });
    await storeClock.claim(request("t"));
    raw.prepare(`UPDATE ${TABLE} SET lease_expires_at = ? WHERE key = 't'`).run(Date.now() - 1);
    expect(await storeClock.claim(request("t", { owner: "attempt-2" }))).toMatchObject({ outcome: "claimed", fence: 2, takeover: true });
  });
});

describe("claims as stored rows", () => {
  it("a first claim writes one in-flight row with fence 1, a lease on the process clock, no expiry, and its request (LEDGER-21)", async () => {
    const claim = await ledger.claim(request("k1", { leaseMs: 5000, owner: "proc-7/attempt-2" }));
    expect(claim).toEqual({ outcome: "claimed", fence: 1, leaseExpiresAt: clock.now() + 5000, takeover: false, request: REQUEST });
    expect(stored("k1")).toEqual({
      key: "k1",
      v: ROW_FORMAT_VERSION,
      state: "in_flight",
      tool_name: "send_payment",
      effect: "keyed_write",
      fence: 1,
      claimed_at: clock.now(),
      owner: "proc-7/attempt-2",
      lease_expires_at: clock.now() + 5000,
      result: null,
      error: null,
      reason: null,
      finished_at: null,
      expires_at: null,
      request: REQUEST,
    });
  });

  it("a second claim of a live key returns the stored row (with the first request) and writes nothing", async () => {
    await ledger.claim(request("k1"));
    const before = stored("k1");
    clock.advance(10);
    const second = await ledger.claim(request("k1", { owner: "attempt-2", request: '{"amount":9999}' }));
    expect(second).toEqual({
      outcome: "existing",
      row: {
        key: "k1",
        toolName: "send_payment",
        effect: "keyed_write",
        fence: 1,
        claimedAt: before?.claimed_at,
        request: REQUEST,
        state: "in_flight",
        owner: "attempt-1",
        leaseExpiresAt: before?.lease_expires_at,
      },
    });
    expect(stored("k1")).toEqual(before);
  });

  it("an expired keyed_write claim is taken over: fence 2 in the row, the first request kept and returned, the old owner refused", async () => {
    await ledger.claim(request("k1"));
    raw.prepare(`UPDATE ${TABLE} SET lease_expires_at = ? WHERE key = 'k1'`).run(clock.now() - 1);
    const takeover = await ledger.claim(request("k1", { owner: "attempt-2", request: '{"amount":1250, "to":"acct_1"}' }));
    expect(takeover).toEqual({ outcome: "claimed", fence: 2, leaseExpiresAt: clock.now() + 30_000, takeover: true, request: REQUEST });
    expect(stored("k1")).toMatchObject({ state: "in_flight", fence: 2, owner: "attempt-2", request: REQUEST });
    await expect(ledger.complete("k1", 1, "{}")).rejects.toBeInstanceOf(StaleClaimError);
    expect(stored("k1")).toMatchObject({ state: "in_flight", fence: 2, result: null });
  });

  it("an expired unkeyed_write claim becomes unknown (lease_expired) in the row, keeps its request, and is never re-claimed", async () => {
    await ledger.claim(request("u1", { effect: "unkeyed_write" }));
    raw.prepare(`UPDATE ${TABLE} SET lease_expires_at = ? WHERE key = 'u1'`).run(clock.now());
    const seen = await ledger.claim(request("u1", { effect: "unkeyed_write", owner: "attempt-2", request: '{"other":true}' }));
    expect(seen).toEqual({
      outcome: "existing",
      row: {
        key: "u1",
        toolName: "send_payment",
        effect: "unkeyed_write",
        fence: 1,
        claimedAt: clock.now(),
        request: REQUEST,
        state: "unknown",
        reason: "lease_expired",
        finishedAt: clock.now(),
      },
    });
    expect(stored("u1")).toMatchObject({
      state: "unknown",
      fence: 1,
      reason: "lease_expired",
      request: REQUEST,
      owner: null,
      lease_expires_at: null,
      finished_at: clock.now(),
      expires_at: clock.now() + RETENTION,
    });
    expect(await ledger.claim(request("u1", { effect: "unkeyed_write" }))).toMatchObject({ outcome: "existing" });
  });

  it("a released row keeps its fence and request and is re-claimed with the next fence and the first request, moving to the end of claim order", async () => {
    await ledger.claim(request("k1"));
    await ledger.claim(request("k2"));
    expect(seqOf(raw, TABLE, "k1")).toBeLessThan(seqOf(raw, TABLE, "k2") ?? 0);
    await ledger.release("k1", 1);
    expect(stored("k1")).toMatchObject({ state: "released", fence: 1, owner: null, expires_at: clock.now() + RETENTION, request: REQUEST });
    expect(await ledger.claim(request("k1", { owner: "attempt-2", request: '{"amount":1}' }))).toEqual({
      outcome: "claimed",
      fence: 2,
      leaseExpiresAt: clock.now() + 30_000,
      takeover: false,
      request: REQUEST,
    });
    expect(stored("k1")).toMatchObject({ state: "in_flight", fence: 2, finished_at: null, expires_at: null, request: REQUEST });
    expect(seqOf(raw, TABLE, "k1")).toBeGreaterThan(seqOf(raw, TABLE, "k2") ?? Infinity);
  });

  it("a renewed lease is written to the row; renew by a stale fence is refused", async () => {
    await ledger.claim(request("k1", { leaseMs: 1000 }));
    clock.advance(500);
    expect(await ledger.renew("k1", 1, 1000)).toEqual({ leaseExpiresAt: clock.now() + 1000 });
    expect(stored("k1")?.lease_expires_at).toBe(clock.now() + 1000);
    await expect(ledger.renew("k1", 2, 1000)).rejects.toMatchObject({ code: "stale_claim" });
  });
});

describe("fencing: a stale owner changes nothing", () => {
  const transitions: [string, (l: SqliteLedger, fence: number) => Promise<unknown>][] = [
    ["complete", (l, f) => l.complete("k1", f, '{"ok":true}')],
    ["fail", (l, f) => l.fail("k1", f, { name: "Declined", message: "card declined" })],
    ["markUnknown", (l, f) => l.markUnknown("k1", f, "tool_error")],
    ["release", (l, f) => l.release("k1", f)],
    ["renew", (l, f) => l.renew("k1", f, 999)],
  ];
  for (const [name, act] of transitions) {
    it(`${name} with a wrong fence, or on a finished row, is stale_claim and leaves the row as it was`, async () => {
      await ledger.claim(request("k1"));
      const live = stored("k1");
      for (const fence of [0, 2, 1.5, Number.NaN]) {
        await expect(act(ledger, fence)).rejects.toBeInstanceOf(StaleClaimError);
        expect(stored("k1")).toEqual(live);
      }
      // SQLite would coerce the text '1' to the integer column's 1: the adapter must not.
      await expect(act(ledger, "1" as unknown as number)).rejects.toBeInstanceOf(StaleClaimError);
      await ledger.complete("k1", 1, '"done"');
      const done = stored("k1");
      await expect(act(ledger, 1)).rejects.toBeInstanceOf(StaleClaimError);
      expect(stored("k1")).toEqual(done);
    });
  }
});

describe("results byte for byte", () => {
  const samples: [string, string][] = [
    ["ascii", '{"payment_id":"pay_1","amount":1250}'],
    ["unicode", '{"name":"Zoë Ødegård","city":"København","note":"naïve café — “quoted”"}'],
    ["astral", '{"emoji":"😀👩‍👩‍👧‍👦","math":"𝔸𝔹ℂ","cjk":"𠜎𠜱"}'],
    ["whitespace and key order kept", '{ "b" : 1 ,\n\t"a" : [ 1 , 2 ] }  '],
    ["escapes", '{"s":"\\u0000\\n\\"\\\\\\ud83d\\ude00\\ud800"}'],
    ["raw control characters and NUL", 'x\u0000y\u0001z\u007f'],
    ["deep nesting", "[".repeat(500) + "]".repeat(500)],
    ["number forms", '[1.0,1e+22,-0,0.1000000000000000055511151231257827]'],
  ];
  for (const [name, text] of samples) {
    it(`${name}: the stored bytes are the UTF-8 of the text, and every read returns the same string`, async () => {
      await ledger.claim(request("r"));
      await ledger.complete("r", 1, text);
      expect(resultBytes(raw, TABLE, "r")?.equals(Buffer.from(text, "utf8"))).toBe(true);
      const replay = await ledger.claim(request("r"));
      expect(replay.outcome === "existing" && replay.row.state === "completed" && replay.row.result).toBe(text);
      const reopened = open();
      const looked = await reopened.lookup("r");
      expect(looked?.state === "completed" && looked.result).toBe(text);
    });
  }

  it("accepts exactly maxResultBytes (counted in UTF-8) and refuses one byte more, leaving the claim in flight", async () => {
    const small = open({ maxResultBytes: 1000, table: "limited" });
    expect(small.capabilities.maxResultBytes).toBe(1000);
    const exact = "é".repeat(499) + "ab"; // 998 + 2 = 1000 bytes, 501 UTF-16 units
    const over = "é".repeat(500) + "a"; // 1001 bytes
    await small.claim(request("big"));
    await expect(small.complete("big", 1, over)).rejects.toBeInstanceOf(ResultNotStorableError);
    expect(selectRow(raw, "limited", "big")).toMatchObject({ state: "in_flight", fence: 1, result: null });
    await small.complete("big", 1, exact);
    expect(resultBytes(raw, "limited", "big")?.length).toBe(1000);
  });

  it("stores a result of the default 1 MiB limit and refuses 1 MiB + 1", async () => {
    const mib = "x".repeat(DEFAULT_MAX_RESULT_BYTES - 2);
    await ledger.claim(request("m1"));
    await expect(ledger.complete("m1", 1, `"${mib}x"`)).rejects.toMatchObject({ code: "result_not_storable" });
    await ledger.complete("m1", 1, `"${mib}"`);
    expect(resultBytes(raw, TABLE, "m1")?.length).toBe(DEFAULT_MAX_RESULT_BYTES);
  });

  it("refuses a lone surrogate (it cannot round-trip through UTF-8) and a stale owner hears stale_claim first", async () => {
    await ledger.claim(request("s"));
    await expect(ledger.complete("s", 1, '"\ud800"')).rejects.toBeInstanceOf(ResultNotStorableError);
    await expect(ledger.complete("s", 2, '"\ud800"')).rejects.toBeInstanceOf(StaleClaimError);
    await expect(ledger.complete("s", 2, "x".repeat(DEFAULT_MAX_RESULT_BYTES + 1))).rejects.toBeInstanceOf(StaleClaimError);
    expect(stored("s")).toMatchObject({ state: "in_flight", result: null });
  });

  it("stores a failure as JSON and replays it", async () => {
    await ledger.claim(request("f"));
    const error = { name: "CardDeclined", message: "Karte abgelehnt ✗", code: "card_declined", details: { decline: "insufficient_funds", n: [1, 2] } };
    await ledger.fail("f", 1, error);
    expect(JSON.parse(stored("f")?.error ?? "null")).toEqual(error);
    expect(await ledger.claim(request("f"))).toMatchObject({ outcome: "existing", row: { state: "failed", error } });
  });
});

describe("the stored request (LEDGER-21)", () => {
  const samples: [string, string][] = [
    ["unicode and astral", '{"name":"Zoë Ødegård","emoji":"😀👩‍👩‍👧‍👦","cjk":"𠜎"}'],
    ["whitespace and key order kept", '{ "to" : "acct_1" ,\n\t"amount" : 1250 }  '],
    ["escapes and raw NUL", '{"s":"\\u0000\\ud800"}\u0000x'],
    ["empty text", ""],
  ];
  for (const [name, text] of samples) {
    it(`${name}: stored as the UTF-8 of the text and returned identically by claim, lookup and every later state`, async () => {
      const claim = await ledger.claim(request("q", { request: text }));
      expect(claim.outcome === "claimed" && claim.request).toBe(text);
      expect(columnBytes(raw, TABLE, "q", "request")?.equals(Buffer.from(text, "utf8"))).toBe(true);
      expect((await ledger.lookup("q"))?.request).toBe(text);
      await ledger.complete("q", 1, '"ok"');
      expect(stored("q")?.request).toBe(text);
      const replay = await ledger.claim(request("q", { request: "{}" }));
      expect(replay.outcome === "existing" && replay.row.request).toBe(text);
      expect((await open().lookup("q"))?.request).toBe(text);
    });
  }

  it("every terminal transition keeps the request; a re-claim after release and a takeover return it", async () => {
    const terminal: [string, (key: string) => Promise<void>][] = [
      ["completed", (k) => ledger.complete(k, 1, "1")],
      ["failed", (k) => ledger.fail(k, 1, { name: "E", message: "m" })],
      ["unknown", (k) => ledger.markUnknown(k, 1, "tool_error")],
      ["released", (k) => ledger.release(k, 1)],
    ];
    for (const [state, finish] of terminal) {
      const key = `t-${state}`;
      await ledger.claim(request(key, { request: `{"first":"${state}"}` }));
      await finish(key);
      expect(stored(key), state).toMatchObject({ state, request: `{"first":"${state}"}` });
      expect((await ledger.lookup(key))?.request, state).toBe(`{"first":"${state}"}`);
    }
    // Released, then re-claimed, then released again and taken over after expiry: still the first request.
    const again = await ledger.claim(request("t-released", { request: "{}" }));
    expect(again).toMatchObject({ outcome: "claimed", fence: 2, request: '{"first":"released"}' });
    raw.prepare(`UPDATE ${TABLE} SET lease_expires_at = ? WHERE key = 't-released'`).run(clock.now() - 1);
    const taken = await ledger.claim(request("t-released", { request: "[]" }));
    expect(taken).toMatchObject({ outcome: "claimed", fence: 3, takeover: true, request: '{"first":"released"}' });
    expect(stored("t-released")?.request).toBe('{"first":"released"}');
  });
});

describe("schema migration (the request column)", () => {
  /** The table as the first release created it: no request column. */
  const OLD_SCHEMA = schemaSql("old").replace(/\n\s*request\s+TEXT,/, "");

  it("migrate on open adds the column to an older table; its old rows read as ledger_corrupt, new claims work", async () => {
    expect(OLD_SCHEMA).not.toContain("request");
    raw.exec(OLD_SCHEMA);
    raw
      .prepare(
        `INSERT INTO old (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, result)
         VALUES ('legacy', 1, 'completed', 'send_payment', 'keyed_write', 1, ?, ?, ?, '"paid"')`,
      )
      .run(clock.now(), clock.now(), clock.now() + RETENTION);
    const upgraded = open({ table: "old" });
    const columns = raw.prepare("SELECT name FROM pragma_table_info('old')").pluck().all();
    expect(columns).toContain("request");
    // Reopening (or migrate() again) is a no-op: the column is added exactly once.
    open({ table: "old" }).migrate();
    expect(raw.prepare("SELECT count(*) FROM pragma_table_info('old') WHERE name = 'request'").pluck().get()).toBe(1);
    // The old row has no request: the re-run could not send the first request, so it is never absent.
    await expect(upgraded.lookup("legacy")).rejects.toMatchObject({ code: "ledger_corrupt", key: "legacy" });
    await expect(upgraded.claim(request("legacy"))).rejects.toBeInstanceOf(LedgerCorruptError);
    expect(selectRow(raw, "old", "legacy")).toMatchObject({ state: "completed", request: null });
    expect(await upgraded.claim(request("fresh"))).toMatchObject({ outcome: "claimed", fence: 1, request: REQUEST });
    expect(selectRow(raw, "old", "fresh")?.request).toBe(REQUEST);
  });

  it("with migrate: false an older table is refused at open (ledger_unavailable naming the fix); addRequestColumnSql() is that fix", () => {
    raw.exec(OLD_SCHEMA);
    let thrown: unknown;
    try {
      open({ table: "old", migrate: false });
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(LedgerUnavailableError);
    expect((thrown as Error).message).toMatch(/addRequestColumnSql\("old"\)/);
    raw.exec(addRequestColumnSql("old"));
    expect(open({ table: "old", migrate: false }).table).toBe("old");
  });
});

describe("schema migration (the claim_id column, LEDGER-26)", () => {
  /** The table as the release before claim ids created it. */
  const V2_SCHEMA = tableSql("v2").replace(/\n\s*claim_id\s+TEXT,/, "");

  it("migrate on open adds claim_id to a table without it, once; an in-flight row of the old version is never anyone's own claim; new claims are recognised by their id", async () => {
    expect(V2_SCHEMA).not.toContain("claim_id");
    raw.exec(V2_SCHEMA);
    raw
      .prepare(
        `INSERT INTO v2 (key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, request)
         VALUES ('old-claim', 1, 'in_flight', 'send_payment', 'keyed_write', 1, ?, 'owner-a', ?, '{}')`,
      )
      .run(clock.now(), clock.now() + 60_000);
    const upgraded = open({ table: "v2" });
    open({ table: "v2" }).migrate();
    expect(raw.prepare("SELECT count(*) FROM pragma_table_info('v2') WHERE name = 'claim_id'").pluck().get()).toBe(1);
    const id = "claim-id-0123456789abcdef";
    expect(await upgraded.claim(request("old-claim", { owner: "owner-a", claimId: id }))).toMatchObject({ outcome: "existing" });
    const first = await upgraded.claim(request("new-claim", { claimId: id }));
    expect(first).toMatchObject({ outcome: "claimed", fence: 1 });
    expect(await upgraded.claim(request("new-claim", { claimId: id }))).toMatchObject({ outcome: "claimed", fence: 1, takeover: false });
    expect(await upgraded.claim(request("new-claim", { claimId: "another-claim-id-0123456" }))).toMatchObject({ outcome: "existing" });
  });

  it("with migrate: false a table without claim_id is refused at open, naming addClaimIdColumnSql(), which is the fix", () => {
    raw.exec(V2_SCHEMA);
    expect(() => open({ table: "v2", migrate: false })).toThrow(/addClaimIdColumnSql\("v2"\)/);
    raw.exec(addClaimIdColumnSql("v2") + listIndexesSql("v2") + auditTableSql("v2") + retiredTableSql("v2"));
    expect(open({ table: "v2", migrate: false }).table).toBe("v2");
  });
});

describe("corrupt rows are never absent", () => {
  const corruptions: [string, string][] = [
    ["another format version", `UPDATE ${TABLE} SET v = 2`],
    ["an unknown state", `UPDATE ${TABLE} SET state = 'done'`],
    ["an unknown effect", `UPDATE ${TABLE} SET effect = 'read'`],
    ["a missing lease", `UPDATE ${TABLE} SET lease_expires_at = NULL`],
    ["a text fence", `UPDATE ${TABLE} SET fence = 'one'`],
    ["a finished row without expiry", `UPDATE ${TABLE} SET state = 'released', finished_at = 1, expires_at = NULL`],
    ["a failure that is not JSON", `UPDATE ${TABLE} SET state = 'failed', finished_at = 1, expires_at = 9e15, error = '{oops'`],
    ["a failure without a message", `UPDATE ${TABLE} SET state = 'failed', finished_at = 1, expires_at = 9e15, error = '{"name":"X"}'`],
    ["a result stored as a BLOB", `UPDATE ${TABLE} SET state = 'completed', finished_at = 1, expires_at = 9e15, result = X'7B7D'`],
    // A row of a version before the request column (LEDGER-21): doubt never becomes absence.
    ["a NULL request", `UPDATE ${TABLE} SET request = NULL`],
    ["a released row with a NULL request", `UPDATE ${TABLE} SET state = 'released', finished_at = 1, expires_at = 9e15, request = NULL`],
    ["a request stored as a BLOB", `UPDATE ${TABLE} SET request = X'7B7D'`],
  ];
  for (const [name, sql] of corruptions) {
    it(`${name}: claim and lookup raise ledger_corrupt and the row is not overwritten`, async () => {
      await ledger.claim(request("c"));
      raw.exec(sql);
      const before = stored("c");
      await expect(ledger.claim(request("c"))).rejects.toBeInstanceOf(LedgerCorruptError);
      await expect(ledger.lookup("c")).rejects.toMatchObject({ code: "ledger_corrupt", key: "c" });
      expect(stored("c")).toEqual(before);
    });
  }
});

describe("retention and sweep", () => {
  it("a finished row past retention reads as absent, is re-claimed with the next fence and the new claim's request, and in-flight rows are never swept", async () => {
    await ledger.claim(request("done"));
    await ledger.complete("done", 1, "1");
    await ledger.claim(request("old-live", { leaseMs: 1 })); // lease long expired, never finished
    clock.advance(RETENTION - 1);
    expect(await ledger.lookup("done")).toMatchObject({ state: "completed" });
    clock.advance(1);
    expect(await ledger.lookup("done")).toBeUndefined();
    // Not swept yet: the row is still there, so the fence continues instead of restarting. The
    // old row is forgotten, so this claim creates it anew and stores its own request (LEDGER-21).
    expect(await ledger.claim(request("done", { request: '{"second":"call"}' }))).toMatchObject({
      outcome: "claimed",
      fence: 2,
      takeover: false,
      request: '{"second":"call"}',
    });
    expect(stored("done")).toMatchObject({ state: "in_flight", fence: 2, request: '{"second":"call"}' });
    await ledger.release("done", 2);
    clock.advance(RETENTION);
    expect(await ledger.sweep()).toBe(1);
    expect(stored("done")).toBeUndefined();
    expect(stored("old-live")).toMatchObject({ state: "in_flight" });
    // Physically deleted: the key is absent again and starts over at fence 1 (see README).
    expect(await ledger.claim(request("done"))).toMatchObject({ outcome: "claimed", fence: 1 });
  });

  it("a re-claimed row moves behind older rows, so it never holds back the sweep of rows claimed after its first claim", async () => {
    await ledger.claim(request("x"));
    await ledger.release("x", 1);
    clock.advance(1);
    await ledger.claim(request("y"));
    await ledger.complete("y", 1, "1"); // finished at t0+1: expires at t0+1+R
    clock.advance(9);
    await ledger.claim(request("x")); // released -> fence 2, claimed at t0+10
    await ledger.complete("x", 2, "2");
    clock.set(clock.now() - 9 + RETENTION); // t0+1+R: y has expired, x has not
    expect(await ledger.sweep()).toBe(1);
    expect(stored("y")).toBeUndefined();
    expect(stored("x")).toMatchObject({ state: "completed", fence: 2 });
  });

  it("stops at the first row claimed within retention: the rows walked are the expired ones, not the table", async () => {
    const walker = open({ sweepBatchSize: 1 });
    const scan = (walker as unknown as { stmts: { sweepScan: { all: (...args: unknown[]) => unknown[] } } }).stmts.sweepScan;
    const all = scan.all.bind(scan);
    let steps = 0;
    scan.all = (...args: unknown[]) => {
      steps++;
      return all(...args);
    };
    for (const key of ["old-1", "old-2"]) {
      await walker.claim(request(key));
      await walker.complete(key, 1, "1");
    }
    clock.advance(RETENTION);
    for (let i = 0; i < 50; i++) {
      await walker.claim(request(`young-${i}`));
      await walker.complete(`young-${i}`, 1, "1");
    }
    expect(await walker.sweep()).toBe(2);
    expect(steps).toBe(3); // old-1, old-2, then the first young row ends the walk
    expect(raw.prepare(`SELECT count(*) FROM ${TABLE}`).pluck().get()).toBe(50);
  });

  it("sweeps in batches until nothing expired is left, and only expired rows", async () => {
    const batched = open({ sweepBatchSize: 2 });
    for (let i = 0; i < 5; i++) {
      await batched.claim(request(`e${i}`));
      await batched.complete(`e${i}`, 1, "null");
    }
    clock.advance(RETENTION);
    await batched.claim(request("fresh"));
    await batched.fail("fresh", 1, { name: "E", message: "m" });
    expect(await batched.sweep()).toBe(5);
    expect(raw.prepare(`SELECT key FROM ${TABLE}`).pluck().all()).toEqual(["fresh"]);
    expect(await batched.sweep()).toBe(0);
  });
});

describe("restart and other connections", () => {
  it("a new instance over the same file sees every row and continues the fences", async () => {
    await ledger.claim(request("a"));
    await ledger.complete("a", 1, '{"id":1}');
    await ledger.claim(request("b"));
    await ledger.release("b", 1);
    await ledger.close();
    const restarted = open();
    expect(await restarted.claim(request("a"))).toMatchObject({ outcome: "existing", row: { state: "completed", result: '{"id":1}' } });
    expect(await restarted.claim(request("b"))).toMatchObject({ outcome: "claimed", fence: 2 });
  });
});

describe("unavailable store", () => {
  it("a closed ledger refuses every operation with ledger_unavailable", async () => {
    await ledger.claim(request("k"));
    await ledger.close();
    await expect(ledger.claim(request("x"))).rejects.toBeInstanceOf(LedgerUnavailableError);
    await expect(ledger.complete("k", 1, "1")).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(ledger.lookup("k")).rejects.toMatchObject({ code: "ledger_unavailable" });
    await expect(ledger.sweep()).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(stored("x")).toBeUndefined();
    expect(stored("k")).toMatchObject({ state: "in_flight" });
  });

  it("a connection closed under the ledger is ledger_unavailable", async () => {
    const own = new Database(path);
    const adopted = new SqliteLedger({ database: own });
    own.close();
    await expect(adopted.claim(request("x"))).rejects.toBeInstanceOf(LedgerUnavailableError);
  });

  it("a path that cannot be opened, or a file that is not a database, is ledger_unavailable", () => {
    expect(() => createSqliteLedger(join(dir, "missing-dir", "l.db"))).toThrow(LedgerUnavailableError);
    const garbage = join(dir, "garbage.db");
    writeFileSync(garbage, "this is not an SQLite database, just text long enough to have a header.".repeat(20));
    expect(() => createSqliteLedger(garbage)).toThrow(LedgerUnavailableError);
  });

  it("a write lock held past the busy timeout is ledger_unavailable and nothing is written", async () => {
    await ledger.claim(request("held"));
    const impatient = open({ busyTimeoutMs: 20 });
    raw.exec("BEGIN IMMEDIATE");
    try {
      await expect(impatient.claim(request("new"))).rejects.toMatchObject({ code: "ledger_unavailable" });
      await expect(impatient.complete("held", 1, "1")).rejects.toBeInstanceOf(LedgerUnavailableError);
    } finally {
      raw.exec("ROLLBACK");
    }
    expect(stored("new")).toBeUndefined();
    expect(stored("held")).toMatchObject({ state: "in_flight", result: null });
    // The store is back: the same calls now succeed.
    expect(await impatient.claim(request("new"))).toMatchObject({ outcome: "claimed", fence: 1 });
  });

  it("LEDGER-22: refuses every operation inside the caller's own transaction (invalid_ledger_input, field database), writing nothing", async () => {
    const own = new Database(join(dir, "own.db"));
    const adopted = new SqliteLedger({ database: own });
    await adopted.claim(request("held"));
    const before = own.prepare("SELECT * FROM dispatch_once_ledger ORDER BY key").all();
    const ops: [string, () => Promise<unknown>][] = [
      ["claim", () => adopted.claim(request("x"))],
      ["renew", () => adopted.renew("held", 1, 1000)],
      ["complete", () => adopted.complete("held", 1, "1")],
      ["fail", () => adopted.fail("held", 1, { name: "E", message: "m" })],
      ["markUnknown", () => adopted.markUnknown("held", 1, "why")],
      ["release", () => adopted.release("held", 1)],
      ["retire", () => adopted.retire("held", "retired-claim-id-0123", { release: true })],
      ["lookup", () => adopted.lookup("held")],
      ["sweep", () => adopted.sweep()],
    ];
    for (const begin of ["BEGIN", "BEGIN IMMEDIATE"]) {
      own.exec(begin);
      for (const [name, op] of ops) {
        await expect(op(), `${begin} ${name}`).rejects.toMatchObject({ code: "invalid_ledger_input", field: "database" });
      }
      // Committing the caller's transaction must not commit a ledger write either: there is none.
      own.exec("COMMIT");
      expect(own.prepare("SELECT * FROM dispatch_once_ledger ORDER BY key").all()).toEqual(before);
    }
    // Outside a transaction the same connection works again.
    expect(await adopted.claim(request("x"))).toMatchObject({ outcome: "claimed", fence: 1 });
    await adopted.complete("held", 1, "1");
    own.close();
  });
});

describe("bad input is a typed error", () => {
  it("refuses bad options and arguments with invalid_ledger_input", async () => {
    const bad: [() => unknown, string][] = [
      [() => new SqliteLedger({ path, table: 'x"; DROP TABLE y; --' }), "table"],
      [() => new SqliteLedger({ path, retentionMs: -1 }), "retentionMs"],
      [() => new SqliteLedger({ path, maxResultBytes: 2_000_000_000 }), "maxResultBytes"],
      [() => new SqliteLedger({ path, synchronous: "OFF" as "FULL" }), "synchronous"],
      [() => new SqliteLedger({}), "path"],
      [() => new SqliteLedger({ path, database: raw }), "path"],
    ];
    for (const [make, field] of bad) {
      let thrown: unknown;
      try {
        make();
      } catch (error) {
        thrown = error;
      }
      expect(thrown).toBeInstanceOf(InvalidLedgerInputError);
      expect(thrown).toMatchObject({ code: "invalid_ledger_input", field });
    }
    await expect(ledger.claim(request("k", { leaseMs: -5 }))).rejects.toMatchObject({ field: "leaseMs" });
    await expect(ledger.claim(request("k", { effect: "read" as "keyed_write" }))).rejects.toMatchObject({ field: "effect" });
    await expect(ledger.claim(request(""))).rejects.toMatchObject({ field: "key" });
    // The request is stored and returned byte for byte (LEDGER-21): text only, and well-formed.
    for (const bad of [undefined, null, 42, { amount: 1 }, '{"s":"\ud800"}']) {
      await expect(ledger.claim(request("k", { request: bad as string }))).rejects.toMatchObject({
        code: "invalid_ledger_input",
        field: "request",
      });
    }
    const { request: _omitted, ...withoutRequest } = request("k");
    await expect(ledger.claim(withoutRequest as never)).rejects.toMatchObject({ field: "request" });
    expect(stored("k")).toBeUndefined();
    await ledger.claim(request("k"));
    await expect(ledger.fail("k", 1, { name: "E" } as { name: string; message: string })).rejects.toMatchObject({ field: "error" });
    expect(stored("k")).toMatchObject({ state: "in_flight" });
    expect(raw.prepare("SELECT count(*) FROM sqlite_master WHERE name = 'y'").pluck().get()).toBe(0);
  });
});
