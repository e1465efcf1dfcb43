// Expired in-flight rows that nobody claims again (issue 18): listExpiredInFlight() makes them
// visible, read-only, from the partial index on in-flight rows (never a scan of finished rows).
import Database from "better-sqlite3";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { isDispatchOnceError, type LedgerEffect } from "@dispatch-once/core";
import { SqliteLedger, inFlightIndexSql, schemaSql } from "../src/index.js";
import { manualClock, rawConnection, request, selectRow, tempDir } from "./helpers.js";

const TABLE = "dispatch_once_ledger";
let dir: string;
let cleanup: () => void;
let path: string;
let raw: Database.Database;
let clock: ReturnType<typeof manualClock>;
let ledger: SqliteLedger;

beforeEach(() => {
  ({ dir, cleanup } = tempDir("expired"));
  path = join(dir, "ledger.db");
  clock = manualClock();
  ledger = new SqliteLedger({ path, now: clock.now });
  raw = rawConnection(path);
});

afterEach(async () => {
  await ledger.close();
  raw.close();
  cleanup();
});

function claim(key: string, effect: LedgerEffect, leaseMs: number) {
  return ledger.claim(request(key, { effect, leaseMs, owner: "gone", request: `{"key":"${key}"}` }));
}

describe("listExpiredInFlight(): expired claims nobody came back for become visible", () => {
  it("lists only in-flight rows whose lease ran out, oldest expiry first, with olderThanMs and limit; reads without writing", async () => {
    await claim("u-old", "unkeyed_write", 1_000); // expires at +1 s
    await claim("k-mid", "keyed_write", 30_000); // +30 s
    await claim("u-new", "unkeyed_write", 59_000); // +59 s
    await claim("live", "keyed_write", 600_000);
    const done = await claim("done", "unkeyed_write", 1_000);
    if (done.outcome !== "claimed") throw new Error("expected a claim");
    await ledger.complete("done", done.fence, '"ok"');
    clock.advance(60_000);
    const before = raw.prepare(`SELECT * FROM "${TABLE}" ORDER BY seq`).all();

    const all = await ledger.listExpiredInFlight();
    expect(all.map((r) => r.key)).toEqual(["u-old", "k-mid", "u-new"]);
    for (const row of all) {
      expect(row).toMatchObject({ state: "in_flight", owner: "gone", fence: 1, request: `{"key":"${row.key}"}` });
      expect(row.leaseExpiresAt).toBeLessThanOrEqual(clock.now());
    }
    expect((await ledger.listExpiredInFlight({ olderThanMs: 20_000 })).map((r) => r.key)).toEqual(["u-old", "k-mid"]);
    expect((await ledger.listExpiredInFlight({ olderThanMs: 20_000, limit: 1 })).map((r) => r.key)).toEqual(["u-old"]);
    expect(await ledger.listExpiredInFlight({ olderThanMs: 3_600_000 })).toEqual([]);
    // Read-only: every stored row is as it was.
    expect(raw.prepare(`SELECT * FROM "${TABLE}" ORDER BY seq`).all()).toEqual(before);

    // Settled by the rules of their effect class when claimed again: the unkeyed one becomes
    // unknown (LEDGER-7), the keyed one is taken over; neither is listed any more.
    expect(await claim("u-old", "unkeyed_write", 1_000)).toMatchObject({ outcome: "existing", row: { state: "unknown", reason: "lease_expired" } });
    expect(await claim("k-mid", "keyed_write", 30_000)).toMatchObject({ outcome: "claimed", takeover: true, fence: 2 });
    expect((await ledger.listExpiredInFlight()).map((r) => r.key)).toEqual(["u-new"]);
    expect(selectRow(raw, TABLE, "u-old")).toMatchObject({ state: "unknown" });
  });

  it("on the store's clock (no test clock) too", async () => {
    const storeClock = new SqliteLedger({ path });
    await storeClock.claim(request("s", { effect: "unkeyed_write", leaseMs: 0 }));
    expect((await storeClock.listExpiredInFlight()).map((r) => r.key)).toEqual(["s"]);
    expect(await storeClock.listExpiredInFlight({ olderThanMs: 3_600_000 })).toEqual([]);
    await storeClock.close();
  });

  it("a listed row that does not decode raises ledger_corrupt naming its key", async () => {
    await claim("bad", "unkeyed_write", 1_000);
    clock.advance(2_000);
    raw.prepare(`UPDATE "${TABLE}" SET request = NULL WHERE key = 'bad'`).run(); // a 0.1.0 row
    const error = await ledger.listExpiredInFlight().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isDispatchOnceError(error, "ledger_corrupt"), String(error)).toBe(true);
    expect((error as { key?: string }).key).toBe("bad");
  });

  it("refuses bad options with invalid_ledger_input before any SQL", async () => {
    const cases: [unknown, string][] = [
      [{ olderThanMs: -1 }, "olderThanMs"],
      [{ olderThanMs: 1.5 }, "olderThanMs"],
      [{ olderThanMs: "5" }, "olderThanMs"],
      [{ limit: 0 }, "limit"],
      [{ limit: 10_001 }, "limit"],
      [{ limit: Number.NaN }, "limit"],
      [null, "options"],
    ];
    for (const [options, field] of cases) {
      await expect(ledger.listExpiredInFlight(options as never), JSON.stringify(options)).rejects.toMatchObject({ code: "invalid_ledger_input", field });
    }
  });

  it("walks the partial index on in-flight rows, never the finished ones (EXPLAIN QUERY PLAN, 200 000 finished rows)", async () => {
    raw.exec("BEGIN");
    const insert = raw.prepare(
      `INSERT INTO "${TABLE}" (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, result, request)
       VALUES (?, 1, 'completed', 'send_payment', 'keyed_write', 1, ?, ?, 9e15, '"ok"', '{}')`,
    );
    for (let i = 0; i < 200_000; i++) insert.run(`done-${i}`, 1_600_000_000_000 + i, 1_600_000_000_000 + i);
    raw.exec("COMMIT");
    for (let i = 0; i < 500; i++) await claim(`f-${i}`, "unkeyed_write", i);
    clock.advance(1_000);
    raw.exec("ANALYZE");
    const source = (ledger as unknown as { stmts: Record<string, { source: string }> }).stmts.expiredInFlight!.source;
    const plan = (raw.prepare(`EXPLAIN QUERY PLAN ${source.replace(/dispatch_once_now_\w+\(\)/g, "0")}`).all(0, 100) as { detail: string }[])
      .map((p) => p.detail)
      .join("\n");
    console.log(`EXPLAIN QUERY PLAN listExpiredInFlight:\n${plan}`);
    expect(plan).toMatch(new RegExp(`SEARCH ${TABLE} USING INDEX ${TABLE}_in_flight \\(lease_expires_at<\\?\\)`));
    expect(plan).not.toMatch(/SCAN|TEMP B-TREE/);
    const started = performance.now();
    const listed = await ledger.listExpiredInFlight({ limit: 10_000 });
    const ms = performance.now() - started;
    expect(listed).toHaveLength(500);
    expect(listed[0]!.key).toBe("f-0");
    // The index is what keeps it off the finished rows: without it the same query scans them all.
    // (the listing index by state would serve it too, but sorted in a temporary B-tree: drop both).
    raw.exec(`DROP INDEX "${TABLE}_in_flight"`);
    raw.exec(`DROP INDEX "${TABLE}_by_state"`);
    const without = (raw.prepare(`EXPLAIN QUERY PLAN ${source.replace(/dispatch_once_now_\w+\(\)/g, "0")}`).all(0, 100) as { detail: string }[])
      .map((p) => p.detail)
      .join("\n");
    expect(without).toMatch(/SCAN/);
    console.log(`listed 500 of 200 500 rows in ${ms.toFixed(1)} ms; without the index the plan is:\n${without}`);
  });

  it("inFlightIndex: false creates no index (the claim and finish skip its writes); the listing is the same, by a scan", async () => {
    const other = join(dir, "no-index.db");
    const l = new SqliteLedger({ path: other, now: clock.now, inFlightIndex: false });
    const db = rawConnection(other);
    expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? ORDER BY name").pluck().all(TABLE)).toEqual([
      `${TABLE}_by_conversation`,
      `${TABLE}_by_state`,
      `${TABLE}_by_tool`,
      `sqlite_autoindex_${TABLE}_1`,
    ]);
    await l.claim(request("x", { effect: "unkeyed_write", leaseMs: 1_000 }));
    clock.advance(2_000);
    expect((await l.listExpiredInFlight()).map((r) => r.key)).toEqual(["x"]);
    expect(schemaSql("t", { inFlightIndex: false })).not.toContain("_in_flight");
    expect(schemaSql("t")).toContain(inFlightIndexSql("t"));
    expect(() => new SqliteLedger({ path: other, inFlightIndex: "yes" as never })).toThrow(expect.objectContaining({ code: "invalid_ledger_input", field: "inFlightIndex" }));
    await l.close();
    db.close();
  });
});
