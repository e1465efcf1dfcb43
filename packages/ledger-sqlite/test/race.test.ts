// Several OS processes share one database file and race to claim the same keys. Each key
// must get exactly one winner and exactly one run, asserted from the file itself.
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LedgerUnavailableError } from "@dispatch-once/core";
import { SqliteLedger } from "../src/index.js";
import { rawConnection, startTestProcess, tempDir } from "./helpers.js";

const PROCESSES = 4;
const FRESH = 600; // never seen: the INSERT fast path races
const EXPIRED = 150; // in flight with a dead lease: keyed_write takeover races inside BEGIN IMMEDIATE
const RELEASED = 150; // released with fence 3: re-claim races inside BEGIN IMMEDIATE
const packageDir = fileURLToPath(new URL("..", import.meta.url));

interface WorkerReport {
  pid: number;
  won: { key: string; fence: number; takeover: boolean }[];
  existing: number;
}

let dir: string;
let cleanup: () => void;
beforeAll(() => ({ dir, cleanup } = tempDir("race")));
afterAll(() => cleanup());

describe("multi-process race on one file", () => {
  for (const round of [1, 2]) {
    it(`round ${round}: ${PROCESSES} processes, ${FRESH + EXPIRED * 2 + RELEASED} keys: one winner and one run per claimable key`, async () => {
      const path = join(dir, "race.db");
      const table = `race_${round}`;
      const setup = new SqliteLedger({ path, table });
      const raw = rawConnection(path);
      raw.exec(`CREATE TABLE "${table}_runs" (key TEXT NOT NULL, pid INTEGER NOT NULL, fence INTEGER NOT NULL, request TEXT NOT NULL)`);
      const past = Date.now() - 1000;
      const insert = raw.prepare(
        `INSERT INTO "${table}" (key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, finished_at, expires_at, request)
         VALUES (?, 1, ?, 'send_payment', ?, ?, ?, ?, ?, ?, ?, ?)`,
      );
      // The first claim's request of every pre-existing row: a re-claim or takeover must run with it (LEDGER-21).
      const seeded = (key: string) => `{"first":"${key}"}`;
      const fresh = Array.from({ length: FRESH }, (_, i) => `fresh-${i}`);
      const expiredKeyed = Array.from({ length: EXPIRED }, (_, i) => `expired-${i}`);
      const expiredUnkeyed = Array.from({ length: EXPIRED }, (_, i) => `unkeyed-${i}`);
      const released = Array.from({ length: RELEASED }, (_, i) => `released-${i}`);
      for (const key of expiredKeyed) insert.run(key, "in_flight", "keyed_write", 1, past - 5000, "dead", past, null, null, seeded(key));
      for (const key of expiredUnkeyed) insert.run(key, "in_flight", "unkeyed_write", 1, past - 5000, "dead", past, null, null, seeded(key));
      for (const key of released) insert.run(key, "released", "keyed_write", 3, past - 5000, null, null, past, past + 86_400_000, seeded(key));
      await setup.close();
      const keys = [...fresh, ...expiredKeyed, ...expiredUnkeyed, ...released];
      // Interleave groups so every phase of a worker's walk mixes fast and slow paths.
      const mixed = keys.map((k, i) => [((i * 7919) % keys.length), k] as const).sort((a, b) => a[0] - b[0]).map(([, k]) => k);
      const keysFile = join(dir, `keys-${round}.json`);
      writeFileSync(keysFile, JSON.stringify(mixed));

      const workers = Array.from({ length: PROCESSES }, (_, i) => startTestProcess<WorkerReport>("worker.ts", [path, table, keysFile, String(Math.floor((i * keys.length) / PROCESSES) + i)]));
      await Promise.all(workers.map((w) => w.ready));
      for (const w of workers) w.child.stdin.write("go\n");
      const reports = await Promise.all(workers.map((w) => w.report));

      // From the file: the run log has exactly one run per claimable key and none for unkeyed expired ones.
      const runs = raw.prepare(`SELECT key, pid, fence, request FROM "${table}_runs"`).all() as { key: string; pid: number; fence: number; request: string }[];
      const runsByKey = new Map<string, { pid: number; fence: number; request: string }[]>();
      for (const r of runs) runsByKey.set(r.key, [...(runsByKey.get(r.key) ?? []), r]);
      const claimable = [...fresh, ...expiredKeyed, ...released];
      expect(runs.length).toBe(claimable.length);
      for (const key of claimable) expect(runsByKey.get(key), key).toHaveLength(1);
      for (const key of expiredUnkeyed) expect(runsByKey.get(key), key).toBeUndefined();

      // From the file: every row ended as the single winner left it.
      const rows = new Map(
        (raw.prepare(`SELECT key, state, fence, result, reason, request FROM "${table}"`).all() as {
          key: string;
          state: string;
          fence: number;
          result: string | null;
          reason: string | null;
          request: string | null;
        }[]).map((r) => [r.key, r]),
      );
      const expectedFence = (key: string) => (key.startsWith("fresh") ? 1 : key.startsWith("expired") ? 2 : 4);
      for (const key of claimable) {
        const row = rows.get(key);
        const run = runsByKey.get(key)?.[0];
        expect(row, key).toMatchObject({ state: "completed", fence: expectedFence(key) });
        expect(run?.fence, key).toBe(expectedFence(key));
        expect(JSON.parse(row?.result ?? "null"), key).toEqual({ pid: run?.pid, fence: expectedFence(key) });
        // LEDGER-21: a fresh key stores its winner's request; a re-claimed or taken-over row keeps
        // the first one, and the single run used exactly the stored request.
        const firstRequest = key.startsWith("fresh") ? `{"key":"${key}","pid":${run?.pid}}` : seeded(key);
        expect(row?.request, key).toBe(firstRequest);
        expect(run?.request, key).toBe(firstRequest);
      }
      for (const key of expiredUnkeyed) {
        expect(rows.get(key), key).toMatchObject({ state: "unknown", fence: 1, reason: "lease_expired", request: seeded(key) });
      }

      // The processes' own accounts agree with the file.
      const won = reports.flatMap((r) => r.won);
      expect(won.length).toBe(claimable.length);
      expect(new Set(won.map((w) => w.key)).size).toBe(claimable.length);
      expect(won.filter((w) => w.takeover).map((w) => w.key).sort()).toEqual([...expiredKeyed].sort());
      expect(reports.reduce((n, r) => n + r.existing, 0)).toBe(keys.length * PROCESSES - claimable.length);
      console.log(`round ${round} wins per process: ${reports.map((r) => `${r.pid}=${r.won.length}`).join(" ")}`);
      raw.close();
    });
  }
});

