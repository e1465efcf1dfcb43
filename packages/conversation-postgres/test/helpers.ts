import { randomBytes } from "node:crypto";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { compiledEntry } from "@dispatch-once/test-processes";

/** The test server; connecting fails loudly when it is missing: these tests are never skipped. */
export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";

/** A schema no one else uses: every test file and fixture gets its own, and drops only that. */
export function uniqueSchema(tag: string): string {
  return `do_conv_test_${tag}_${randomBytes(5).toString("hex")}`;
}

/** A pool for the tests' own direct SQL. */
export function adminPool(max = 4): pg.Pool {
  const pool = new pg.Pool({ connectionString: DATABASE_URL, max, connectionTimeoutMillis: 10_000 });
  pool.on("error", () => {});
  return pool;
}

export async function dropSchema(pool: pg.Pool, schema: string): Promise<void> {
  if (!schema.startsWith("do_conv_test_")) throw new Error(`refusing to drop ${schema}: not a test schema`);
  await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
}

/** A loopback port with nothing listening on it (bound to port 0, then closed). */
export async function closedPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      if (address === null || typeof address === "string") return reject(new Error("no port"));
      server.close(() => resolve(address.port));
    });
  });
}

export const packageDir = fileURLToPath(new URL("..", import.meta.url));

/** A child process running a TypeScript worker: prints "ready", waits for "go", prints one JSON report last. */
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
  report.catch(() => markReady());
  return { child, ready, report };
}
