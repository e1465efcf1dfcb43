import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { DispatchOnceError, ROW_FORMAT_VERSION, type ClaimRequest, type LedgerEffect } from "@dispatch-once/core";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidLedgerInputError, PostgresLedger, schemaSql } from "../src/index.js";
import {
  DATABASE_URL,
  adminPool,
  closedPort,
  closedUrl,
  dropSchema,
  expireLease,
  expireRetention,
  freshLedger,
  readStoredRow,
  serverNow,
  storedColumns,
  table,
  tableShape,
  uniqueSchema,
} from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));

let admin: pg.Pool;
const schemas: string[] = [];

beforeAll(() => {
  admin = adminPool(8);
});

afterAll(async () => {
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.end();
});

async function fresh(tag: string, options: { retentionMs?: number; maxResultBytes?: number; table?: string } = {}) {
  const made = await freshLedger(admin, tag, options);
  schemas.push(made.schema);
  return made;
}

/** The request text claims carry unless a test says otherwise. */
const REQUEST = '{"amount":1250,"to":"acct_1"}';

function request(key: string, owner: string, effect: LedgerEffect = "keyed_write", leaseMs = 60_000, text = REQUEST): ClaimRequest {
  return { key, toolName: "send_payment", effect, owner, leaseMs, request: text };
}

async function claimed(ledger: PostgresLedger, key: string, owner = "owner-a", effect: LedgerEffect = "keyed_write", text = REQUEST) {
  const result = await ledger.claim(request(key, owner, effect, 60_000, text));
  if (result.outcome !== "claimed") throw new Error(`expected a claim of ${key}, got ${JSON.stringify(result)}`);
  return result;
}

/** Every column plus the tuple's xmin/xmax: equal before and after means nothing was written or locked. */
async function tuple(schema: string, key: string, name?: string) {
  const { rows } = await admin.query(`SELECT xmin::text, xmax::text, * FROM ${table(schema, name)} WHERE key = $1`, [key]);
  return rows[0];
}

async function rejection(promise: Promise<unknown>): Promise<Error & { code?: string; field?: string; cause?: unknown }> {
  try {
    await promise;
  } catch (error) {
    return error as Error & { code?: string };
  }
  throw new Error("expected a rejection");
}

describe("schema and migrate()", () => {
  it("schema.sql shipped in the package is exactly what migrate() runs for the default names", () => {
    expect(readFileSync(join(here, "..", "schema.sql"), "utf8")).toBe(schemaSql());
  });

  it("the README prints schema.sql verbatim", () => {
    expect(readFileSync(join(here, "..", "README.md"), "utf8")).toContain(schemaSql());
  });

  it("creates the table, its index and the claim function in the configured schema; concurrent and repeated runs are safe", async () => {
    const schema = uniqueSchema("migrate");
    schemas.push(schema);
    const ledgers = Array.from({ length: 4 }, () => new PostgresLedger({ pool: admin, schema, table: "Tool_Calls" }));
    await Promise.all(ledgers.map((l) => l.migrate()));
    await ledgers[0]!.migrate();
    const { rows } = await admin.query(
      `SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 ORDER BY 1`,
      [schema],
    );
    expect(rows).toEqual([
      { relname: "Tool_Calls", relkind: "r" },
      { relname: "Tool_Calls_audit", relkind: "r" },
      { relname: "Tool_Calls_audit_id_seq", relkind: "S" },
      { relname: "Tool_Calls_audit_key", relkind: "i" },
      { relname: "Tool_Calls_audit_pkey", relkind: "i" },
      { relname: "Tool_Calls_claimed_at", relkind: "i" },
      { relname: "Tool_Calls_in_flight", relkind: "i" },
      { relname: "Tool_Calls_lst_conv", relkind: "i" },
      { relname: "Tool_Calls_lst_state", relkind: "i" },
      { relname: "Tool_Calls_lst_tool", relkind: "i" },
      { relname: "Tool_Calls_pkey", relkind: "i" },
      { relname: "Tool_Calls_retired", relkind: "r" },
      { relname: "Tool_Calls_retired_pkey", relkind: "i" },
      { relname: "Tool_Calls_rt_until", relkind: "i" },
    ]);
    const fn = await admin.query(
      `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`,
      [schema],
    );
    // The claim with a conversation (LIST-3), and the previous versions' eight- and seven-argument claims, kept as wrappers;
    // retire and its lookup of retired claim ids (LEDGER-28).
    expect(fn.rows).toEqual([
      { proname: "Tool_Calls_claim" },
      { proname: "Tool_Calls_claim" },
      { proname: "Tool_Calls_claim" },
      { proname: "Tool_Calls_is_retired" },
      { proname: "Tool_Calls_retire" },
    ]);
    // Results are text, never jsonb: jsonb would re-serialise and replays would differ.
    const types = await admin.query(
      `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND column_name IN ('result', 'error')`,
      [schema],
    );
    expect(types.rows.map((r) => r.data_type)).toEqual(["text", "text"]);
  });

  it("rejects unsafe or invalid schema and table names with a typed error, before any SQL", () => {
    for (const [field, value] of [
      ["table", 'calls"; DROP TABLE x; --'],
      ["table", "1calls"],
      ["table", ""],
      ["table", "calls-2"],
      ["table", "x".repeat(53)],
      ["schema", "public.evil"],
      ["schema", "s".repeat(64)],
    ] as const) {
      const make = () => new PostgresLedger({ pool: admin, [field]: value });
      expect(make).toThrow(InvalidLedgerInputError);
      try {
        make();
      } catch (error) {
        expect(error).toMatchObject({ code: "invalid_ledger_input", field });
        expect(error).toBeInstanceOf(DispatchOnceError);
      }
    }
  });

  it("rejects bad options with a typed error: no connection, two connections, bad limits", () => {
    const cases: [Record<string, unknown>, string][] = [
      [{}, "pool"],
      [{ pool: admin, connectionString: DATABASE_URL }, "pool"],
      [{ pool: {} }, "pool"],
      [{ pool: admin, retentionMs: 0 }, "retentionMs"],
      [{ pool: admin, retentionMs: 1.5 }, "retentionMs"],
      [{ pool: admin, maxResultBytes: -1 }, "maxResultBytes"],
      [{ pool: admin, durability: "sometimes" }, "durability"],
    ];
    for (const [options, field] of cases) {
      expect(() => new PostgresLedger(options as never)).toThrow(expect.objectContaining({ code: "invalid_ledger_input", field }));
    }
  });

  it("a ledger whose table was never migrated raises ledger_unavailable and says so", async () => {
    const ledger = new PostgresLedger({ pool: admin, schema: uniqueSchema("nomigrate") });
    const error = await rejection(ledger.claim(request("k", "o")));
    expect(error.code).toBe("ledger_unavailable");
    expect(error.message).toMatch(/migrate\(\)|does not exist/);
  });
});

