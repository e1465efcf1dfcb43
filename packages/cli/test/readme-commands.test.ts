// Every `dispatch-once ...` line of the README's shell examples, run as written by sh in a
// directory that holds what they name (./ledger.db, ./chat.db, ./dist/tools.mjs). Only the hosts
// are swapped for this machine's (postgres://app@db/app, redis://cache:6379, /var/lib/app/): the
// rest, keys, quoting and options included, is the README's text.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Ledger } from "@dispatch-once/core";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createSqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BIN, DATABASE_URL, REDIS_URL } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));
const README = readFileSync(join(here, "..", "README.md"), "utf8");
/** The key the README's inspect, resolve and reconcile examples name. */
const KEY = "9b0e6c1f2d3a4b5c6d7e8f9012345678";

/** The `dispatch-once` command lines of the README's sh blocks, as written. */
function readmeCommands(): string[] {
  const lines: string[] = [];
  for (const block of README.matchAll(/^```sh\n([\s\S]*?)^```/gm)) {
    for (const line of (block[1] ?? "").split("\n")) {
      if (/^(npx )?dispatch-once /.test(line)) lines.push(line);
    }
  }
  return lines;
}

/** An unknown create_invoice row under KEY at fence 3 (the README's --expected-fence 3), as the application leaves it. */
async function seedUnknown(ledger: Ledger): Promise<void> {
  const request = JSON.stringify({ customer: "acme", amount: 4200, currency: "EUR" });
  const claim = () => ledger.claim({ key: KEY, toolName: "create_invoice", effect: "unkeyed_write", owner: "app", leaseMs: 60_000, request, conversationId: "conv_8f2", turnIndex: 1 });
  for (let i = 0; i < 2; i++) {
    const c = await claim();
    if (c.outcome !== "claimed") throw new Error("seed not claimed");
    await ledger.release(KEY, c.fence);
  }
  const c = await claim();
  if (c.outcome !== "claimed" || c.fence !== 3) throw new Error("seed not at fence 3");
  await ledger.markUnknown(KEY, c.fence, "tool_error");
}

describe("the README's commands, run verbatim", () => {
  const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-readme-"));
  const database = `do_test_cli_readme_${randomBytes(4).toString("hex")}`;
  const databaseUrl = DATABASE_URL.replace(/\/[^/]*$/, `/${database}`);
  let payments: MockPaymentsServer;
  let admin: pg.Client;

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: DATABASE_URL });
    await admin.connect();
    await admin.query(`CREATE DATABASE "${database}"`);
    // The application's stores: it migrates them, not the CLI.
    const pgLedger = createPostgresLedger({ connectionString: databaseUrl });
    await pgLedger.migrate();
    await pgLedger.close();
    const chat = new PostgresConversationStore({ connectionString: databaseUrl, schema: "chat" });
    await chat.migrate();
    await chat.close();
    await createSqliteConversationStore({ path: join(dir, "chat.db") }).close();
    mkdirSync(join(dir, "var-lib-app"));
    await createSqliteLedger(join(dir, "var-lib-app", "ledger.db")).close();
    // The application's dependencies, which its tools module imports (@dispatch-once/core, zod).
    symlinkSync(join(here, "..", "node_modules"), join(dir, "node_modules"), "dir");
    mkdirSync(join(dir, "dist"));
    copyFileSync(join(here, "..", "examples", "tools.mjs"), join(dir, "dist", "tools.mjs"));
    // `dispatch-once` on PATH, as npm's bin link puts it there.
    mkdirSync(join(dir, "bin"));
    writeFileSync(join(dir, "bin", "dispatch-once"), `#!/bin/sh\nexec "${process.execPath}" "${BIN}" "$@"\n`, { mode: 0o755 });
    payments = await startMockPayments();
  });
  afterAll(async () => {
    await payments?.close();
    await admin.query(`DROP DATABASE IF EXISTS "${database}" WITH (FORCE)`);
    await admin.end();
    rmSync(dir, { recursive: true, force: true });
  });

  it("has the examples this test runs", () => {
    expect(readmeCommands().length).toBeGreaterThanOrEqual(14);
  });

  it.each(readmeCommands())("%s", async (line) => {
    // A fresh ledger file for each line: the resolve examples each settle the same row.
    rmSync(join(dir, "ledger.db"), { force: true });
    // Left unknown by the application two minutes ago: past resolve's and reconcile's grace.
    const ledger = createSqliteLedger({ path: join(dir, "ledger.db"), now: () => Date.now() - 120_000 });
    await seedUnknown(ledger);
    await ledger.close();
    // The invoice the README's reconcile probe searches for (tools.mjs puts the key in the memo).
    await fetch(`${payments.url}/v1/invoices`, {
      method: "POST",
      headers: { authorization: "Bearer acct_demo", "content-type": "application/json" },
      body: JSON.stringify({ customer: "acme", amount: 4200, currency: "EUR", memo: `[dispatch-once ${KEY}]` }),
    });
    const command = line
      .replace(/^npx /, "")
      .replaceAll("postgres://app@db/app", databaseUrl)
      .replaceAll("redis://cache:6379", REDIS_URL)
      .replaceAll("/var/lib/app/", `${join(dir, "var-lib-app")}/`);
    const result = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      execFile(
        "/bin/sh",
        ["-c", command],
        { cwd: dir, env: { ...process.env, PATH: `${join(dir, "bin")}:${process.env.PATH}`, DISPATCH_ONCE_LEDGER: "", DISPATCH_ONCE_RETENTION: "", BILLING_URL: payments.url }, encoding: "utf8", timeout: 60_000 },
        (error, stdout, stderr) => resolve({ code: error === null ? 0 : Number((error as { code?: unknown }).code), stdout, stderr }),
      );
    });
    expect(result.code, `${command}\n${result.stderr}`).toBe(0);
  });
});
