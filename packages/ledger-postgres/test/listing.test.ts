// PostgreSQL specifics of listing and resolution (LIST-6, RESOLVE-7); the behaviour every ledger
// shares is checked by the conformance kit (conformance.test.ts).
import type pg from "pg";
import type { QueryConfig } from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { adminPool, dropSchema, table, uniqueSchema } from "./helpers.js";

let admin: pg.Pool;
const schemas: string[] = [];

beforeAll(() => {
  admin = adminPool();
});

afterAll(async () => {
  for (const schema of schemas) await dropSchema(admin, schema);
  await admin.end();
});

describe("listing reads an index, never the whole table (LIST-6)", () => {
  it("LIST-6 by state, by tool and by conversation: the listing index, never a sequential scan, over 100 000 rows", async () => {
    const schema = uniqueSchema("listing");
    schemas.push(schema);
    const sent: QueryConfig[] = [];
    // The ledger's statements, as it sends them: the listing's SQL is built per filter combination.
    const recording = { query: (config: QueryConfig) => (sent.push(config), admin.query(config)) } as unknown as pg.Pool;
    const ledger = new PostgresLedger({ pool: recording, schema });
    await ledger.migrate();
    await admin.query(
      `INSERT INTO ${table(schema)} (key, v, state, tool_name, effect, fence, claimed_at, finished_at, expires_at, result, request, conversation_id)
       SELECT 'done-' || i, 1, 'completed', 'send_payment', 'keyed_write', 1, 1000 + i, 2000 + i, 9e15, '"ok"', '{}', 'conv-' || (i % 1000)
         FROM generate_series(1, 100000) AS i`,
    );
    await admin.query(`ANALYZE ${table(schema)}`);
    for (const [query, index] of [
      [{ state: "unknown" as const }, "dispatch_once_ledger_lst_state"],
      [{ toolName: "send_sms" }, "dispatch_once_ledger_lst_tool"],
      [{ conversationId: "conv-7" }, "dispatch_once_ledger_lst_conv"],
    ] as const) {
      await ledger.listRows(query);
      const last = sent.at(-1)!;
      const plan = (await admin.query({ text: `EXPLAIN ${last.text}`, values: last.values })).rows.map((r: { "QUERY PLAN": string }) => r["QUERY PLAN"]).join("\n");
      expect(plan, JSON.stringify(query)).toContain(index);
      // The index bounds what is read to the matching rows; a small match may be sorted after (a conversation's rows).
      expect(plan, JSON.stringify(query)).not.toMatch(/Seq Scan/);
    }
    const page = await ledger.listRows({ conversationId: "conv-7" });
    expect(page.rows).toHaveLength(100);
    expect(page.rows[0]).toMatchObject({ key: "done-7", conversationId: "conv-7" });
  });
});

describe("sweep takes a row's audit trail with it (RESOLVE-7)", () => {
  it("RESOLVE-7 the audit entries of a swept row are deleted with it; sweep still counts rows", async () => {
    const schema = uniqueSchema("auditsweep");
    schemas.push(schema);
    const ledger = new PostgresLedger({ pool: admin, schema, retentionMs: 1_000 });
    await ledger.migrate();
    for (const key of ["a", "b"]) {
      const claimed = await ledger.claim({ key, toolName: "t", effect: "unkeyed_write", owner: "o", leaseMs: 60_000, request: "{}" });
      if (claimed.outcome !== "claimed") throw new Error("not claimed");
      await ledger.markUnknown(key, claimed.fence, "tool_error");
    }
    // "a" finished (and was claimed) long ago: its retention has passed.
    await admin.query(`UPDATE ${table(schema)} SET claimed_at = claimed_at - 10000, finished_at = finished_at - 10000, expires_at = expires_at - 10000 WHERE key = 'a'`);
    expect(await ledger.auditTrail("a")).toHaveLength(1);
    expect(await ledger.sweep()).toBe(1);
    expect(await ledger.auditTrail("a")).toEqual([]);
    expect(await ledger.auditTrail("b")).toMatchObject([{ action: "marked_unknown", actor: "o", fence: 1 }]);
  });
});