describe("hash-partitioned table (migrate({ hashPartitions }))", () => {
  it("keeps one winner per key across partitions, takes over, sweeps, and spreads keys over the partitions", async () => {
    const schema = uniqueSchema("hashpart");
    schemas.push(schema);
    const ledger = new PostgresLedger({ pool: admin, schema });
    await ledger.migrate({ hashPartitions: 4 });
    await ledger.migrate(); // an existing table is left as it is
    const parts = await admin.query(
      `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass ORDER BY 1`,
      [table(schema)],
    );
    expect(parts.rows.map((r) => r.relname)).toEqual([0, 1, 2, 3].map((i) => `dispatch_once_ledger_p${i}`));

    const results = await Promise.all(Array.from({ length: 16 }, (_, i) => ledger.claim(request("hp", `racer-${i}`))));
    expect(results.filter((r) => r.outcome === "claimed")).toHaveLength(1);
    await expireLease(admin, schema, "hp");
    expect(await claimed(ledger, "hp", "owner-b")).toMatchObject({ fence: 2, takeover: true });

    for (let i = 0; i < 100; i++) {
      const c = await claimed(ledger, `hp-${i}`);
      await ledger.complete(`hp-${i}`, c.fence, '"ok"');
    }
    const spread = await admin.query(`SELECT tableoid::regclass::text AS part, count(*) AS n FROM ${table(schema)} GROUP BY 1`);
    expect(spread.rows).toHaveLength(4);
    for (let i = 0; i < 100; i += 2) await expireRetention(admin, schema, `hp-${i}`);
    expect(await ledger.sweep()).toBe(50);
    expect((await admin.query(`SELECT count(*) AS n FROM ${table(schema)}`)).rows[0].n).toBe("51");
  });

  it("rejects a partition count outside 2..64 with a typed error", () => {
    for (const n of [1, 65, 2.5]) {
      expect(() => schemaSql({ hashPartitions: n })).toThrow(expect.objectContaining({ code: "invalid_ledger_input", field: "hashPartitions" }));
    }
  });
});

