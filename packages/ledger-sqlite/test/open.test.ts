// A fleet of processes starting together on a database file that does not exist yet: every one
// must open (journal mode, schema and statements set up under SQLite's locks, waiting within the
// busy timeout) and the claims that follow must still have exactly one winner per key.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isDispatchOnceError } from "@dispatch-once/core";
import { SqliteLedger } from "../src/index.js";
import { rawConnection, startTestProcess, tempDir } from "./helpers.js";

const PROCESSES = 8;
const KEYS = 40;
const ROUNDS = 2;
const packageDir = fileURLToPath(new URL("..", import.meta.url));

interface OpenReport {
  pid: number;
  openError?: { code?: string; message?: string };
  openMs?: number;
  won?: { key: string; fence: number }[];
  existing?: number;
  durability?: string;
  journalMode?: string;
}

let dir: string;
let cleanup: () => void;
beforeAll(() => ({ dir, cleanup } = tempDir("open")));
afterAll(() => cleanup());

describe("first open of a new file by a fleet (LEDGER-12: unavailable only past the documented bound)", () => {
  for (let round = 1; round <= ROUNDS; round++) {
    it(`round ${round}: ${PROCESSES} processes open a new file at once; all open, one winner per key`, async () => {
      const path = join(dir, `fleet-${round}.db`);
      expect(existsSync(path)).toBe(false);
      const table = "dispatch_once_ledger";
      const openers = Array.from({ length: PROCESSES }, () => startTestProcess<OpenReport>("opener.ts", [path, table, String(KEYS)]));
      await Promise.all(openers.map((o) => o.ready));
      for (const o of openers) o.child.stdin.write("go\n");
      const reports = await Promise.all(openers.map((o) => o.report));

      const failed = reports.filter((r) => r.openError !== undefined);
      expect(failed.map((r) => `${r.pid}: ${r.openError?.code} ${r.openError?.message}`)).toEqual([]);
      for (const r of reports) expect(r).toMatchObject({ durability: "durable", journalMode: "wal" });

      // One winner per key, from the processes' accounts and from the file.
      const won = reports.flatMap((r) => r.won ?? []);
      expect(won.map((w) => w.key).sort()).toEqual(Array.from({ length: KEYS }, (_, i) => `k-${i}`).sort());
      expect(won.every((w) => w.fence === 1)).toBe(true);
      expect(reports.reduce((n, r) => n + (r.existing ?? 0), 0)).toBe(KEYS * (PROCESSES - 1));
      const raw = rawConnection(path);
      const rows = raw.prepare(`SELECT key, state, fence, result FROM "${table}" ORDER BY key`).all() as {
        key: string;
        state: string;
        fence: number;
        result: string;
      }[];
      raw.close();
      expect(rows).toHaveLength(KEYS);
      const winner = new Map(won.map((w) => [w.key, reports.find((r) => r.won?.some((x) => x.key === w.key))?.pid]));
      for (const row of rows) {
        expect(row, row.key).toMatchObject({ state: "completed", fence: 1 });
        expect(JSON.parse(row.result), row.key).toEqual({ pid: winner.get(row.key) });
      }
      const slowest = Math.max(...reports.map((r) => r.openMs ?? 0));
      console.log(`round ${round}: all ${PROCESSES} opened; slowest open ${slowest.toFixed(0)} ms`);
    });
  }
});

/**
 * Another process creates the new file and holds its write lock (as a fleet member does while it
 * sets the file up). Turning the file to WAL then needs a lock upgrade that SQLite refuses AT
 * ONCE, without calling the busy handler; the ledger must wait for it within busyTimeoutMs.
 */
async function holdWriteLockOnNewFile(path: string, holdMs: number | "forever"): Promise<{ done: Promise<void>; kill: () => Promise<void> }> {
  const holder = spawn(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      `import Database from "better-sqlite3";
       const db = new Database(process.argv[1]);
       db.exec("BEGIN IMMEDIATE");
       db.exec("CREATE TABLE fleet_member_setup (x)");
       process.stdout.write("holding\\n");
       const hold = process.argv[2];
       if (hold === "forever") setInterval(() => {}, 1000);
       else setTimeout(() => { db.exec("COMMIT"); db.close(); process.exit(0); }, Number(hold));`,
      path,
      String(holdMs),
    ],
    { cwd: packageDir },
  );
  let stderr = "";
  holder.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const done = new Promise<void>((resolve) => holder.once("exit", () => resolve()));
  await new Promise<void>((resolve, reject) => {
    holder.stdout.setEncoding("utf8").on("data", (chunk: string) => chunk.includes("holding") && resolve());
    holder.once("exit", (code) => reject(new Error(`lock holder exited ${code}: ${stderr}`)));
  });
  return {
    done,
    kill: async () => {
      holder.kill("SIGKILL");
      await done;
    },
  };
}

describe("first open while another process holds the new file's write lock", () => {
  it("waits for the lock (within busyTimeoutMs) instead of failing at once with database is locked", async () => {
    const path = join(dir, "held-briefly.db");
    const holder = await holdWriteLockOnNewFile(path, 600);
    const started = performance.now();
    let ledger: SqliteLedger | undefined;
    try {
      ledger = new SqliteLedger({ path }); // default busyTimeoutMs: 5000
    } catch (error) {
      const waited = performance.now() - started;
      throw new Error(`open failed after ${waited.toFixed(0)} ms: ${(error as Error).message}`, { cause: error });
    } finally {
      await holder.done;
    }
    const waited = performance.now() - started;
    expect(waited).toBeGreaterThan(300); // it did wait for the holder...
    expect(waited).toBeLessThan(5000); // ...and no longer than the bound
    expect(String(ledger.database.pragma("journal_mode", { simple: true }))).toBe("wal");
    expect(ledger.capabilities.durability).toBe("durable");
    await expect(ledger.claim({ key: "k", toolName: "t", effect: "unkeyed_write", owner: "a", leaseMs: 1000, request: "{}" })).resolves.toMatchObject({
      outcome: "claimed",
      fence: 1,
    });
    const raw = rawConnection(path);
    expect(raw.prepare("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name").pluck().all()).toEqual([
      "dispatch_once_ledger",
      "dispatch_once_ledger_audit",
      "dispatch_once_ledger_retired",
      "fleet_member_setup",
    ]);
    raw.close();
    await ledger.close();
  });

  it("gives up with ledger_unavailable once busyTimeoutMs has passed in total, not at once and not much later", async () => {
    const path = join(dir, "held-forever.db");
    const holder = await holdWriteLockOnNewFile(path, "forever");
    const started = performance.now();
    let error: unknown;
    try {
      new SqliteLedger({ path, busyTimeoutMs: 400 });
    } catch (caught) {
      error = caught;
    } finally {
      await holder.kill();
    }
    const waited = performance.now() - started;
    expect(isDispatchOnceError(error, "ledger_unavailable"), String(error)).toBe(true);
    expect((error as Error).message).toMatch(/database is locked.*busyTimeoutMs = 400 ms/);
    expect((error as { cause?: { code?: string } }).cause?.code).toMatch(/^SQLITE_BUSY/);
    expect(waited).toBeGreaterThanOrEqual(390);
    expect(waited).toBeLessThan(400 + 600); // each attempt's own busy wait counts against the same bound
    console.log(`gave up after ${waited.toFixed(0)} ms (bound 400 ms)`);
  });
});
