import Database from "better-sqlite3";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { compiledEntry } from "@dispatch-once/test-processes";

/** A fresh directory on the real temp filesystem; removed by the returned cleanup. */
export function tempDir(label: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), `conversation-sqlite-${label}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A second, independent connection to the same file: assertions read the store, not the adapter. */
export function rawConnection(path: string): Database.Database {
  return new Database(path, { timeout: 5000 });
}

export const packageDir = fileURLToPath(new URL("..", import.meta.url));

/**
 * A child process running a TypeScript worker (compiled to JavaScript first: compiledEntry). It prints "ready", waits for
 * "go" on stdin, and prints one JSON report as its last line.
 */
export function startWorker<R>(workerPath: string, args: string[]): { child: ChildProcessWithoutNullStreams; ready: Promise<void>; report: Promise<R> } {
  const child = spawn(process.execPath, [compiledEntry(workerPath), ...args], { cwd: packageDir });
  let stdout = "";
  let stderr = "";
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
    stdout += chunk;
    if (stdout.startsWith("ready\n")) markReady();
  });
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const report = new Promise<R>((resolve, reject) => {
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) return reject(new Error(`worker exited ${code}: ${stderr}`));
      resolve(JSON.parse(stdout.trim().split("\n").at(-1) ?? "") as R);
    });
  });
  // A worker that dies before "ready" must fail the test, not hang it.
  report.catch(() => markReady());
  return { child, ready, report };
}