describe("claims, fences and leases, read from the table", () => {
  let ledger: PostgresLedger;
  let schema: string;
  beforeAll(async () => {
    ({ ledger, schema } = await fresh("claim", { retentionMs: 3_600_000 }));
  });

  it("a claim inserts one in_flight row, fence 1, with the lease measured on the server clock and its request (LEDGER-21)", async () => {
    const before = await serverNow(admin);
    const result = await ledger.claim(request("c1", "owner-a", "keyed_write", 45_000));
    const after = await serverNow(admin);
    expect(result).toMatchObject({ outcome: "claimed", fence: 1, takeover: false, request: REQUEST });
    const c = await storedColumns(admin, schema, "c1");
    expect(c).toMatchObject({
      request: REQUEST,
      v: ROW_FORMAT_VERSION,
      state: "in_flight",
      fence: "1",
      takeover: false,
      owner: "owner-a",
      tool_name: "send_payment",
      effect: "keyed_write",
      finished_at: null,
      expires_at: null,
      result: null,
    });
    const claimedAt = Number(c!.claimed_at);
    expect(claimedAt).toBeGreaterThanOrEqual(before);
    expect(claimedAt).toBeLessThanOrEqual(after);
    expect(Number(c!.lease_expires_at)).toBe(claimedAt + 45_000);
    expect(result.outcome === "claimed" && result.leaseExpiresAt).toBe(claimedAt + 45_000);
  });

  it("a claim that finds a live row returns it and writes nothing (no new tuple version, no row lock)", async () => {
    const before = await tuple(schema, "c1");
    const result = await ledger.claim(request("c1", "owner-b"));
    expect(result).toEqual({ outcome: "existing", row: await readStoredRow(admin, schema, "c1") });
    const after = await tuple(schema, "c1");
    expect(after).toEqual(before);
    expect(after.xmax).toBe("0");
  });

  it("renew moves the lease on the server clock; complete stores the result and ends the lease", async () => {
    const { fence } = await claimed(ledger, "c2");
    const before = await serverNow(admin);
    const { leaseExpiresAt } = await ledger.renew("c2", fence, 90_000);
    expect(leaseExpiresAt).toBeGreaterThanOrEqual(before + 90_000);
    expect(Number((await storedColumns(admin, schema, "c2"))!.lease_expires_at)).toBe(leaseExpiresAt);
    await ledger.complete("c2", fence, '{"ok":true}');
    const c = await storedColumns(admin, schema, "c2");
    expect(c).toMatchObject({ state: "completed", result: '{"ok":true}', lease_expires_at: null, fence: "1" });
    expect(Number(c!.expires_at) - Number(c!.finished_at)).toBe(3_600_000);
  });

  it("release keeps the fence and request; the next claim continues the fence (2, not a takeover) and returns the first request", async () => {
    const first = await claimed(ledger, "c3");
    await ledger.release("c3", first.fence);
    expect(await storedColumns(admin, schema, "c3")).toMatchObject({ state: "released", fence: "1", request: REQUEST });
    const second = await claimed(ledger, "c3", "owner-b", "keyed_write", '{"amount":1}');
    expect(second).toMatchObject({ fence: 2, takeover: false, request: REQUEST });
    expect(await storedColumns(admin, schema, "c3")).toMatchObject({
      state: "in_flight",
      fence: "2",
      owner: "owner-b",
      takeover: false,
      finished_at: null,
      request: REQUEST,
    });
  });

  it("an expired keyed_write claim is taken over: fence + 1, takeover recorded in the row, the first request kept and returned", async () => {
    await claimed(ledger, "c4", "owner-a", "keyed_write");
    await expireLease(admin, schema, "c4");
    const takeover = await claimed(ledger, "c4", "owner-b", "keyed_write", '{"amount":1250, "to":"acct_1"}');
    expect(takeover).toMatchObject({ fence: 2, takeover: true, request: REQUEST });
    expect(await storedColumns(admin, schema, "c4")).toMatchObject({
      state: "in_flight",
      fence: "2",
      owner: "owner-b",
      takeover: true,
      request: REQUEST,
    });
  });

  it("an expired unkeyed_write claim becomes unknown (lease_expired) in the row, keeps its request, and is returned, never re-claimed", async () => {
    await claimed(ledger, "c5", "owner-a", "unkeyed_write");
    await expireLease(admin, schema, "c5");
    const result = await ledger.claim(request("c5", "owner-b", "unkeyed_write", 60_000, '{"other":true}'));
    expect(result.outcome).toBe("existing");
    expect(result.outcome === "existing" && result.row.request).toBe(REQUEST);
    const c = await storedColumns(admin, schema, "c5");
    expect(c).toMatchObject({ state: "unknown", reason: "lease_expired", fence: "1", owner: "owner-a", lease_expires_at: null, request: REQUEST });
    expect(Number(c!.expires_at) - Number(c!.finished_at)).toBe(3_600_000);
    expect(result).toEqual({ outcome: "existing", row: await readStoredRow(admin, schema, "c5") });
    // And it stays unknown: a later claim does not run it either.
    expect(await ledger.claim(request("c5", "owner-c", "unkeyed_write"))).toMatchObject({ outcome: "existing", row: { state: "unknown" } });
  });

  it("a stale owner is refused with stale_claim by every transition, and the row is not touched", async () => {
    const old = await claimed(ledger, "c6");
    await expireLease(admin, schema, "c6");
    await claimed(ledger, "c6", "owner-b");
    const before = await tuple(schema, "c6");
    const attempts: [string, () => Promise<unknown>][] = [
      ["renew", () => ledger.renew("c6", old.fence, 1000)],
      ["complete", () => ledger.complete("c6", old.fence, '"late"')],
      ["fail", () => ledger.fail("c6", old.fence, { name: "Error", message: "late" })],
      ["markUnknown", () => ledger.markUnknown("c6", old.fence, "late")],
      ["release", () => ledger.release("c6", old.fence)],
      ["complete with fence 0", () => ledger.complete("c6", 0, '"x"')],
      ["complete with fence 2.5", () => ledger.complete("c6", 2.5, '"x"')],
    ];
    for (const [what, attempt] of attempts) {
      expect((await rejection(attempt())).code, what).toBe("stale_claim");
    }
    expect(await tuple(schema, "c6")).toEqual(before);
  });

  it("fail stores the StoredError as JSON text and it replays identically", async () => {
    const { fence } = await claimed(ledger, "c7");
    const error = { name: "CardDeclined", message: "card declined: insufficient funds", code: "card_declined", details: { attempt: 1, tags: ["a", "ü"] } };
    await ledger.fail("c7", fence, error);
    const c = await storedColumns(admin, schema, "c7");
    expect(c).toMatchObject({ state: "failed", error: JSON.stringify(error) });
    expect(await ledger.claim(request("c7", "owner-b"))).toMatchObject({ outcome: "existing", row: { state: "failed", error } });
  });

  it("bad claim input is refused with a typed error and nothing is written", async () => {
    for (const [field, bad] of [
      ["key", { key: "" }],
      ["key", { key: "nul\u0000key" }],
      ["key", { key: "k".repeat(513) }],
      ["owner", { owner: "\ud800" }],
      ["effect", { effect: "read" }],
      ["leaseMs", { leaseMs: -1 }],
      ["leaseMs", { leaseMs: Number.NaN }],
      // Stored and returned byte for byte (LEDGER-21): only text a PostgreSQL text column holds exactly.
      ["request", { request: undefined }],
      ["request", { request: 42 }],
      ["request", { request: { amount: 1 } }],
      ["request", { request: '{"s":"\ud800"}' }],
      ["request", { request: '{"s":"a\u0000b"}' }],
    ] as const) {
      const error = await rejection(ledger.claim({ ...request("bad-input", "o"), ...bad } as ClaimRequest));
      expect(error).toMatchObject({ code: "invalid_ledger_input", field });
    }
    expect(await storedColumns(admin, schema, "bad-input")).toBeUndefined();
  });

  it("32 concurrent claims of an expired claim: one takeover for keyed_write, none and one unknown row for unkeyed_write", async () => {
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      const key = `expired-race-${effect}`;
      await claimed(ledger, key, "owner-a", effect);
      await expireLease(admin, schema, key);
      const results = await Promise.all(Array.from({ length: 32 }, (_, i) => ledger.claim(request(key, `racer-${i}`, effect))));
      const winners = results.filter((r) => r.outcome === "claimed");
      const stored = await storedColumns(admin, schema, key);
      if (effect === "keyed_write") {
        expect(winners).toEqual([expect.objectContaining({ fence: 2, takeover: true })]);
        expect(stored).toMatchObject({ state: "in_flight", fence: "2", takeover: true });
      } else {
        expect(winners).toEqual([]);
        expect(stored).toMatchObject({ state: "unknown", fence: "1", reason: "lease_expired" });
      }
    }
  });

  it("32 concurrent claims of a new key over one pool: one winner, and the row's only writer is the winner", async () => {
    const results = await Promise.all(Array.from({ length: 32 }, (_, i) => ledger.claim(request("contended", `racer-${i}`))));
    const winners = results.filter((r) => r.outcome === "claimed");
    expect(winners).toHaveLength(1);
    const row = await tuple(schema, "contended");
    expect(row).toMatchObject({ fence: "1", state: "in_flight", xmax: "0" });
    for (const r of results) if (r.outcome === "existing") expect(r.row).toMatchObject({ state: "in_flight", fence: 1, owner: row.owner });
  });
});

