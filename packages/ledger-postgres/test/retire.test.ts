// retire (LEDGER-28) on the real server: a retired claim id is refused by every claim carrying it,
// row or no row, for the retention; with release, the row in flight under it is released in the
// same step. Read from the tables themselves, including the races that make it one atomic step.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { retiredClaimError, type ClaimRequest, type LedgerEffect } from "@dispatch-once/core";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { DATABASE_URL, adminPool, closedPort, closedUrl, dropSchema, expireLease, expireRetention, storedColumns, table, tableShape, uniqueSchema } from "./helpers.js";

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

async function fresh(tag: string, options: { retentionMs?: number } = {}): Promise<{ ledger: PostgresLedger; schema: string }> {
  const schema = uniqueSchema(tag);
  schemas.push(schema);
  const ledger = new PostgresLedger({ pool: admin, schema, ...options });
  await ledger.migrate();
  return { ledger, schema };
}

const A = "claim-id-A-0123456789abcdef";
const B = "claim-id-B-0123456789abcdef";
const C = "claim-id-C-0123456789abcdef";

function request(key: string, claimId?: string, effect: LedgerEffect = "unkeyed_write"): ClaimRequest {
  return { key, toolName: "post_note", effect, owner: "owner-a", leaseMs: 60_000, request: `{"key":"${key}"}`, ...(claimId === undefined ? {} : { claimId }) };
}

async function claimed(ledger: PostgresLedger, key: string, claimId?: string, effect?: LedgerEffect) {
  const result = await ledger.claim(request(key, claimId, effect));
  if (result.outcome !== "claimed") throw new Error(`expected a claim of ${key}, got ${JSON.stringify(result)}`);
  return result;
}

async function rejection(promise: Promise<unknown>): Promise<Error & { code?: string; field?: string; fence?: number }> {
  try {
    await promise;
  } catch (error) {
    return error as Error & { code?: string };
  }
  throw new Error("expected a rejection");
}

/** The retired ids of a schema's ledger, as stored. */
async function retiredRows(schema: string): Promise<Array<{ key: string; claim_id: string; retired_until: string }>> {
  const { rows } = await admin.query(`SELECT key, claim_id, retired_until FROM ${table(schema, "dispatch_once_ledger_retired")} ORDER BY key, claim_id`);
  return rows;
}

/** Every column of the row except its tuple identity: what "the row did not change" means here. */
async function columns(schema: string, key: string) {
  return storedColumns(admin, schema, key);
}

