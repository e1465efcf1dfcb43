// The rows `resolve` and `reconcile` finish are kept for the retention the operator states, the
// application's (LEDGER-13): read back from each real store, not from what the CLI prints.
import { join } from "node:path";
import type { Ledger } from "@dispatch-once/core";
import type { RedisLedger } from "@dispatch-once/ledger-redis";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKENDS, DATABASE_URL, FIXTURES, REDIS_URL, randomKey, runBin, type Backend } from "./helpers.js";

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const PROBE_TOOLS = join(FIXTURES, "probe-tools.mjs");

/** A row of the application's: claimed, then unknown (or left in flight with a lease that has run out). */
async function seed(ledger: Ledger, state: "unknown" | "expired_in_flight"): Promise<{ key: string; fence: number }> {
  const key = randomKey();
  const claim = await ledger.claim({
    key,
    toolName: "create_invoice",
    effect: "unkeyed_write",
    owner: "app-worker",
    leaseMs: state === "unknown" ? 60_000 : 1,
    request: JSON.stringify({ customer: "acme", amount: 4200, currency: "EUR" }),
  });
  if (claim.outcome !== "claimed") throw new Error("seed claim not claimed");
  if (state === "unknown") await ledger.markUnknown(key, claim.fence, "tool_error");
  else await new Promise((resolve) => setTimeout(resolve, 20));
  return { key, fence: claim.fence };
}

/**
 * The deadline the store keeps for a finished row, read from the store itself: SQLite's and
 * PostgreSQL's `finished_at` and `expires_at` columns; Redis's row TTL (PTTL, on the server's
 * clock) and its audit list's, measured from the row's finishedAt.
 */
async function storedRetention(backend: Backend, key: string): Promise<{ row: number; audit?: number }> {
  switch (backend.name) {
    case "sqlite": {
      const db = new Database(backend.args[1] as string, { readonly: true });
      try {
        const raw = db.prepare("SELECT finished_at, expires_at FROM dispatch_once_ledger WHERE key = ?").get(key) as { finished_at: number; expires_at: number };
        return { row: raw.expires_at - raw.finished_at };
      } finally {
        db.close();
      }
    }
    case "postgres": {
      const schema = backend.args[backend.args.indexOf("--schema") + 1] as string;
      const client = new pg.Client({ connectionString: DATABASE_URL });
      await client.connect();
      try {
        const { rows } = await client.query<{ finished_at: string; expires_at: string }>(`SELECT finished_at, expires_at FROM "${schema}".dispatch_once_ledger WHERE key = $1`, [key]);
        return { row: Number(rows[0]!.expires_at) - Number(rows[0]!.finished_at) };
      } finally {
        await client.end();
      }
    }
    case "redis": {
      const ledger = backend.ledger as RedisLedger;
      const finishedAt = (await ledger.lookup(key)) as { finishedAt: number };
      const client = new Redis(REDIS_URL, { lazyConnect: true });
      await client.connect();
      try {
        const [seconds, micros] = await client.time();
        const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
        const row = await client.pttl(ledger.redisKey(key));
        const audit = await client.pttl(ledger.auditKey(key));
        return { row: now + row - finishedAt.finishedAt, audit: now + audit - finishedAt.finishedAt };
      } finally {
        client.disconnect();
      }
    }
  }
}

/** Exact on SQL stores (both times are written by one statement); within the round trips on Redis. */
function expectRetention(backend: Backend, stored: { row: number; audit?: number }, expected: number): void {
  if (backend.name === "redis") {
    expect(Math.abs(stored.row - expected), `row TTL ${stored.row} vs ${expected}`).toBeLessThan(5_000);
    expect(Math.abs((stored.audit ?? 0) - expected), `audit TTL ${stored.audit} vs ${expected}`).toBeLessThan(5_000);
  } else {
    expect(stored.row).toBe(expected);
  }
}

describe.each(BACKENDS)("resolve and reconcile keep the rows they finish for the stated retention on %s (LEDGER-13)", (_name, open) => {
  let backend: Backend;
  let run: (args: string[], env?: Record<string, string>) => ReturnType<typeof runBin>;

  beforeAll(async () => {
    backend = await open();
    run = (args, env) => runBin([...args, ...backend.args, ...(args[0] === "resolve" ? ["--current-fence"] : [])], { env: { DISPATCH_ONCE_RETENTION: "", ...env } });
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("resolve --retention 7d: the resolved row's stored deadline is its finish time plus 7 days", async () => {
    const row = await seed(backend.ledger, "unknown");
    const result = await run(["resolve", row.key, "--completed", '{"invoiceId":"inv_7"}', "--reason", "found inv_7", "--retention", "7d"]);
    expect(result.code, result.stderr).toBe(0);
    expectRetention(backend, await storedRetention(backend, row.key), 7 * DAY);
  });

  it("resolve of an expired in-flight row takes the retention from DISPATCH_ONCE_RETENTION", async () => {
    const row = await seed(backend.ledger, "expired_in_flight");
    const result = await run(["resolve", row.key, "--failed", "declined", "--reason", "bank log", "--grace", "0s"], { DISPATCH_ONCE_RETENTION: "3d" });
    expect(result.code, result.stderr).toBe(0);
    expectRetention(backend, await storedRetention(backend, row.key), 3 * DAY);
  });

  it("resolve --not-performed --retention 30d keeps the released row (and so its request) 30 days", async () => {
    const row = await seed(backend.ledger, "unknown");
    const result = await run(["resolve", row.key, "--not-performed", "--reason", "no trace", "--grace", "0s", "--retention", "30d"]);
    expect(result.code, result.stderr).toBe(0);
    expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "released" });
    expectRetention(backend, await storedRetention(backend, row.key), 30 * DAY);
  });

  it("reconcile --retention 14d: the row the probe settles keeps 14 days", async () => {
    const row = await seed(backend.ledger, "unknown");
    const result = await run(["reconcile", row.key, "--tools", PROBE_TOOLS, "--actor", "dana", "--retention", "14d"]);
    expect(result.code, result.stderr).toBe(0);
    expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "completed", result: '{"invoiceId":"inv_probe"}' });
    expectRetention(backend, await storedRetention(backend, row.key), 14 * DAY);
  });

  it.each([
    [["resolve", "--not-performed", "--reason", "checked"]],
    [["reconcile", "--tools", PROBE_TOOLS]],
  ])("%j without --retention or DISPATCH_ONCE_RETENTION is refused (exit 2) and the row is untouched", async (args) => {
    const row = await seed(backend.ledger, "unknown");
    const [command, ...rest] = args;
    const result = await run([command as string, row.key, ...rest]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain("--retention <age> is required");
    expect(result.stderr).toContain("DISPATCH_ONCE_RETENTION");
    expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "unknown", fence: row.fence });
  });

  it("a retention under 1h (a unit slip: 7m for 7d) is refused before anything is written (exit 2)", async () => {
    const row = await seed(backend.ledger, "unknown");
    const result = await run(["resolve", row.key, "--not-performed", "--reason", "checked", "--retention", "7m"]);
    expect(result.code, result.stderr).toBe(2);
    expect(result.stderr).toContain("--retention must be at least 1h");
    expect(await backend.ledger.lookup(row.key)).toMatchObject({ state: "unknown", fence: row.fence });
  });
});
