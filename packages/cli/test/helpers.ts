import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { ConversationStore, Ledger } from "@dispatch-once/core";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createSqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { createRedisLedger } from "@dispatch-once/ledger-redis";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { Redis } from "ioredis";
import pg from "pg";
import { runCli } from "../src/run.js";

const here = dirname(fileURLToPath(import.meta.url));
/** The built bin, run as a user runs it: `node dist/cli.js` (what npm's bin shim does). */
export const BIN = resolve(here, "../dist/cli.js");
export const FIXTURES = join(here, "fixtures");

export const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
export const REDIS_URL = process.env.REDIS_URL ?? "redis://127.0.0.1:6379";

export interface BinResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Run `dispatch-once <args>`; never rejects on a non-zero exit. In this process, through the bin's
 * own entry (`runCli` with the child's stdout, stderr, environment and directory), so that a test
 * costs no node start (about 0.4 s of CPU each, two thirds of this suite's CPU when every command
 * was a child process). What only a real process shows (exit on a closed pipe, `--help` and usage
 * exit codes, the README's command lines, the bin shim) is tested with child processes in
 * pipes.test.ts, usage.test.ts, readme-commands.test.ts and scenario.test.ts (whose --tools modules
 * read their settings from the environment); DISPATCH_ONCE_CLI_TEST_PROCESS=1 runs
 * every test's commands as child processes too.
 */
export async function runBin(args: readonly string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<BinResult> {
  if (process.env["DISPATCH_ONCE_CLI_TEST_PROCESS"] === "1") return runBinProcess(args, options);
  let stdout = "";
  let stderr = "";
  const code = await runCli(args, {
    stdout: (text) => void (stdout += text),
    stderr: (text) => void (stderr += text),
    env: { ...process.env, DISPATCH_ONCE_LEDGER: "", ...options.env },
    cwd: options.cwd ?? here,
  });
  return { code, stdout, stderr };
}

/** Run `dispatch-once <args>` as a child process (`node dist/cli.js`); never rejects on a non-zero exit. */
export function runBinProcess(args: readonly string[], options: { env?: Record<string, string>; cwd?: string } = {}): Promise<BinResult> {
  return new Promise((resolvePromise, reject) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { cwd: options.cwd ?? here, env: { ...process.env, DISPATCH_ONCE_LEDGER: "", ...options.env }, encoding: "utf8", timeout: 60_000 },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : (error as { code?: unknown }).code;
        if (typeof code !== "number") return reject(error);
        resolvePromise({ code, stdout, stderr });
      },
    );
  });
}

/** JSON lines of stdout, parsed. */
export function jsonLines(stdout: string): unknown[] {
  return stdout
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as unknown);
}

export function randomKey(): string {
  return randomBytes(16).toString("hex");
}

/** A real store the tests own: the ledger (for seeding), the CLI arguments that open it, and cleanup. */
export interface Backend {
  name: "sqlite" | "postgres" | "redis";
  ledger: Ledger;
  /** `--ledger ... [--schema|--prefix ...]` */
  args: string[];
  cleanup(): Promise<void>;
}

export async function sqliteBackend(): Promise<Backend> {
  const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-"));
  const path = join(dir, "ledger.db");
  const ledger = createSqliteLedger(path);
  return {
    name: "sqlite",
    ledger,
    args: ["--ledger", path],
    cleanup: async () => {
      await ledger.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export async function postgresBackend(): Promise<Backend> {
  const schema = `do_test_cli_${randomBytes(5).toString("hex")}`;
  const ledger = createPostgresLedger({ connectionString: DATABASE_URL, schema });
  await ledger.migrate();
  return {
    name: "postgres",
    ledger,
    args: ["--ledger", DATABASE_URL, "--schema", schema],
    cleanup: async () => {
      await ledger.close();
      const client = new pg.Client({ connectionString: DATABASE_URL });
      await client.connect();
      try {
        await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      } finally {
        await client.end();
      }
    },
  };
}

export async function redisBackend(): Promise<Backend> {
  const prefix = `do-test-cli-${randomBytes(5).toString("hex")}`;
  const ledger = await createRedisLedger({ url: REDIS_URL, prefix, onUnsafeServer: "warn", onWarning: () => {} });
  return {
    name: "redis",
    ledger,
    args: ["--ledger", REDIS_URL, "--prefix", prefix],
    cleanup: async () => {
      await ledger.close();
      // Only this test's keys: everything under its own random prefix.
      const client = new Redis(REDIS_URL, { lazyConnect: true });
      await client.connect();
      try {
        let cursor = "0";
        do {
          const [next, keys] = await client.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 500);
          if (keys.length > 0) await client.del(...keys);
          cursor = next;
        } while (cursor !== "0");
      } finally {
        client.disconnect();
      }
    },
  };
}

export const BACKENDS = [
  ["sqlite", sqliteBackend],
  ["postgres", postgresBackend],
  ["redis", redisBackend],
] as const;

/** A conversation store for `turns` to read: the store, the CLI's arguments that name it, and its cleanup. */
export interface StoreBackend {
  store: ConversationStore;
  args: string[];
  cleanup(): Promise<void>;
}

export async function sqliteStoreBackend(): Promise<StoreBackend> {
  const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-store-"));
  const path = join(dir, "chat.db");
  const store = createSqliteConversationStore({ path });
  return { store, args: ["--store", path], cleanup: async () => (await store.close(), rmSync(dir, { recursive: true, force: true })) };
}

export async function postgresStoreBackend(): Promise<StoreBackend> {
  const schema = `do_test_cli_store_${randomBytes(5).toString("hex")}`;
  const store = new PostgresConversationStore({ connectionString: DATABASE_URL, schema });
  await store.migrate();
  return {
    store,
    args: ["--store", DATABASE_URL, "--schema", schema],
    cleanup: async () => {
      await store.close();
      const client = new pg.Client({ connectionString: DATABASE_URL });
      await client.connect();
      await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`).finally(() => client.end());
    },
  };
}