/** Until a backend other than ours waits on a lock while running a statement containing `text`. */
async function waitingOnLock(text: string): Promise<void> {
  for (let polls = 0; polls < 400; polls++) {
    const { rows } = await admin.query(
      "SELECT 1 FROM pg_stat_activity WHERE pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND query LIKE $1",
      [`%${text}%`],
    );
    if (rows.length > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  throw new Error(`no statement with ${text} ever waited on a lock`);
}

describe("LEDGER-28: retire refuses the claim id, row or no row", () => {
  it("LEDGER-28: retired with no row: a claim carrying the id is refused (stale_claim, fence 0) and creates nothing; other ids and no id claim normally", async () => {
    const { ledger, schema } = await fresh("rt_norow");
    expect(await ledger.retire("k", B)).toEqual({ released: false });
    expect(await columns(schema, "k")).toBeUndefined(); // the key's placeholder never outlives the retire
    const refused = await rejection(ledger.claim(request("k", B)));
    expect(refused).toMatchObject({ code: "stale_claim", fence: 0, message: retiredClaimError("k", 0).message });
    expect(await columns(schema, "k")).toBeUndefined();
    expect(await ledger.lookup("k")).toBeUndefined();
    expect((await ledger.listRows()).rows).toEqual([]);
    // Retired ids are not rows; another id, and a claim without one, are unaffected.
    expect(await claimed(ledger, "k", A)).toMatchObject({ fence: 1, takeover: false });
    await ledger.release("k", 1);
    expect(await claimed(ledger, "k")).toMatchObject({ fence: 2 });
    expect(await columns(schema, "k")).toMatchObject({ state: "in_flight", fence: "2", claim_id: null });
    // Still refused whatever the row is now, and the row is not touched.
    const before = await columns(schema, "k");
    expect(await rejection(ledger.claim(request("k", B)))).toMatchObject({ code: "stale_claim", fence: 2 });
    expect(await columns(schema, "k")).toEqual(before);
  });

  it("LEDGER-28: before LEDGER-26's recognition: the row's own in-flight claim id, once retired, is refused, and without release the row is kept as it was", async () => {
    const { ledger, schema } = await fresh("rt_own");
    await claimed(ledger, "own", A);
    const before = await columns(schema, "own");
    expect(await ledger.retire("own", A)).toEqual({ released: false });
    expect(await columns(schema, "own")).toEqual(before);
    expect(await rejection(ledger.claim(request("own", A)))).toMatchObject({ code: "stale_claim", fence: 1 });
    expect(await columns(schema, "own")).toEqual(before);
    // Its own fence still finishes it: retire without release leaves the row to its owner.
    await ledger.complete("own", 1, '"done"');
    expect(await columns(schema, "own")).toMatchObject({ state: "completed", fence: "1" });
    // A terminal row within retention: refused with its fence; past retention (forgotten): fence 0, nothing changes.
    expect(await rejection(ledger.claim(request("own", A)))).toMatchObject({ code: "stale_claim", fence: 1 });
    await expireRetention(admin, schema, "own");
    const old = await columns(schema, "own");
    expect(await rejection(ledger.claim(request("own", A)))).toMatchObject({ code: "stale_claim", fence: 0 });
    expect(await columns(schema, "own")).toEqual(old);
  });

  it("LEDGER-28: release only under that claim id and only when release is true; fence, request and claim id kept, as release(fence) would", async () => {
    const { ledger, schema } = await fresh("rt_release");
    await claimed(ledger, "r", A);
    const inFlight = await columns(schema, "r");
    // Another claim id, with release: the row is not its own, nothing changes.
    expect(await ledger.retire("r", B, { release: true })).toEqual({ released: false });
    expect(await columns(schema, "r")).toEqual(inFlight);
    // Its own claim id without release: retired, not released.
    expect(await ledger.retire("r", A, { release: false })).toEqual({ released: false });
    expect(await columns(schema, "r")).toEqual(inFlight);
    // With release: released in the same step.
    expect(await ledger.retire("r", A, { release: true })).toEqual({ released: true });
    const released = await columns(schema, "r");
    expect(released).toMatchObject({ state: "released", fence: "1", claim_id: A, request: '{"key":"r"}', lease_expires_at: null, owner: "owner-a" });
    expect(Number(released!.expires_at) - Number(released!.finished_at)).toBe(ledger.retentionMs);
    // The owner's fence is over, as after release(fence).
    expect(await rejection(ledger.complete("r", 1, '"late"'))).toMatchObject({ code: "stale_claim" });
    // Idempotent: again, with or without release, changes nothing more.
    expect(await ledger.retire("r", A, { release: true })).toEqual({ released: false });
    expect(await ledger.retire("r", A)).toEqual({ released: false });
    expect(await columns(schema, "r")).toEqual(released);
    expect((await retiredRows(schema)).map((r) => r.claim_id)).toEqual([A, B]);
    // A new claim id re-claims the released row as before (LEDGER-8): fence 2, the stored request.
    expect(await ledger.claim({ ...request("r", C), request: '{"other":1}' })).toMatchObject({ outcome: "claimed", fence: 2, takeover: false, request: '{"key":"r"}' });
    // And a row in flight under another id is never released by retiring one of the old ids.
    expect(await ledger.retire("r", A, { release: true })).toEqual({ released: false });
    expect(await columns(schema, "r")).toMatchObject({ state: "in_flight", fence: "2", claim_id: C });
  });

  it("LEDGER-28: a row in flight under the id whose lease has expired is released too (keyed and unkeyed), not taken over or turned unknown", async () => {
    const { ledger, schema } = await fresh("rt_expired");
    for (const effect of ["keyed_write", "unkeyed_write"] as const) {
      const key = `exp-${effect}`;
      await claimed(ledger, key, A, effect);
      await expireLease(admin, schema, key);
      expect(await ledger.retire(key, A, { release: true })).toEqual({ released: true });
      expect(await columns(schema, key)).toMatchObject({ state: "released", fence: "1", takeover: false, claim_id: A, reason: null });
      expect(await ledger.auditTrail(key)).toEqual([]);
      expect(await rejection(ledger.claim(request(key, A, effect)))).toMatchObject({ code: "stale_claim", fence: 1 });
    }
  });

  it("LEDGER-28: retiring again never shortens the time an id is refused", async () => {
    const { ledger, schema } = await fresh("rt_idem");
    await ledger.retire("i", B);
    const [first] = await retiredRows(schema);
    await admin.query(`UPDATE ${table(schema, "dispatch_once_ledger_retired")} SET retired_until = retired_until + 3600000`);
    await ledger.retire("i", B);
    const [second] = await retiredRows(schema);
    expect(Number(second!.retired_until)).toBe(Number(first!.retired_until) + 3_600_000);
    expect(await retiredRows(schema)).toHaveLength(1);
  });

  it("LEDGER-28: kept for the ledger's retention on the server clock; past it the id is forgotten (claims again), and sweep deletes it without counting it", async () => {
    const { ledger, schema } = await fresh("rt_retention", { retentionMs: 3_600_000 });
    const { rows } = await admin.query(`SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS now`);
    await ledger.retire("gone", B);
    await ledger.retire("kept", B);
    const stored = await retiredRows(schema);
    for (const row of stored) {
      expect(Number(row.retired_until) - Number(rows[0].now)).toBeGreaterThanOrEqual(3_600_000);
      expect(Number(row.retired_until) - Number(rows[0].now)).toBeLessThan(3_600_000 + 60_000);
    }
    expect(await ledger.sweep()).toBe(0);
    expect(await retiredRows(schema)).toHaveLength(2);
    // Let "gone"'s retention pass.
    await admin.query(
      `UPDATE ${table(schema, "dispatch_once_ledger_retired")} SET retired_until = floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint - 1 WHERE key = 'gone'`,
    );
    expect(await claimed(ledger, "gone", B)).toMatchObject({ fence: 1 });
    await ledger.release("gone", 1);
    await expireRetention(admin, schema, "gone");
    // One row past retention counted; the forgotten id is not.
    expect(await ledger.sweep()).toBe(1);
    expect((await retiredRows(schema)).map((r) => r.key)).toEqual(["kept"]);
    expect(await rejection(ledger.claim(request("kept", B)))).toMatchObject({ code: "stale_claim" });
  });

  it("LEDGER-28: sweep forgets a backlog of expired ids in batches", async () => {
    const { ledger, schema } = await fresh("rt_backlog");
    await admin.query(
      `INSERT INTO ${table(schema, "dispatch_once_ledger_retired")} (retired_until, key, claim_id)
       SELECT 1, 'k' || i, 'claim-id-0123456789-' || i FROM generate_series(1, 12345) AS i`,
    );
    await ledger.retire("live", B);
    expect(await ledger.sweep()).toBe(0);
    expect((await retiredRows(schema)).map((r) => r.key)).toEqual(["live"]);
  });

  it("LEDGER-28: invalid arguments are refused with invalid_ledger_input before anything is written", async () => {
    const { ledger, schema } = await fresh("rt_invalid");
    await claimed(ledger, "k", A);
    const before = await columns(schema, "k");
    const cases: Array<[string, () => Promise<unknown>]> = [
      ["key", () => ledger.retire("", A)],
      ["key", () => ledger.retire(42 as never, A)],
      ["key", () => ledger.retire("x".repeat(513), A)],
      ["claimId", () => ledger.retire("k", "short")],
      ["claimId", () => ledger.retire("k", "has spaces in it 0123456789")],
      ["claimId", () => ledger.retire("k", undefined as never)],
      ["release", () => ledger.retire("k", A, { release: "yes" } as never)],
      ["options", () => ledger.retire("k", A, null as never)],
    ];
    for (const [field, call] of cases) expect(await rejection(call()), field).toMatchObject({ code: "invalid_ledger_input", field });
    expect(await retiredRows(schema)).toEqual([]);
    expect(await columns(schema, "k")).toEqual(before);
  });

  it("LEDGER-28: a claim without a claim id never reads the retired ids; a claim with one reads them by one index lookup", async () => {
    const { ledger, schema } = await fresh("rt_cost");
    await ledger.retire("someone-else", B);
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      const onClient = new PostgresLedger({ pool: client, schema });
      // This backend's table counters, flushed (PostgreSQL 15+) after the claims it ran.
      const scans = async () => {
        await client.query("SELECT pg_stat_force_next_flush()");
        const { rows } = await client.query(
          `SELECT coalesce(idx_scan, 0)::int AS idx, coalesce(seq_scan, 0)::int AS seq FROM pg_stat_user_tables WHERE relid = $1::regclass`,
          [table(schema, "dispatch_once_ledger_retired")],
        );
        return rows[0] as { idx: number; seq: number };
      };
      const start = await scans();
      for (let i = 0; i < 10; i++) await claimed(onClient, `plain-${i}`); // new keys, no id
      for (let i = 0; i < 10; i++) await onClient.claim(request(`plain-${i}`)); // existing rows, no id
      expect(await scans()).toEqual(start);
      for (let i = 0; i < 10; i++) await claimed(onClient, `with-id-${i}`, `claim-id-${i}-0123456789abcdef`); // new keys
      for (let i = 0; i < 10; i++) await onClient.claim(request(`with-id-${i}`, C)); // existing live rows
      expect(await scans()).toEqual({ idx: start.idx + 20, seq: start.seq });
    } finally {
      await client.end();
    }
  });

  it("LEDGER-28: supports.retire is declared", async () => {
    const { ledger } = await fresh("rt_supports");
    expect(ledger.capabilities.supports?.retire).toBe(true);
  });
});

describe("LEDGER-28: one atomic step against a claim with the same claim id", () => {
  const claimFn = (schema: string) => `"${schema}"."dispatch_once_ledger_claim"`;
  const retireFn = (schema: string) => `"${schema}"."dispatch_once_ledger_retire"`;
  const claimArgs = (key: string, claimId: string) => [key, "post_note", "unkeyed_write", "owner-a", 60_000, 86_400_000, `{"key":"${key}"}`, claimId, null, null];

  async function onOwnClient<T>(work: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      return await work(client);
    } finally {
      await client.end();
    }
  }

  it("a claim inserting the key first: the retire waits for its commit, then releases the row it took", async () => {
    const { ledger, schema } = await fresh("rt_race_ins1");
    await onOwnClient(async (client) => {
      await client.query("BEGIN");
      const { rows } = await client.query(`SELECT ${claimFn(schema)}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS answer`, claimArgs("k", B));
      expect(String(rows[0].answer)).toMatch(/^c1 /); // inserted, not committed yet
      const retire = ledger.retire("k", B, { release: true });
      await waitingOnLock("dispatch_once_ledger_retire");
      await client.query("COMMIT");
      expect(await retire).toEqual({ released: true });
    });
    expect(await columns(schema, "k")).toMatchObject({ state: "released", fence: "1", claim_id: B });
  });

  it("a retire holding the key first (no row): the claim waits for its commit and is refused, leaving no row", async () => {
    const { ledger, schema } = await fresh("rt_race_ins2");
    await onOwnClient(async (client) => {
      await client.query("BEGIN");
      const { rows } = await client.query(`SELECT ${retireFn(schema)}($1, $2, true, 86400000) AS answer`, ["k", B]);
      expect(rows[0].answer).toBe("0");
      const claim = rejection(ledger.claim(request("k", B)));
      await waitingOnLock("dispatch_once_ledger_claim");
      await client.query("COMMIT");
      expect(await claim).toMatchObject({ code: "stale_claim", fence: 0 });
    });
    expect(await columns(schema, "k")).toBeUndefined();
  });

  it("a retire holding a claimable row (released under another id): the claim waits, re-checks after the commit and is refused; the row stays released", async () => {
    const { ledger, schema } = await fresh("rt_race_upd");
    await claimed(ledger, "k", A);
    await ledger.release("k", 1);
    const before = await columns(schema, "k");
    await onOwnClient(async (client) => {
      await client.query("BEGIN");
      await client.query(`SELECT ${retireFn(schema)}($1, $2, true, 86400000) AS answer`, ["k", B]);
      const claim = rejection(ledger.claim(request("k", B)));
      await waitingOnLock("dispatch_once_ledger_claim");
      await client.query("COMMIT");
      expect(await claim).toMatchObject({ code: "stale_claim", fence: 1 });
    });
    expect(await columns(schema, "k")).toEqual(before);
  });

  it("a claim taking a claimable row first: the retire waits for it and releases what it took", async () => {
    const { ledger, schema } = await fresh("rt_race_upd2");
    await claimed(ledger, "k", A);
    await ledger.release("k", 1);
    await onOwnClient(async (client) => {
      await client.query("BEGIN");
      const { rows } = await client.query(`SELECT ${claimFn(schema)}($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS answer`, claimArgs("k", B));
      expect(String(rows[0].answer)).toMatch(/^c2 /);
      const retire = ledger.retire("k", B, { release: true });
      await waitingOnLock("dispatch_once_ledger_retire");
      await client.query("COMMIT");
      expect(await retire).toEqual({ released: true });
    });
    expect(await columns(schema, "k")).toMatchObject({ state: "released", fence: "2", claim_id: B });
  });

  it("a retire holding the row in flight under the id (expired lease): the claim sent again waits and is refused; the row is released", async () => {
    const { ledger, schema } = await fresh("rt_race_own");
    await claimed(ledger, "k", B);
    await expireLease(admin, schema, "k");
    await onOwnClient(async (client) => {
      await client.query("BEGIN");
      const { rows } = await client.query(`SELECT ${retireFn(schema)}($1, $2, true, 86400000) AS answer`, ["k", B]);
      expect(rows[0].answer).toBe("1");
      const claim = rejection(ledger.claim(request("k", B)));
      await waitingOnLock("dispatch_once_ledger_claim");
      await client.query("COMMIT");
      expect(await claim).toMatchObject({ code: "stale_claim", fence: 1 });
    });
    expect(await columns(schema, "k")).toMatchObject({ state: "released", fence: "1", claim_id: B });
  });

  // The claim's UPDATEs re-check the retired ids after waiting. To make a claim wait exactly there
  // (past its INSERT and its read), the test locks the row without writing it (a lock-only tuple
  // lock does not stop the INSERT's conflict check), then retires the id in that same transaction
  // as the retire function does (the id recorded, the row rewritten: a no-op or the release), and
  // commits while the claim waits.
  for (const [what, start] of [
    ["a claimable row (released under another id)", "released"],
    ["its own in-flight row, lease expired (LEDGER-26's recognition)", "own"],
  ] as const) {
    it(`a claim waiting at its UPDATE on ${what} while the id is retired: it re-checks on the new row version and is refused, changing nothing`, async () => {
      const { ledger, schema } = await fresh("rt_race_epq");
      if (start === "released") {
        await claimed(ledger, "k", A);
        await ledger.release("k", 1);
      } else {
        await claimed(ledger, "k", B);
        await expireLease(admin, schema, "k");
      }
      const before = await columns(schema, "k");
      await onOwnClient(async (client) => {
        await client.query("BEGIN");
        await client.query(`SELECT 1 FROM ${table(schema)} WHERE key = 'k' FOR UPDATE`);
        const claim = rejection(ledger.claim(request("k", B)));
        await waitingOnLock("dispatch_once_ledger_claim");
        await client.query(`INSERT INTO ${table(schema, "dispatch_once_ledger_retired")} (retired_until, key, claim_id) VALUES (9007199254740991, 'k', $1)`, [B]);
        await client.query(`UPDATE ${table(schema)} SET fence = fence WHERE key = 'k'`);
        await client.query("COMMIT");
        expect(await claim).toMatchObject({ code: "stale_claim", fence: 1 });
      });
      expect(await columns(schema, "k")).toEqual(before);
    });
  }

  for (const start of ["no row", "released under another id", "in flight under the id, lease expired"] as const) {
    it(`free race, ${start}: over 40 keys, each claim and retire(release) with the same id end consistently: refused, or claimed and then released`, async () => {
      const { ledger, schema } = await fresh("rt_race_free");
      const pool = adminPool(8);
      const racer = new PostgresLedger({ pool, schema });
      const keys = Array.from({ length: 40 }, (_, i) => `race-${i}`);
      for (const key of keys) {
        if (start === "released under another id") {
          await claimed(ledger, key, A);
          await ledger.release(key, 1);
        } else if (start === "in flight under the id, lease expired") {
          await claimed(ledger, key, B);
          await expireLease(admin, schema, key);
        }
      }
      const outcomes = { refused: 0, claimedThenReleased: 0 };
      try {
        await Promise.all(
          keys.map(async (key, i) => {
            const claim = racer.claim(request(key, B)).then((r) => r, (e: unknown) => e as { code?: string });
            const retire = (i % 2 === 0 ? ledger : racer).retire(key, B, { release: true });
            const [c, r] = await Promise.all([claim, retire]);
            const row = await columns(schema, key);
            if ("outcome" in (c as object) && (c as { outcome: string }).outcome === "claimed") {
              // It took the row under B: the retire came second and released it.
              expect(r, key).toEqual({ released: true });
              expect(row, key).toMatchObject({ state: "released", claim_id: B });
              outcomes.claimedThenReleased++;
            } else {
              expect(c, key).toMatchObject({ code: "stale_claim" });
              if (start === "no row") {
                expect(r, key).toEqual({ released: false });
                expect(row, key).toBeUndefined();
              }
              if (start === "released under another id") {
                expect(r, key).toEqual({ released: false });
                expect(row, key).toMatchObject({ state: "released", fence: "1", claim_id: A });
              }
              if (start === "in flight under the id, lease expired") {
                expect(r, key).toEqual({ released: true });
                expect(row, key).toMatchObject({ state: "released", fence: "1", claim_id: B });
              }
              outcomes.refused++;
            }
          }),
        );
      } finally {
        await pool.end();
      }
      console.log(`retire racing a claim with the same id (${start}): ${JSON.stringify(outcomes)}`);
      expect(outcomes.refused + outcomes.claimedThenReleased).toBe(keys.length);
      // Nothing is left in flight under the retired id, whatever the order.
      const { rows } = await admin.query(`SELECT count(*)::int AS n FROM ${table(schema)} WHERE state = 'in_flight'`);
      expect(rows[0].n).toBe(0);
    });
  }
});

