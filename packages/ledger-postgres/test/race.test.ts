import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresLedger } from "../src/index.js";
import { DATABASE_URL, adminPool, dropSchema, table, uniqueSchema } from "./helpers.js";
import { compiledEntry } from "@dispatch-once/test-processes";

const here = dirname(fileURLToPath(import.meta.url));
const PROCESSES = 6;

interface WorkerReport {
  worker: number;
  won: { key: string; fence: number; takeover: boolean }[];
  existing: Record<string, number>;
}

type Effect = "keyed_write" | "unkeyed_write";

/** Start PROCESSES workers, wait until all are connected, release them at once, collect their reports. */
async function race(schema: string, keys: { key: string; effect: Effect }[], order: "same" | "shuffled"): Promise<WorkerReport[]> {
  const dir = mkdtempSync(join(tmpdir(), "do-pg-race-"));
  const keysFile = join(dir, "keys.json");
  writeFileSync(keysFile, JSON.stringify(keys));
  try {
    const workers = Array.from({ length: PROCESSES }, (_, id) => {
      const child = spawn(process.execPath, [compiledEntry(join(here, "race-worker.ts")), schema, keysFile, String(id), order], {
        cwd: join(here, ".."),
        env: { ...process.env, DATABASE_URL },
        stdio: ["pipe", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      child.stdout.setEncoding("utf8").on("data", (d: string) => (out += d));
      child.stderr.setEncoding("utf8").on("data", (d: string) => (err += d));
      const ready = new Promise<void>((resolve, reject) => {
        const check = () => (out.includes("ready\n") ? resolve() : undefined);
        child.stdout.on("data", check);
        child.once("exit", (code) => reject(new Error(`worker ${id} exited (${code}) before ready: ${err}`)));
      });
      const done = new Promise<WorkerReport>((resolve, reject) => {
        child.once("exit", (code) => {
          if (code !== 0) return reject(new Error(`worker ${id} exited with ${code}: ${err}`));
          const line = out.split("\n").find((l) => l.startsWith("{"));
          if (line === undefined) return reject(new Error(`worker ${id} printed no report: ${out} ${err}`));
          resolve(JSON.parse(line) as WorkerReport);
        });
      });
      return { child, ready, done };
    });
    await Promise.all(workers.map((w) => w.ready));
    for (const w of workers) w.child.stdin.end("go\n");
    return await Promise.all(workers.map((w) => w.done));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe(`multi-process race: ${PROCESSES} OS processes claim the same keys`, () => {
  let admin: pg.Pool;
  let schema: string;

  beforeAll(async () => {
    admin = adminPool();
    schema = uniqueSchema("race");
    await new PostgresLedger({ pool: admin, schema }).migrate();
    // The run log: one row per execution of the "tool". Its primary key is deliberately NOT on
    // key, so a second run would be recorded, not refused.
    await admin.query(
      `CREATE TABLE "${schema}".run_log (id bigserial PRIMARY KEY, key text NOT NULL, worker int NOT NULL, fence bigint NOT NULL, request text NOT NULL)`,
    );
  });

  afterAll(async () => {
    await dropSchema(admin, schema);
    await admin.end();
  });

  it("fresh keys: each key has exactly one winner and exactly one run, read back from the store", async () => {
    const keys = Array.from({ length: 300 }, (_, i) => ({
      key: `fresh-${i}`,
      effect: (i % 2 === 0 ? "keyed_write" : "unkeyed_write") as Effect,
    }));
    const reports = await race(schema, keys, "shuffled");

    // Winners as the processes saw them.
    const winners = new Map<string, number[]>();
    for (const r of reports) for (const w of r.won) winners.set(w.key, [...(winners.get(w.key) ?? []), r.worker]);
    expect(winners.size).toBe(keys.length);
    expect([...winners.values()].filter((ws) => ws.length !== 1)).toEqual([]);
    const losses = reports.reduce((n, r) => n + Object.values(r.existing).reduce((a, b) => a + b, 0), 0);
    expect(losses).toBe(keys.length * (PROCESSES - 1));

    // Runs as the store recorded them: exactly one per key, by the reported winner.
    const { rows: runs } = await admin.query<{ key: string; runs: string; worker: number }>(
      `SELECT key, count(*) AS runs, min(worker) AS worker FROM "${schema}".run_log WHERE key LIKE 'fresh-%' GROUP BY key`,
    );
    expect(runs.length).toBe(keys.length);
    expect(runs.filter((r) => r.runs !== "1")).toEqual([]);
    for (const r of runs) expect(winners.get(r.key)).toEqual([r.worker]);

    // Ledger rows: every key completed at fence 1 with the winner's result, never taken over,
    // storing the winner's request, which is the one its run used (LEDGER-21).
    const { rows } = await admin.query(
      `SELECT t.key, t.state, t.fence, t.takeover, t.result, t.request, l.request AS ran_with
         FROM ${table(schema)} t JOIN "${schema}".run_log l USING (key) WHERE t.key LIKE 'fresh-%'`,
    );
    expect(rows.length).toBe(keys.length);
    for (const row of rows) {
      expect(row).toMatchObject({ state: "completed", fence: "1", takeover: false });
      expect(JSON.parse(row.result)).toEqual({ ranBy: winners.get(row.key)![0], fence: 1 });
      expect(row.request).toBe(`{"key":"${row.key}","worker":${winners.get(row.key)![0]}}`);
      expect(row.ran_with).toBe(row.request);
    }
  });

  it("claimable rows: exactly one process takes each over; expired unkeyed_write claims become unknown and never run", async () => {
    // Seed rows directly in SQL, as a crashed owner or an earlier release would leave them.
    const n = 60;
    await admin.query(
      `INSERT INTO ${table(schema)} (key, v, state, tool_name, effect, fence, owner, claimed_at, lease_expires_at, finished_at, expires_at, request)
       SELECT k.key, 1, k.state, 'send_payment', k.effect, 5, 'crashed', now_ms - 120000,
              CASE WHEN k.state = 'in_flight' THEN now_ms - 60000 END,
              CASE WHEN k.state <> 'in_flight' THEN now_ms - 60000 END,
              CASE WHEN k.state = 'released' THEN now_ms + 3600000 WHEN k.state = 'completed' THEN now_ms - 1 END,
              '{"first":"' || k.key || '"}'
         FROM (SELECT floor(extract(epoch FROM statement_timestamp()) * 1000)::bigint AS now_ms) c,
              LATERAL (
                SELECT 'expired-keyed-' || i AS key, 'in_flight' AS state, 'keyed_write' AS effect FROM generate_series(1, $1::int) i
                UNION ALL SELECT 'expired-unkeyed-' || i, 'in_flight', 'unkeyed_write' FROM generate_series(1, $1::int) i
                UNION ALL SELECT 'released-' || i, 'released', 'unkeyed_write' FROM generate_series(1, $1::int) i
                UNION ALL SELECT 'past-retention-' || i, 'completed', 'keyed_write' FROM generate_series(1, $1::int) i
              ) k`,
      [n],
    );
    const keys = [
      ...Array.from({ length: n }, (_, i) => ({ key: `expired-keyed-${i + 1}`, effect: "keyed_write" as Effect })),
      ...Array.from({ length: n }, (_, i) => ({ key: `expired-unkeyed-${i + 1}`, effect: "unkeyed_write" as Effect })),
      ...Array.from({ length: n }, (_, i) => ({ key: `released-${i + 1}`, effect: "unkeyed_write" as Effect })),
      ...Array.from({ length: n }, (_, i) => ({ key: `past-retention-${i + 1}`, effect: "keyed_write" as Effect })),
    ];
    // Every process walks the keys in the same order: all six hit each claimable row at once.
    const reports = await race(schema, keys, "same");

    const wins = reports.flatMap((r) => r.won.map((w) => ({ ...w, worker: r.worker })));
    const byKey = new Map<string, typeof wins>();
    for (const w of wins) byKey.set(w.key, [...(byKey.get(w.key) ?? []), w]);
    const claimable = keys.filter((k) => !k.key.startsWith("expired-unkeyed-"));
    for (const { key } of claimable) {
      const won = byKey.get(key) ?? [];
      expect(won.length, `winners of ${key}`).toBe(1);
      expect(won[0]!.fence).toBe(6);
      expect(won[0]!.takeover).toBe(key.startsWith("expired-keyed-"));
    }
    expect(wins.filter((w) => w.key.startsWith("expired-unkeyed-"))).toEqual([]);

    const { rows: runs } = await admin.query<{ key: string; runs: string; fence: string }>(
      `SELECT key, count(*) AS runs, max(fence) AS fence FROM "${schema}".run_log WHERE key NOT LIKE 'fresh-%' GROUP BY key`,
    );
    expect(runs.length).toBe(claimable.length);
    expect(runs.filter((r) => r.runs !== "1" || r.fence !== "6")).toEqual([]);

    // LEDGER-21: a takeover and a re-claim after release keep the first request and run with it;
    // a row past retention is forgotten, so its winner stores and runs its own request.
    const { rows: requests } = await admin.query<{ key: string; request: string; ran_with: string | null; worker: number | null }>(
      `SELECT t.key, t.request, l.request AS ran_with, l.worker
         FROM ${table(schema)} t LEFT JOIN "${schema}".run_log l USING (key) WHERE t.key NOT LIKE 'fresh-%'`,
    );
    expect(requests.length).toBe(keys.length);
    for (const r of requests) {
      const expected = r.key.startsWith("past-retention-") ? `{"key":"${r.key}","worker":${r.worker}}` : `{"first":"${r.key}"}`;
      expect(r.request, r.key).toBe(expected);
      expect(r.ran_with, r.key).toBe(r.key.startsWith("expired-unkeyed-") ? null : expected);
    }

    const { rows: states } = await admin.query<{ kind: string; state: string; fence: string; takeover: boolean; reason: string | null; n: string }>(
      `SELECT regexp_replace(key, '-[0-9]+$', '') AS kind, state, fence, takeover, reason, count(*) AS n
         FROM ${table(schema)} WHERE key NOT LIKE 'fresh-%' GROUP BY 1, 2, 3, 4, 5 ORDER BY 1`,
    );
    expect(states).toEqual([
      { kind: "expired-keyed", state: "completed", fence: "6", takeover: true, reason: null, n: String(n) },
      { kind: "expired-unkeyed", state: "unknown", fence: "5", takeover: false, reason: "lease_expired", n: String(n) },
      { kind: "past-retention", state: "completed", fence: "6", takeover: false, reason: null, n: String(n) },
      { kind: "released", state: "completed", fence: "6", takeover: false, reason: null, n: String(n) },
    ]);
  });
});