describe("a process killed while it holds the write lock", () => {
  it("blocks others only until it dies, and its uncommitted claim never existed", async () => {
    const path = join(dir, "killed.db");
    const ledger = new SqliteLedger({ path, busyTimeoutMs: 200 });
    // Another process takes the write lock and writes a claim it never commits.
    const holder = spawn(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import Database from "better-sqlite3";
         const db = new Database(process.argv[1]);
         db.exec("BEGIN IMMEDIATE");
         db.prepare("INSERT INTO dispatch_once_ledger (key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at) VALUES ('k', 1, 'in_flight', 'send_payment', 'keyed_write', 7, 0, 'doomed', 9e15)").run();
         process.stdout.write("holding\\n");
         setInterval(() => {}, 1000);`,
        path,
      ],
      { cwd: packageDir },
    );
    let stderr = "";
    holder.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    await new Promise<void>((resolve, reject) => {
      holder.stdout.setEncoding("utf8").on("data", (chunk: string) => chunk.includes("holding") && resolve());
      holder.on("exit", (code) => reject(new Error(`lock holder exited ${code}: ${stderr}`)));
    });
    try {
      await expect(ledger.claim({ key: "k", toolName: "send_payment", effect: "keyed_write", owner: "a", leaseMs: 1000, request: "{}" })).rejects.toBeInstanceOf(
        LedgerUnavailableError,
      );
    } finally {
      const exited = new Promise((resolve) => holder.once("exit", resolve));
      holder.kill("SIGKILL");
      await exited;
    }
    const claim = await ledger.claim({ key: "k", toolName: "send_payment", effect: "keyed_write", owner: "b", leaseMs: 1000, request: "{}" });
    expect(claim).toMatchObject({ outcome: "claimed", fence: 1 });
    const raw = rawConnection(path);
    expect(raw.prepare("SELECT fence, owner FROM dispatch_once_ledger WHERE key = 'k'").all()).toEqual([{ fence: 1, owner: "b" }]);
    raw.close();
    await ledger.close();
  });
});