describe("LEDGER-22 and LEDGER-12 for retire", () => {
  it("LEDGER-22: a client inside a transaction is refused before anything is written; a wrapper whose transaction wrote is refused by the function", async () => {
    const { schema } = await fresh("rt_txn");
    const client = new pg.Client({ connectionString: DATABASE_URL });
    await client.connect();
    try {
      const onClient = new PostgresLedger({ pool: client, schema });
      await client.query("BEGIN");
      expect(await rejection(onClient.retire("k", B))).toMatchObject({ code: "invalid_ledger_input", field: "pool" });
      await client.query("ROLLBACK");
      const wrapper = new PostgresLedger({ pool: { query: (config: never) => client.query(config) } as never, schema });
      await client.query("BEGIN");
      await client.query("CREATE TEMP TABLE IF NOT EXISTS mine (x int); INSERT INTO mine VALUES (1)");
      expect(await rejection(wrapper.retire("k", B))).toMatchObject({ code: "invalid_ledger_input", field: "pool" });
      expect(client.getTransactionStatus()).toBe("T");
      await client.query("COMMIT");
      expect(await retiredRows(schema)).toEqual([]);
      expect(await onClient.retire("k", B)).toEqual({ released: false });
      expect(await retiredRows(schema)).toHaveLength(1);
    } finally {
      await client.end();
    }
  });

  it("LEDGER-12: a refused connection raises ledger_unavailable; an unmigrated table says so", async () => {
    const down = new PostgresLedger({ connectionString: closedUrl(await closedPort()), timeoutMs: 2_000 });
    expect(await rejection(down.retire("k", B))).toMatchObject({ code: "ledger_unavailable" });
    await down.close();
    const schema = uniqueSchema("rt_nomigrate");
    const never = new PostgresLedger({ pool: admin, schema });
    const error = await rejection(never.retire("k", B));
    expect(error.code).toBe("ledger_unavailable");
    expect(error.message).toMatch(/migrate/);
  });
});

