// Expired in-flight rows that nobody claims again (issue 18): listExpiredInFlight() makes them
// visible, read-only, from the partial index on in-flight rows (never a scan of finished rows).
import { isDispatchOnceError, type ClaimRequest, type LedgerEffect } from "@dispatch-once/core";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { statements } from "../src/sql.js";
import { adminPool, dropSchema, expireLease, serverNow, storedColumns, table, uniqueSchema } from "./helpers.js";

let admin: pg.Pool;
const schemas: string[] = [];

beforeAll(() => {
  admin = adminPool(4);
});

afterAll(async () => {
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.end();
});

async function fresh(tag: string): Promise<{ ledger: PostgresLedger; schema: string }> {
  const schema = uniqueSchema(tag);
  schemas.push(schema);
  const ledger = new PostgresLedger({ pool: admin, schema });
  await ledger.migrate();
  return { ledger, schema };
}

function request(key: string, effect: LedgerEffect, leaseMs = 60_000): ClaimRequest {
  return { key, toolName: "send_payment", effect, owner: "gone", leaseMs, request: `{"key":"${key}"}` };
}

/** Put the key's lease `agoMs` in the past on the server clock. */
async function leaseEndedAgo(schema: string, key: string, agoMs: number): Promise<void> {
  const { rowCount } = await admin.query(
    `UPDATE ${table(schema)} SET lease_expires_at = floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint - $2::bigint
      WHERE key = $1 AND state = 'in_flight'`,
    [key, agoMs],
  );
  if (rowCount !== 1) throw new Error(`${key} is not in flight`);
}

async function xmin(schema: string, key: string): Promise<string> {
  return (await admin.query(`SELECT xmin::text AS x FROM ${table(schema)} WHERE key = $1`, [key])).rows[0].x;
}