describe("results byte for byte", () => {
  let ledger: PostgresLedger;
  let schema: string;
  beforeAll(async () => {
    ({ ledger, schema } = await fresh("bytes", { maxResultBytes: 64 * 1024 }));
  });

  const results: [string, string][] = [
    ["unicode and astral", '{"name":"Zoë 名前 😀🇺🇳","note":"𝔘𝔫𝔦𝔠𝔬𝔡𝔢"}'],
    ["whitespace that JSON.stringify would drop", '{ "a" : [ 1 ,\n\t2 ] ,  "b":{}\r\n}'],
    ["escapes kept as written", '{"s":"\\u00e9\\n\\"\\\\\\/","lone":"\\ud800"}'],
    ["number forms jsonb would rewrite", '{"n":1.0,"e":1E+2,"z":-0,"big":12345678901234567890}'],
    ["duplicate members jsonb would merge", '{"a":1,"a":2}'],
    ["a bare scalar", '"just a string"'],
  ];
  for (const [name, text] of results) {
    it(`${name}: stored in the text column and replayed with the same bytes`, async () => {
      const key = `bytes-${name}`;
      const { fence } = await claimed(ledger, key);
      await ledger.complete(key, fence, text);
      const { rows } = await admin.query(`SELECT result, octet_length(result) AS bytes FROM ${table(schema)} WHERE key = $1`, [key]);
      expect(rows[0].result).toBe(text);
      expect(rows[0].bytes).toBe(Buffer.byteLength(text, "utf8"));
      const replay = await ledger.claim(request(key, "owner-b"));
      expect(replay.outcome === "existing" && replay.row.state === "completed" && replay.row.result).toBe(text);
      const looked = await ledger.lookup(key);
      expect(looked?.state === "completed" && looked.result).toBe(text);
    });
  }

  it("a result exactly at the limit is stored; one byte over is refused with result_not_storable and the claim is held", async () => {
    const limit = 64 * 1024;
    const atLimit = `"${"é".repeat((limit - 2) / 2)}"`;
    expect(Buffer.byteLength(atLimit)).toBe(limit);
    const a = await claimed(ledger, "limit-ok");
    await ledger.complete("limit-ok", a.fence, atLimit);
    expect((await storedColumns(admin, schema, "limit-ok"))!.result).toBe(atLimit);

    const over = `"${"é".repeat((limit - 2) / 2)}x"`;
    const b = await claimed(ledger, "limit-over");
    const before = await tuple(schema, "limit-over");
    expect((await rejection(ledger.complete("limit-over", b.fence, over))).code).toBe("result_not_storable");
    expect(await tuple(schema, "limit-over")).toEqual(before);
    // The claim is still held by its owner, who can record the failure.
    await ledger.fail("limit-over", b.fence, { name: "ResultNotStorableError", message: "too big", code: "result_not_storable" });
  });

  it("text PostgreSQL cannot hold exactly (raw NUL, lone surrogate) is refused with result_not_storable, row unchanged", async () => {
    const { fence } = await claimed(ledger, "unholdable");
    const before = await tuple(schema, "unholdable");
    for (const text of ['"a\u0000b"', '"\ud83d"']) {
      expect((await rejection(ledger.complete("unholdable", fence, text))).code).toBe("result_not_storable");
    }
    expect(await tuple(schema, "unholdable")).toEqual(before);
  });

  it("an oversized result from a stale owner hears stale_claim first, like the reference ledger", async () => {
    expect((await rejection(ledger.complete("never-claimed", 1, "x".repeat(70_000)))).code).toBe("stale_claim");
  });
});

describe("corrupt rows", () => {
  let ledger: PostgresLedger;
  let schema: string;
  beforeAll(async () => {
    ({ ledger, schema } = await fresh("corrupt"));
  });

  const corruptions: [string, string][] = [
    ["an unknown format version", "v = 2"],
    ["an unknown state", "state = 'exploded'"],
    ["an unknown effect", "effect = 'maybe_write'"],
    ["a failed row whose error is not JSON", "state = 'failed', error = '{not json', finished_at = claimed_at, expires_at = claimed_at + 86400000"],
    ["a completed row without its result", "state = 'completed', finished_at = claimed_at, expires_at = claimed_at + 86400000"],
    // A row of the version before the request column (LEDGER-21): doubt never becomes absence.
    ["an in-flight row without a request", "request = NULL"],
    ["a released row without a request", "state = 'released', request = NULL, finished_at = claimed_at, expires_at = claimed_at + 86400000"],
    ["a row past retention without a request", "state = 'completed', result = '1', request = NULL, finished_at = 0, expires_at = 1"],
  ];
  for (const [name, set] of corruptions) {
    it(`${name}: claim and lookup raise ledger_corrupt, the row is left as it is and never treated as absent`, async () => {
      const key = `corrupt-${name}`;
      await claimed(ledger, key, "owner-a", "unkeyed_write");
      // Also expire the lease: even a claimable-looking corrupt row must not be taken over.
      await admin.query(`UPDATE ${table(schema)} SET ${set}, lease_expires_at = 0 WHERE key = $1`, [key]);
      const before = await tuple(schema, key);
      expect((await rejection(ledger.claim(request(key, "owner-b", "unkeyed_write")))).code).toBe("ledger_corrupt");
      expect((await rejection(ledger.lookup(key))).code).toBe("ledger_corrupt");
      expect(await tuple(schema, key)).toEqual(before);
    });
  }
});

