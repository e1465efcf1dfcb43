// A target that is not what the operator meant: the CLI says so, and changes nothing in it.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Database from "better-sqlite3";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { EXIT_CODES } from "../src/index.js";
import { DATABASE_URL, REDIS_URL, randomKey, redisBackend, runBin } from "./helpers.js";

function tablesOf(path: string): string[] {
  const db = new Database(path, { readonly: true });
  try {
    return (db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all() as { name: string }[]).map((r) => r.name);
  } finally {
    db.close();
  }
}

describe("a SQLite file the CLI is pointed at is never migrated", () => {
  let dir: string;
  let ledgerPath: string;
  let otherPath: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-targets-"));
    ledgerPath = join(dir, "ledger.db");
    await createSqliteLedger(ledgerPath).close();
    otherPath = join(dir, "other.db");
    const other = new Database(otherPath);
    other.exec("CREATE TABLE invoices (id TEXT)");
    other.close();
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("a --table the file does not have (a typo) is an error naming it, not an empty listing, and no table is created", async () => {
    const before = tablesOf(ledgerPath);
    const result = await runBin(["list", "--ledger", ledgerPath, "--table", "tool_call", "--state", "unknown"]);
    expect(result.code, result.stdout).toBe(EXIT_CODES.error);
    expect(result.stderr).toContain("no such table: tool_call");
    expect(result.stdout).toBe("");
    expect(tablesOf(ledgerPath)).toEqual(before);
  });

  it("a SQLite file that is not a ledger (the wrong file) gets no ledger tables", async () => {
    for (const args of [["list"], ["sweep"], ["resolve", "0".repeat(32), "--not-performed", "--reason", "x", "--retention", "1d", "--current-fence"]]) {
      const result = await runBin([...args, "--ledger", otherPath]);
      expect(result.code, `${args[0]}: ${result.stderr}`).toBe(EXIT_CODES.error);
      expect(result.stderr).toContain("no such table: dispatch_once_ledger");
    }
    expect(tablesOf(otherPath)).toEqual(["invoices"]);
  });

  it("turns --store on a file without conversation tables (the ledger file, by mistake) is an error, and creates none", async () => {
    const before = tablesOf(ledgerPath);
    const result = await runBin(["turns", "--failed", "--store", ledgerPath]);
    expect(result.code, result.stderr).toBe(EXIT_CODES.error);
    expect(result.stderr).toContain("no such table");
    expect(tablesOf(ledgerPath)).toEqual(before);
  });
});

describe("an option that does not apply to the target is refused, not ignored", () => {
  // Unreachable servers and a missing file: each is refused (exit 2) before anything is opened.
  it.each([
    [["list", "--ledger", "redis://127.0.0.1:1", "--table", "billing"], "--table does not apply to a Redis ledger (it takes --prefix)"],
    [["list", "--ledger", "redis://127.0.0.1:1", "--schema", "billing"], "--schema does not apply to a Redis ledger (it takes --prefix)"],
    [["list", "--ledger", "/nonexistent/ledger.db", "--prefix", "billing"], "--prefix does not apply to a SQLite ledger (it takes --table)"],
    [["list", "--ledger", "/nonexistent/ledger.db", "--schema", "billing"], "--schema does not apply to a SQLite ledger (it takes --table)"],
    [["inspect", "k", "--ledger", "postgres://postgres@127.0.0.1:1/test", "--prefix", "billing"], "--prefix does not apply to a PostgreSQL ledger (it takes --schema, --table)"],
    [["turns", "--failed", "--store", "/nonexistent/chat.db", "--schema", "chat"], "--schema does not apply to a SQLite conversation store (it takes --table-prefix)"],
  ])("%j exits 2: %s", async (args, message) => {
    const result = await runBin(args);
    expect(result.code, result.stderr).toBe(EXIT_CODES.usage);
    expect(result.stderr).toContain(message);
  });

  it("list under a Redis prefix that holds no row says so and names the prefix (adoption trial 2: a typo in --prefix printed only '0 rows')", async () => {
    const empty = await runBin(["list", "--ledger", REDIS_URL, "--prefix", "do-test-cli-none", "--state", "unknown"]);
    expect(empty.code, empty.stderr).toBe(0);
    expect(empty.stdout).toBe("");
    expect(empty.stderr).toContain('no row at all under prefix "do-test-cli-none"');
    // Or the server lost them (ops game day, incident 1: after a Redis restart it only said "check --prefix").
    expect(empty.stderr).toContain("or the server lost them");
    expect(empty.stderr).toContain("After a Redis restart");
    const json = await runBin(["list", "--ledger", REDIS_URL, "--prefix", "do-test-cli-none", "--json"]);
    expect(json.stdout).toBe("");
    expect(json.stderr).toContain('no row at all under prefix "do-test-cli-none"');
    const backend = await redisBackend();
    try {
      await backend.ledger.claim({ key: randomKey(), toolName: "pay", effect: "keyed_write", owner: "o", leaseMs: 60_000, request: "{}" });
      const filtered = await runBin(["list", ...backend.args, "--state", "unknown"]);
      expect(filtered.code, filtered.stderr).toBe(0);
      expect(filtered.stderr).toContain("0 rows");
      expect(filtered.stderr).not.toContain("no row at all");
    } finally {
      await backend.cleanup();
    }
  });

  it("the options that do apply still work: --prefix on Redis, --schema and --table on PostgreSQL", async () => {
    const redis = await runBin(["list", "--ledger", REDIS_URL, "--prefix", "do-test-cli-none"]);
    expect(redis.code, redis.stderr).toBe(0);
    const postgres = await runBin(["list", "--ledger", DATABASE_URL, "--schema", "do_test_cli_none", "--table", "t"]);
    expect(postgres.stderr).toContain('relation "do_test_cli_none.t" does not exist');
  });
});