describe("upgrade: a table of the previous version (before retire)", () => {
  it("migrate() adds the retired ids and the new functions; rows written before keep working and retire works on them", async () => {
    const schema = uniqueSchema("rt_upgrade");
    schemas.push(schema);
    const old = readFileSync(join(here, "fixtures", "schema-before-retire.sql"), "utf8").replaceAll('"public"', `"${schema}"`);
    expect(old).not.toContain("retire");
    await admin.query(old);
    const { rows } = await admin.query(`SELECT "${schema}".dispatch_once_ledger_claim($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS answer`, [
      "old",
      "post_note",
      "unkeyed_write",
      "old-process",
      60_000,
      86_400_000,
      '{"key":"old"}',
      A,
      null,
      null,
    ]);
    expect(String(rows[0].answer)).toMatch(/^c1 /);
    const ledger = new PostgresLedger({ pool: admin, schema });
    await ledger.migrate();
    await ledger.migrate(); // idempotent
    expect(await ledger.retire("old", A, { release: true })).toEqual({ released: true });
    expect(await columns(schema, "old")).toMatchObject({ state: "released", fence: "1", claim_id: A });
    expect(await rejection(ledger.claim(request("old", A)))).toMatchObject({ code: "stale_claim" });
    expect(await claimed(ledger, "old", C)).toMatchObject({ fence: 2 });
    // The upgraded schema and a fresh one agree on the retired table.
    const fresh2 = uniqueSchema("rt_upgrade_fresh");
    schemas.push(fresh2);
    await new PostgresLedger({ pool: admin, schema: fresh2 }).migrate();
    const retired = await tableShape(admin, schema, "dispatch_once_ledger_retired");
    expect(retired).toHaveLength(3);
    expect(retired).toEqual(await tableShape(admin, fresh2, "dispatch_once_ledger_retired"));
    expect(await tableShape(admin, schema)).toEqual(await tableShape(admin, fresh2));
  });
});