describe("retention and sweep", () => {
  let ledger: PostgresLedger;
  let schema: string;
  beforeAll(async () => {
    ({ ledger, schema } = await fresh("sweep", { retentionMs: 86_400_000 }));
  });

  it("a row past retention reads as absent and is claimable again with the fence continued; sweep deletes only expired finished rows", async () => {
    const done = await claimed(ledger, "r-done");
    await ledger.complete("r-done", done.fence, '"ok"');
    const kept = await claimed(ledger, "r-kept");
    await ledger.complete("r-kept", kept.fence, '"ok"');
    const released = await claimed(ledger, "r-released");
    await ledger.release("r-released", released.fence);
    await claimed(ledger, "r-inflight");
    // An in-flight row as old as it gets, lease long expired: retention never removes it.
    await admin.query(`UPDATE ${table(schema)} SET claimed_at = 0, lease_expires_at = 1 WHERE key = 'r-inflight'`);
    const again = await claimed(ledger, "r-again");
    await ledger.complete("r-again", again.fence, '"ok"');

    for (const key of ["r-done", "r-released", "r-again"]) await expireRetention(admin, schema, key);
    expect(await ledger.lookup("r-done")).toBeUndefined();
    // Forgotten, so this claim creates the row anew and stores its own request (LEDGER-21).
    expect(await claimed(ledger, "r-again", "owner-b", "keyed_write", '{"second":"call"}')).toMatchObject({
      fence: 2,
      takeover: false,
      request: '{"second":"call"}',
    });
    expect(await storedColumns(admin, schema, "r-again")).toMatchObject({ state: "in_flight", request: '{"second":"call"}' });

    expect(await ledger.sweep()).toBe(2);
    expect(await storedColumns(admin, schema, "r-done")).toBeUndefined();
    expect(await storedColumns(admin, schema, "r-released")).toBeUndefined();
    expect(await storedColumns(admin, schema, "r-kept")).toMatchObject({ state: "completed" });
    expect(await storedColumns(admin, schema, "r-inflight")).toMatchObject({ state: "in_flight" });
    expect(await storedColumns(admin, schema, "r-again")).toMatchObject({ state: "in_flight", fence: "2" });
    expect(await ledger.sweep()).toBe(0);
    // Physically deleted: the next claim starts again at fence 1 (no owner of the old row can be live).
    expect(await claimed(ledger, "r-done", "owner-c")).toMatchObject({ fence: 1 });
  });

  it("sweeps a backlog larger than one batch, in batches, and returns the total", async () => {
    const n = 12_345;
    await admin.query(
      `INSERT INTO ${table(schema)} (key, v, state, tool_name, effect, fence, owner, claimed_at, finished_at, expires_at, result, request)
       SELECT 'bulk-' || i, 1, 'completed', 'send_payment', 'keyed_write', 1, 'o', 1000 + i, 2000 + i, 3000 + i, '"ok"', '{}'
         FROM generate_series(1, $1::int) AS i`,
      [n],
    );
    expect(await ledger.sweep()).toBe(n);
    const { rows } = await admin.query(`SELECT count(*) AS n FROM ${table(schema)} WHERE key LIKE 'bulk-%'`);
    expect(rows[0].n).toBe("0");
  });
});

describe("connections: bring your own pool, restarts and failures", () => {
  it("close() never ends a pool it did not create; a restart (new instance, own pool) sees the rows", async () => {
    const { ledger, schema } = await fresh("restart");
    const { fence } = await claimed(ledger, "restart-1");
    await ledger.complete("restart-1", fence, '{"kept":"yes ✓"}');
    await ledger.close();
    expect((await admin.query("SELECT 1 AS one")).rows).toEqual([{ one: 1 }]);
    expect((await rejection(ledger.lookup("restart-1"))).code).toBe("ledger_unavailable");

    const reopened = new PostgresLedger({ connectionString: DATABASE_URL, schema });
    expect(await reopened.claim(request("restart-1", "owner-b"))).toMatchObject({
      outcome: "existing",
      row: { state: "completed", result: '{"kept":"yes ✓"}' },
    });
    await reopened.close();
  });

  it("two ledgers with different tables share one pool without their prepared statements colliding", async () => {
    const schema = uniqueSchema("two");
    schemas.push(schema);
    const a = new PostgresLedger({ pool: admin, schema, table: "calls_a" });
    const b = new PostgresLedger({ pool: admin, schema, table: "calls_b" });
    await a.migrate();
    await b.migrate();
    for (let i = 0; i < 5; i++) {
      expect(await a.claim(request(`same-${i}`, "a"))).toMatchObject({ outcome: "claimed", fence: 1 });
      expect(await b.claim(request(`same-${i}`, "b"))).toMatchObject({ outcome: "claimed", fence: 1 });
    }
    expect((await storedColumns(admin, schema, "same-0", "calls_a"))!.owner).toBe("a");
    expect((await storedColumns(admin, schema, "same-0", "calls_b"))!.owner).toBe("b");
  });

  it("a refused connection raises ledger_unavailable with the driver's error as cause, for every operation", async () => {
    const ledger = new PostgresLedger({ connectionString: closedUrl(await closedPort()), schema: "do_test_unreachable" });
    const ops: [string, () => Promise<unknown>][] = [
      ["migrate", () => ledger.migrate()],
      ["claim", () => ledger.claim(request("k", "o"))],
      ["renew", () => ledger.renew("k", 1, 1000)],
      ["complete", () => ledger.complete("k", 1, '"x"')],
      ["fail", () => ledger.fail("k", 1, { name: "E", message: "m" })],
      ["markUnknown", () => ledger.markUnknown("k", 1, "why")],
      ["release", () => ledger.release("k", 1)],
      ["lookup", () => ledger.lookup("k")],
      ["sweep", () => ledger.sweep()],
    ];
    for (const [name, op] of ops) {
      const error = await rejection(op());
      expect(error.code, name).toBe("ledger_unavailable");
      expect((error.cause as { code?: string }).code, name).toBe("ECONNREFUSED");
    }
    await ledger.close();
  });

  it("probeDurability reads the session's settings: durable by default, not when the pool's sessions commit asynchronously", async () => {
    const { ledger } = await fresh("probe");
    expect(await ledger.probeDurability()).toMatchObject({ durable: true, reasons: [], settings: { fsync: "on", synchronousCommit: "on" } });
    const asyncPool = new pg.Pool({ connectionString: DATABASE_URL, max: 1, options: "-c synchronous_commit=off" });
    const asyncLedger = new PostgresLedger({ pool: asyncPool });
    const probe = await asyncLedger.probeDurability();
    expect(probe.durable).toBe(false);
    expect(probe.reasons).toEqual([expect.stringContaining("synchronous_commit is off")]);
    await asyncPool.end();
  });

  it("a connection the server terminates (57P01) raises ledger_unavailable, and the claim it carried did not happen", async () => {
    const { schema } = await fresh("terminated");
    const client = new pg.Client({ connectionString: DATABASE_URL });
    client.on("error", () => {});
    await client.connect();
    const ledger = new PostgresLedger({ pool: client, schema });
    expect(await ledger.claim(request("before", "o"))).toMatchObject({ outcome: "claimed" });
    const { rows } = await client.query("SELECT pg_backend_pid() AS pid");
    await admin.query("SELECT pg_terminate_backend($1)", [rows[0].pid]);
    const error = await rejection(ledger.claim(request("after-terminate", "o")));
    expect(error.code).toBe("ledger_unavailable");
    expect(await storedColumns(admin, schema, "after-terminate")).toBeUndefined();
    await client.end().catch(() => {});
  });
});

