// Opening a store on a file another process is writing to or setting up (a fleet starting
// together on a new file): the first open waits for the lock, bounded by busyTimeoutMs in total.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { join } from "node:path";
import { isDispatchOnceError } from "@dispatch-once/core";
import { SqliteConversationStore } from "../src/index.js";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { packageDir, rawConnection, tempDir } from "./helpers.js";

/** Another process that takes the file's write lock and commits after `ms` (never when undefined). */
function holdWriteLock(path: string, ms: number | undefined): ChildProcessWithoutNullStreams {
  return spawn(
    process.execPath,
    [
      "--input-type=module",
      "-e",
      `import Database from "better-sqlite3";
       const db = new Database(process.argv[1]);
       db.exec("BEGIN IMMEDIATE");
       db.exec("INSERT INTO other VALUES (1)");
       process.stdout.write("holding\\n");
       const ms = Number(process.argv[2]);
       if (ms >= 0) setTimeout(() => { db.exec("COMMIT"); db.close(); process.exit(0); }, ms);
       else setInterval(() => {}, 1000);`,
      path,
      String(ms ?? -1),
    ],
    { cwd: packageDir },
  );
}

let dir: string;
let cleanup: () => void;
beforeAll(() => ({ dir, cleanup } = tempDir("open")));
afterAll(() => cleanup());

describe("first open of a file whose write lock another connection holds", () => {
  it("waits for the lock (within busyTimeoutMs) instead of failing at once with database is locked", async () => {
    const path = join(dir, "held-briefly.db");
    // A new file (not yet WAL) whose write lock another process holds for 300 ms (another
    // process: the constructor blocks this thread while it waits).
    const setup = rawConnection(path);
    setup.exec("CREATE TABLE other (x INTEGER)");
    setup.close();
    const child = holdWriteLock(path, 300);
    await new Promise<void>((resolve, reject) => {
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => chunk.includes("holding") && resolve());
      child.on("exit", (code) => code !== 0 && reject(new Error(`holder exited ${code}`)));
    });
    const started = performance.now();
    const store = new SqliteConversationStore({ path, busyTimeoutMs: 5_000 });
    const waited = performance.now() - started;
    expect(store.capabilities.durability).toBe("durable");
    expect(waited).toBeLessThan(5_000);
    await store.appendUserMessage("c", { id: "m1", content: "after the lock" });
    expect((await store.message("c", "m1"))?.content).toBe("after the lock");
    await store.close();
  });

  it("gives up with store_unavailable once busyTimeoutMs has passed in total", async () => {
    const path = join(dir, "held-for-good.db");
    const setup = rawConnection(path);
    setup.exec("CREATE TABLE other (x INTEGER)");
    setup.close();
    const child = holdWriteLock(path, undefined);
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => chunk.includes("holding") && resolve());
        child.on("exit", (code) => reject(new Error(`holder exited ${code}`)));
      });
      const started = performance.now();
      let error: unknown;
      try {
        new SqliteConversationStore({ path, busyTimeoutMs: 400 });
      } catch (e) {
        error = e;
      }
      const waited = performance.now() - started;
      expect(isDispatchOnceError(error, "store_unavailable"), String(error)).toBe(true);
      expect(waited).toBeGreaterThanOrEqual(380);
      expect(waited).toBeLessThan(2_000);
    } finally {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGKILL");
      await exited;
    }
  });
});
