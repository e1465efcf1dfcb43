// Findings of the adoption trial (part 2) for the CLI's flags.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { EXIT_CODES } from "../src/index.js";
import { runBin } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-adopt-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("adoption trial (cli): a flag the conversation store refuses is a usage error", () => {
  it.each([[""], ["a;drop"], ["x".repeat(41)]])("turns --table-prefix %j exits 2 (usage) with invalid_store_input, as --table does for a ledger (was 1, 'error: the store failed')", async (prefix) => {
    const path = join(dir, "chat.db");
    await new SqliteConversationStore({ path }).close();
    const result = await runBin(["turns", "--failed", "--store", path, "--table-prefix", prefix]);
    expect(result.code, result.stderr).toBe(EXIT_CODES.usage);
    expect(result.stderr).toContain("tablePrefix");
    expect(result.stderr).toContain("[invalid_store_input]");
  });
});

describe("adoption trial (cli): a duration too long for the ledger is refused naming its flag", () => {
  it.each([
    [["list", "--older-than", "999999999d"], "--older-than"],
    [["sweep", "--retention", "999999999d"], "--retention"],
  ])("%j exits 2 naming the flag (it named the ledger's olderThanMs / retentionMs, which the operator never typed)", async (args, flag) => {
    const path = join(dir, "ledger.db");
    await createSqliteLedger({ path }).close();
    const result = await runBin([...args, "--ledger", path]);
    expect(result.code, result.stderr).toBe(EXIT_CODES.usage);
    expect(result.stderr).toContain(`${flag} `);
    expect(result.stderr).not.toMatch(/olderThanMs|retentionMs/);
  });
});