describe("the stored request (LEDGER-21)", () => {
  let ledger: PostgresLedger;
  let schema: string;
  beforeAll(async () => {
    ({ ledger, schema } = await fresh("request"));
  });

  // The claimed answer separates its fields with spaces: requests full of spaces and digits,
  // or shaped like an answer, must come back whole.
  const texts: [string, string][] = [
    ["unicode and astral", '{"name":"Zoë 名前 😀🇺🇳","note":"𝔘𝔫𝔦𝔠𝔬𝔡𝔢"}'],
    ["whitespace and key order jsonb would rewrite", '{ "to" : "acct_1" ,\n\t"amount" : 1.0 }  '],
    ["spaces, digits and an answer's shape", " c2 1700000000000 1 e{} 0 "],
    ["escapes kept as written", '{"s":"\\u00e9\\n\\"\\\\\\/","lone":"\\ud800"}'],
    ["empty text", ""],
  ];
  for (const [name, text] of texts) {
    it(`${name}: stored byte for byte, and returned identically by the first claim, a re-claim, a takeover, an existing row and lookup`, async () => {
      const key = `req-${name}`;
      const first = await claimed(ledger, key, "owner-a", "keyed_write", text);
      expect(first.request).toBe(text);
      const { rows } = await admin.query(`SELECT request, octet_length(request) AS bytes FROM ${table(schema)} WHERE key = $1`, [key]);
      expect(rows[0]).toEqual({ request: text, bytes: Buffer.byteLength(text, "utf8") });
      // A live row: every waiter sees the first request in the existing row (the row as JSON).
      const waiting = await ledger.claim(request(key, "owner-b", "keyed_write", 60_000, "{}"));
      expect(waiting.outcome === "existing" && waiting.row.request).toBe(text);
      // Released and re-claimed, then taken over: the answer carries the stored request.
      await ledger.release(key, first.fence);
      expect((await claimed(ledger, key, "owner-b", "keyed_write", "[]")).request).toBe(text);
      await expireLease(admin, schema, key);
      const taken = await claimed(ledger, key, "owner-c", "keyed_write", "[1]");
      expect(taken).toMatchObject({ fence: 3, takeover: true, request: text });
      await ledger.complete(key, taken.fence, '"ok"');
      expect((await ledger.lookup(key))?.request).toBe(text);
      expect((await storedColumns(admin, schema, key))!.request).toBe(text);
    });
  }

  it("every terminal transition keeps the request, and lookup returns it", async () => {
    const finish: [string, (key: string, fence: number) => Promise<void>][] = [
      ["completed", (k, f) => ledger.complete(k, f, "1")],
      ["failed", (k, f) => ledger.fail(k, f, { name: "E", message: "m" })],
      ["unknown", (k, f) => ledger.markUnknown(k, f, "tool_error")],
      ["released", (k, f) => ledger.release(k, f)],
    ];
    for (const [state, done] of finish) {
      const key = `terminal-${state}`;
      const { fence } = await claimed(ledger, key, "owner-a", "unkeyed_write", `{"first":"${state}"}`);
      await done(key, fence);
      expect(await storedColumns(admin, schema, key), state).toMatchObject({ state, request: `{"first":"${state}"}` });
      expect(await ledger.lookup(key), state).toEqual(await readStoredRow(admin, schema, key));
      expect((await ledger.lookup(key))?.request, state).toBe(`{"first":"${state}"}`);
    }
  });
});

describe("LEDGER-21 with retention: a row past retention is forgotten and lends nothing", () => {
  for (const state of ["released", "completed", "failed", "unknown"] as const) {
    it(`a ${state} row past retention (not yet swept): the next claim stores and returns its own request, fence continued`, async () => {
      const { ledger, schema } = await fresh(`forgot_${state}`);
      const key = `forgotten-${state}`;
      const { fence } = await claimed(ledger, key, "owner-a", "keyed_write", '{"who":"old"}');
      if (state === "released") await ledger.release(key, fence);
      if (state === "completed") await ledger.complete(key, fence, '"done"');
      if (state === "failed") await ledger.fail(key, fence, { name: "E", message: "m" });
      if (state === "unknown") await ledger.markUnknown(key, fence, "tool_error");
      await expireRetention(admin, schema, key);
      const next = await ledger.claim(request(key, "owner-b", "keyed_write", 60_000, '{"who":"new"}'));
      expect(next).toMatchObject({ outcome: "claimed", fence: fence + 1, takeover: false, request: '{"who":"new"}' });
      expect(await storedColumns(admin, schema, key)).toMatchObject({ state: "in_flight", request: '{"who":"new"}', owner: "owner-b" });
    });
  }

  it("a released row within retention still lends its request (a re-claim re-runs the first request)", async () => {
    const { ledger } = await fresh("forgot_within");
    const { fence } = await claimed(ledger, "kept", "owner-a", "keyed_write", '{"who":"old"}');
    await ledger.release("kept", fence);
    expect(await ledger.claim(request("kept", "owner-b", "keyed_write", 60_000, '{"who":"new"}'))).toMatchObject({
      outcome: "claimed",
      request: '{"who":"old"}',
    });
  });
});