describe("listExpiredInFlight(): expired claims nobody came back for become visible", () => {
  it("lists only in-flight rows whose lease ran out, oldest expiry first, with olderThanMs and limit; reads without writing", async () => {
    const { ledger, schema } = await fresh("expired");
    for (const key of ["u-old", "u-new", "k-mid", "live"]) {
      await ledger.claim(request(key, key.startsWith("k") ? "keyed_write" : "unkeyed_write"));
    }
    const done = await ledger.claim(request("done", "unkeyed_write"));
    if (done.outcome !== "claimed") throw new Error("expected a claim");
    await ledger.complete("done", done.fence, '"ok"');
    await leaseEndedAgo(schema, "u-old", 60_000);
    await leaseEndedAgo(schema, "k-mid", 30_000);
    await leaseEndedAgo(schema, "u-new", 1_000);
    const before = await xmin(schema, "u-old");

    const all = await ledger.listExpiredInFlight();
    expect(all.map((r) => r.key)).toEqual(["u-old", "k-mid", "u-new"]);
    const now = await serverNow(admin);
    for (const row of all) {
      expect(row).toMatchObject({ state: "in_flight", owner: "gone", fence: 1, request: `{"key":"${row.key}"}` });
      expect(row.leaseExpiresAt).toBeLessThanOrEqual(now);
    }
    expect((await ledger.listExpiredInFlight({ olderThanMs: 20_000 })).map((r) => r.key)).toEqual(["u-old", "k-mid"]);
    expect((await ledger.listExpiredInFlight({ olderThanMs: 20_000, limit: 1 })).map((r) => r.key)).toEqual(["u-old"]);
    expect(await ledger.listExpiredInFlight({ olderThanMs: 3_600_000 })).toEqual([]);
    // Read-only: the listed rows are still in flight, the same tuple versions.
    expect(await xmin(schema, "u-old")).toBe(before);

    // Settled by the rules of their effect class when claimed again: the unkeyed one becomes
    // unknown (LEDGER-7), the keyed one is taken over; neither is listed any more.
    expect(await ledger.claim(request("u-old", "unkeyed_write"))).toMatchObject({ outcome: "existing", row: { state: "unknown", reason: "lease_expired" } });
    expect(await ledger.claim(request("k-mid", "keyed_write"))).toMatchObject({ outcome: "claimed", takeover: true, fence: 2 });
    expect((await ledger.listExpiredInFlight()).map((r) => r.key)).toEqual(["u-new"]);
    expect(await storedColumns(admin, schema, "u-old")).toMatchObject({ state: "unknown" });
  });

  it("a listed row that does not decode raises ledger_corrupt naming its key", async () => {
    const { ledger, schema } = await fresh("expiredcorrupt");
    await ledger.claim(request("bad", "unkeyed_write"));
    await expireLease(admin, schema, "bad");
    await admin.query(`UPDATE ${table(schema)} SET request = NULL WHERE key = 'bad'`); // a 0.1.0 row
    const error = await ledger.listExpiredInFlight().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isDispatchOnceError(error, "ledger_corrupt"), String(error)).toBe(true);
    expect((error as { key?: string }).key).toBe("bad");
  });

  it("refuses bad options with invalid_ledger_input before any SQL", async () => {
    const ledger = new PostgresLedger({ pool: admin, schema: "do_test_never_created" });
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

  it("EXPLAIN: on a table of 200 000 finished rows and 500 in flight the listing walks the partial index, custom and generic plan alike", async () => {
    const { schema } = await fresh("expiredplan");
    const t = table(schema);
    await admin.query(
      `INSERT INTO ${t} (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, result, request)
       SELECT md5(i::text), 1, 'completed', 'send_payment', 'keyed_write', 1, 1700000000000 + i, 1700000000000 + i, 9e15::bigint, '"ok"', '{}'
         FROM generate_series(1, 200000) AS i`,
    );
    await admin.query(
      `INSERT INTO ${t} (key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, request)
       SELECT 'f' || i, 1, 'in_flight', 'send_payment', 'unkeyed_write', 1, 1700000000000 + i, 'gone', 1700000000000 + i * 1000, '{}'
         FROM generate_series(1, 500) AS i`,
    );
    await admin.query(`ANALYZE ${t}`);
    const { text } = statements({ schema, table: "dispatch_once_ledger" }).expiredInFlight;
    const client = await admin.connect();
    try {
      const plans: string[] = [];
      for (const mode of ["force_custom_plan", "force_generic_plan"]) {
        await client.query(`SET plan_cache_mode = ${mode}`);
        await client.query("DEALLOCATE ALL");
        await client.query(`PREPARE listing(bigint, int) AS ${text}`);
        const { rows } = await client.query(`EXPLAIN (ANALYZE, BUFFERS, FORMAT TEXT) EXECUTE listing(0, 100)`);
        const plan = rows.map((r: Record<string, string>) => r["QUERY PLAN"]).join("\n");
        plans.push(`${mode}:\n${plan}`);
        expect(plan, plan).toMatch(/Index Scan using "?dispatch_once_ledger_in_flight"?/);
        expect(plan, plan).not.toMatch(/Seq Scan/);
        // It reads about the 100 rows it returns, not the 200 000 finished ones.
        const hit = /Buffers: shared hit=(\d+)/.exec(plan);
        expect(Number(hit?.[1] ?? Infinity), plan).toBeLessThan(200);
        await client.query("DEALLOCATE listing");
      }
      await client.query("RESET plan_cache_mode");
      console.log(plans.join("\n\n"));
      // The index is what keeps it off the finished rows: without it the same query scans them all.
      await client.query("BEGIN");
      await client.query(`DROP INDEX "${schema}"."dispatch_once_ledger_in_flight"`);
      // (the listing index by state would serve it too, though sorted after: drop it as well)
      await client.query(`DROP INDEX "${schema}"."dispatch_once_ledger_lst_state"`);
      const { rows } = await client.query(`EXPLAIN ${text.replace("$1::bigint", "0::bigint").replace("$2::int", "100")}`);
      const without = rows.map((r: Record<string, string>) => r["QUERY PLAN"]).join("\n");
      await client.query("ROLLBACK");
      expect(without, without).toMatch(/Seq Scan|Index Scan using dispatch_once_ledger_claimed_at/);
      expect(without, without).not.toMatch(/in_flight"? on/);
    } finally {
      client.release();
    }
    const ledger = new PostgresLedger({ pool: admin, schema });
    const listed = await ledger.listExpiredInFlight({ limit: 10_000 });
    expect(listed).toHaveLength(500);
    expect(listed[0]!.key).toBe("f1");
  });

  it("migrate({ inFlightIndex: false }) creates no index; the listing is the same, by a scan", async () => {
    const schema = uniqueSchema("expirednoidx");
    schemas.push(schema);
    const ledger = new PostgresLedger({ pool: admin, schema });
    await ledger.migrate({ inFlightIndex: false });
    const { rows } = await admin.query(`SELECT indexname FROM pg_indexes WHERE schemaname = $1 ORDER BY 1`, [schema]);
    expect(rows.map((r: { indexname: string }) => r.indexname)).toEqual([
      "dispatch_once_ledger_audit_key",
      "dispatch_once_ledger_audit_pkey",
      "dispatch_once_ledger_claimed_at",
      "dispatch_once_ledger_lst_conv",
      "dispatch_once_ledger_lst_state",
      "dispatch_once_ledger_lst_tool",
      "dispatch_once_ledger_pkey",
      "dispatch_once_ledger_retired_pkey",
      "dispatch_once_ledger_rt_until",
    ]);
    await ledger.claim(request("x", "unkeyed_write"));
    await expireLease(admin, schema, "x");
    expect((await ledger.listExpiredInFlight()).map((r) => r.key)).toEqual(["x"]);
    await expect(ledger.migrate({ inFlightIndex: "no" as never })).rejects.toMatchObject({ code: "invalid_ledger_input", field: "inFlightIndex" });
  });
});
