// Findings of the adoption trial (part 2) for the CLI's flags.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { SqliteConversationStore } from "@dispatch-once/conversation-sqlite";
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