describe("schema migration from 0.1.0 (the request column)", () => {
  it("migrate() adds the column to a 0.1.0 table, replaces the old claim function, and old rows read as ledger_corrupt", async () => {
    const schema = uniqueSchema("upgrade");
    schemas.push(schema);
    // The schema.sql 0.1.0 shipped, for this schema, with one row it wrote.
    const old = readFileSync(join(here, "fixtures", "schema-0.1.0.sql"), "utf8").replaceAll('"public"', `"${schema}"`);
    expect(old).not.toContain("request");
    await admin.query(old);
    await admin.query(`SELECT "${schema}".dispatch_once_ledger_claim('legacy', 'send_payment', 'unkeyed_write', 'o', 60000, 86400000)`);

    const ledger = new PostgresLedger({ pool: admin, schema });
    await ledger.migrate();
    await ledger.migrate(); // idempotent
    const columns = await admin.query(
      `SELECT column_name, data_type, is_nullable FROM information_schema.columns WHERE table_schema = $1 AND column_name = 'request'`,
      [schema],
    );
    expect(columns.rows).toEqual([{ column_name: "request", data_type: "text", is_nullable: "YES" }]);
    const fns = await admin.query(
      `SELECT p.oid::regprocedure::text AS signature FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1`,
      [schema],
    );
    expect(fns.rows.map((r) => r.signature).sort()).toEqual([
      `${schema}.dispatch_once_ledger_claim(text,text,text,text,bigint,bigint,text)`,
      `${schema}.dispatch_once_ledger_claim(text,text,text,text,bigint,bigint,text,text)`,
      `${schema}.dispatch_once_ledger_claim(text,text,text,text,bigint,bigint,text,text,text,bigint)`,
      `${schema}.dispatch_once_ledger_is_retired(text,text,bigint)`,
      `${schema}.dispatch_once_ledger_retire(text,text,boolean,bigint)`,
    ]);
    // The old row has no request: its re-run could not send the first request, so it is never absent,
    // and an expired one is not turned unknown or taken over either: it is left for a person.
    await expireLease(admin, schema, "legacy");
    const before = await tuple(schema, "legacy");
    expect((await rejection(ledger.lookup("legacy"))).code).toBe("ledger_corrupt");
    expect((await rejection(ledger.claim(request("legacy", "owner-b", "unkeyed_write")))).code).toBe("ledger_corrupt");
    expect(await tuple(schema, "legacy")).toEqual(before);
    // New claims store their request; the table and the fresh DDL agree column for column.
    expect(await claimed(ledger, "fresh")).toMatchObject({ fence: 1, request: REQUEST });
    const fresh = uniqueSchema("upgrade_fresh");
    schemas.push(fresh);
    await new PostgresLedger({ pool: admin, schema: fresh }).migrate();
    expect(await tableShape(admin, schema)).toEqual(await tableShape(admin, fresh));
  });

  it("migrate() on a table that has the column takes no ACCESS EXCLUSIVE lock (claims never queue behind a no-op ALTER)", async () => {
    const { schema } = await fresh("upgrade_lock");
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      const pid = (await client.query("SELECT pg_backend_pid() AS pid")).rows[0].pid;
      await client.query("BEGIN");
      await new PostgresLedger({ pool: client, schema }).migrate(); // held until ROLLBACK: observable
      const { rows } = await admin.query(
        `SELECT mode FROM pg_locks WHERE pid = $1 AND relation = $2::regclass AND mode = 'AccessExclusiveLock'`,
        [pid, table(schema)],
      );
      expect(rows).toEqual([]);
      await client.query("ROLLBACK");
    } finally {
      await client.end();
    }
  });

  it("migrate() adds the column to every partition of a hash-partitioned 0.1.0 table", async () => {
    const schema = uniqueSchema("upgrade_part");
    schemas.push(schema);
    const old = readFileSync(join(here, "fixtures", "schema-0.1.0.sql"), "utf8")
      .replaceAll('"public"', `"${schema}"`)
      .replace(/\n\);\n/, "\n) PARTITION BY HASH (key);\n");
    await admin.query(old);
    for (let i = 0; i < 2; i++) {
      await admin.query(
        `CREATE TABLE "${schema}"."dispatch_once_ledger_p${i}" PARTITION OF "${schema}"."dispatch_once_ledger" FOR VALUES WITH (MODULUS 2, REMAINDER ${i})`,
      );
    }
    const ledger = new PostgresLedger({ pool: admin, schema });
    await ledger.migrate();
    const { rows } = await admin.query(
      `SELECT table_name FROM information_schema.columns WHERE table_schema = $1 AND column_name = 'request' ORDER BY 1`,
      [schema],
    );
    expect(rows.map((r) => r.table_name)).toEqual(["dispatch_once_ledger", "dispatch_once_ledger_p0", "dispatch_once_ledger_p1"]);
    for (let i = 0; i < 20; i++) expect(await claimed(ledger, `p-${i}`)).toMatchObject({ fence: 1, request: REQUEST });
  });
});

