import Database from "better-sqlite3";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ClaimRequest } from "@dispatch-once/core";
import { compiledEntry } from "@dispatch-once/test-processes";

/** A fresh directory for one test's database files; removed by the returned cleanup. */
export function tempDir(label: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `ledger-sqlite-${label}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A second, independent connection to the same file: assertions read the store, not the adapter. */
export function rawConnection(path: string): Database.Database {
  const db = new Database(path, { timeout: 5000 });
  db.pragma("journal_mode = WAL");
  return db;
}

export interface StoredRow {
  key: string;
  v: number;
  state: string;
  tool_name: string;
  effect: string;
  fence: number;
  claimed_at: number;
  owner: string | null;
  lease_expires_at: number | null;
  result: string | null;
  error: string | null;
  reason: string | null;
  finished_at: number | null;
  expires_at: number | null;
  request: string | null;
}

const COLUMNS =
  "key, v, state, tool_name, effect, fence, claimed_at, owner, lease_expires_at, result, error, reason, finished_at, expires_at, request";

export function selectRow(db: Database.Database, table: string, key: string): StoredRow | undefined {
  return db.prepare(`SELECT ${COLUMNS} FROM "${table}" WHERE key = ?`).get(key) as StoredRow | undefined;
}

/** The row's place in claim order (the rowid sweep walks). */
export function seqOf(db: Database.Database, table: string, key: string): number | undefined {
  return db.prepare(`SELECT seq FROM "${table}" WHERE key = ?`).pluck().get(key) as number | undefined;
}

/** The stored bytes of the result column, as SQLite holds them (not decoded by any JS string path). */
export function resultBytes(db: Database.Database, table: string, key: string): Buffer | undefined {
  return columnBytes(db, table, key, "result");
}

/** The stored bytes of a text column (result or request), as SQLite holds them. */
export function columnBytes(db: Database.Database, table: string, key: string, column: "result" | "request"): Buffer | undefined {
  const row = db.prepare(`SELECT CAST(${column} AS BLOB) AS bytes FROM "${table}" WHERE key = ?`).get(key) as
    | { bytes: Buffer | null }
    | undefined;
  return row?.bytes ?? undefined;
}

/** A controllable process clock, so leases and retention expire without sleeping. */
export function manualClock(start = 1_700_000_000_000): { now: () => number; advance: (ms: number) => void; set: (ms: number) => void } {
  let t = start;
  return { now: () => t, advance: (ms) => (t += ms), set: (ms) => (t = ms) };
}

/** The request text the helpers claim with unless told otherwise. */
export const REQUEST = '{"amount":1250,"to":"acct_1"}';

export function request(key: string, over: Partial<ClaimRequest> = {}): ClaimRequest {
  return { key, toolName: "send_payment", effect: "keyed_write", owner: "attempt-1", leaseMs: 30_000, request: REQUEST, ...over };
}

/**
 * One test process (a script under test/race/, compiled to JavaScript by compiledEntry and run by node): it prints
 * "ready" once loaded and waits for "go" on stdin; its last stdout line is its JSON report. A
 * process that dies before "ready" settles `ready` too, so the test fails instead of hanging.
 */
export function startTestProcess<T>(script: string, args: string[]): { child: ChildProcessWithoutNullStreams; ready: Promise<void>; report: Promise<T> } {
  const packageDir = fileURLToPath(new URL("..", import.meta.url));
  const child = spawn(process.execPath, [compiledEntry(fileURLToPath(new URL(`./race/${script}`, import.meta.url))), ...args], { cwd: packageDir });
  let stdout = "";
  let stderr = "";
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    if (stdout.startsWith("ready\n")) markReady();
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const report = new Promise<T>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`${script} exited ${code}: ${stderr}`));
      resolve(JSON.parse(stdout.trim().split("\n").at(-1) ?? "") as T);
    });
  });
  report.catch(() => markReady());
  return { child, ready, report };
}