describe("LEDGER-22: a client inside the caller's transaction is refused before the ledger writes", () => {
  let schema: string;
  let client: pg.Client;
  let onClient: PostgresLedger;
  beforeAll(async () => {
    ({ schema } = await fresh("txn"));
    client = new pg.Client({ connectionString: DATABASE_URL });
    client.on("error", () => {});
    await client.connect();
    onClient = new PostgresLedger({ pool: client, schema });
  });
  afterAll(async () => {
    await client.end();
  });

  async function refusedInside(what: string, op: () => Promise<unknown>) {
    const error = await rejection(op());
    expect(error, what).toMatchObject({ code: "invalid_ledger_input", field: "pool" });
    expect(error.message, what).toMatch(/inside a transaction/);
  }

  for (const [name, after] of [
    ["right after BEGIN", async () => {}],
    ["after it read", async () => void (await client.query("SELECT 1"))],
    ["after it wrote", async () => void (await client.query(`CREATE TEMP TABLE IF NOT EXISTS mine (x int); INSERT INTO mine VALUES (1)`))],
    ["in REPEATABLE READ", async () => void (await client.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))],
  ] as const) {
    it(`${name}: claim is refused with invalid_ledger_input (field pool), nothing is written, the caller's transaction is intact`, async () => {
      const key = `txn-${name}`;
      await client.query("BEGIN");
      await after();
      await refusedInside("claim", () => onClient.claim(request(key, "o")));
      // Not aborted: the caller's own work goes on and can commit.
      expect(client.getTransactionStatus()).toBe("T");
      expect((await client.query("SELECT 2 AS two")).rows).toEqual([{ two: 2 }]);
      await client.query("COMMIT");
      expect(await storedColumns(admin, schema, key)).toBeUndefined();
      // Outside the transaction the same client claims as usual.
      expect(await onClient.claim(request(key, "o"))).toMatchObject({ outcome: "claimed", fence: 1 });
      expect(await storedColumns(admin, schema, key)).toMatchObject({ state: "in_flight", fence: "1" });
    });
  }

  it("every other operation is refused inside the transaction and changes nothing; after ROLLBACK they work", async () => {
    const { fence } = await claimed(onClient, "txn-ops");
    const before = await tuple(schema, "txn-ops");
    await client.query("BEGIN");
    const ops: [string, () => Promise<unknown>][] = [
      ["renew", () => onClient.renew("txn-ops", fence, 1000)],
      ["complete", () => onClient.complete("txn-ops", fence, '"x"')],
      ["complete (too large)", () => onClient.complete("txn-ops", fence, "x".repeat(2 * 1024 * 1024))],
      ["fail", () => onClient.fail("txn-ops", fence, { name: "E", message: "m" })],
      ["markUnknown", () => onClient.markUnknown("txn-ops", fence, "why")],
      ["release", () => onClient.release("txn-ops", fence)],
      ["retire", () => onClient.retire("txn-ops", "txn-ops-claim-0123456789", { release: true })],
      ["lookup", () => onClient.lookup("txn-ops")],
      ["sweep", () => onClient.sweep()],
    ];
    for (const [what, op] of ops) await refusedInside(what, op);
    await client.query("ROLLBACK");
    expect(await tuple(schema, "txn-ops")).toEqual(before);
    await onClient.complete("txn-ops", fence, '"done"');
    expect(await storedColumns(admin, schema, "txn-ops")).toMatchObject({ state: "completed", result: '"done"' });
  });

  it("a failed transaction (status E) is refused too", async () => {
    await client.query("BEGIN");
    await rejection(client.query("SELECT no_such_column FROM no_such_table"));
    // pg can settle a failed query on its ErrorResponse, before the ReadyForQuery that updates
    // the status arrives (seen under load): a second query settles only after that one.
    expect((await rejection(client.query("SELECT 1"))).code).toBe("25P02");
    expect(client.getTransactionStatus()).toBe("E");
    await refusedInside("claim", () => onClient.claim(request("txn-failed", "o")));
    await client.query("ROLLBACK");
    expect(await storedColumns(admin, schema, "txn-failed")).toBeUndefined();
  });

  it("a BEGIN queued on the client just before the claim (status not yet T): the claim is not handed out, and the rollback leaves no row", async () => {
    const begin = client.query("BEGIN"); // not awaited: the claim queues behind it
    await refusedInside("claim", () => onClient.claim(request("txn-queued", "o")));
    await begin;
    await client.query("ROLLBACK");
    expect(await storedColumns(admin, schema, "txn-queued")).toBeUndefined();
  });

  it("a checked-out PoolClient inside BEGIN is refused; released to its pool and checked out again outside it, it works", async () => {
    const pool = adminPool(1);
    const pooled = await pool.connect();
    const onPooled = new PostgresLedger({ pool: pooled, schema });
    await pooled.query("BEGIN");
    await refusedInside("claim", () => onPooled.claim(request("txn-pooled", "o")));
    await pooled.query("ROLLBACK");
    expect(await onPooled.claim(request("txn-pooled", "o"))).toMatchObject({ outcome: "claimed" });
    pooled.release();
    await pool.end();
  });

  it("a queryable without a transaction status (a wrapper) inside a transaction that wrote: the claim function refuses it, writing nothing", async () => {
    const wrapper = { query: (config: never) => client.query(config) };
    const onWrapper = new PostgresLedger({ pool: wrapper as never, schema });
    await client.query("BEGIN");
    await client.query(`CREATE TEMP TABLE IF NOT EXISTS mine (x int); INSERT INTO mine VALUES (2)`);
    await refusedInside("claim", () => onWrapper.claim(request("txn-wrapper", "o")));
    expect(client.getTransactionStatus()).toBe("T"); // refused by an answer, not an error: not aborted
    await client.query("COMMIT");
    expect(await storedColumns(admin, schema, "txn-wrapper")).toBeUndefined();
  });

  it("a pg.Pool works as before, whatever its other clients are doing, and migrate() may run inside a migration transaction", async () => {
    const pool = adminPool(3);
    const onPool = new PostgresLedger({ pool, schema });
    const busy = await pool.connect();
    await busy.query("BEGIN");
    const c = await claimed(onPool, "txn-pool");
    await onPool.complete("txn-pool", c.fence, '"ok"');
    expect(await storedColumns(admin, schema, "txn-pool")).toMatchObject({ state: "completed", result: '"ok"' });
    await busy.query("ROLLBACK");
    busy.release();
    await pool.end();

    const migrating = uniqueSchema("txn_migrate");
    schemas.push(migrating);
    await client.query("BEGIN");
    await new PostgresLedger({ pool: client, schema: migrating }).migrate();
    await client.query("ROLLBACK");
    expect((await admin.query(`SELECT 1 FROM pg_namespace WHERE nspname = $1`, [migrating])).rowCount).toBe(0);
  });
});
