// `dispatch-once turns --failed --store <target>` on the real conversation stores (TURN-17).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ConversationStore, FailedTurn } from "@dispatch-once/core";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createSqliteConversationStore } from "@dispatch-once/conversation-sqlite";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DATABASE_URL, jsonLines, runBin } from "./helpers.js";

interface StoreBackend {
  store: ConversationStore;
  args: string[];
  cleanup(): Promise<void>;
}

async function sqliteStore(): Promise<StoreBackend> {
  const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-turns-"));
  const path = join(dir, "chat.db");
  const store = createSqliteConversationStore({ path });
  return { store, args: ["--store", path], cleanup: async () => (await store.close(), rmSync(dir, { recursive: true, force: true })) };
}

async function postgresStore(): Promise<StoreBackend> {
  const schema = `do_test_cli_turns_${randomBytes(5).toString("hex")}`;
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

async function failNext(store: ConversationStore, c: string, id: string): Promise<void> {
  await store.appendUserMessage(c, { id, content: { role: "user", content: `${c} ${id}` } });
  const lease = await store.acquireLease(c, "worker", 600_000);
  if (!lease.acquired) throw new Error("not acquired");
  await store.beginTurn(c, lease.fence);
  await store.failMessage(c, lease.fence, id, { failed: id, effects: ["may_have_happened"] });
  await store.releaseLease(c, lease.fence);
}

describe.each([
  ["sqlite", sqliteStore],
  ["postgres", postgresStore],
] as const)("dispatch-once turns --failed on %s", (_name, open) => {
  let backend: StoreBackend;
  beforeAll(async () => {
    backend = await open();
    await failNext(backend.store, "conv-turns-a", "m1");
    await failNext(backend.store, "conv-turns-b", "m1");
    await backend.store.appendUserMessage("conv-turns-c", { id: "m1", content: "queued" });
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("--json prints each failed turn with its record; --conversation narrows it", async () => {
    const result = await runBin(["turns", "--failed", "--json", ...backend.args]);
    expect(result.code, result.stderr).toBe(0);
    const turns = jsonLines(result.stdout) as FailedTurn[];
    expect(turns.map((t) => [t.conversationId, t.messageId, t.turnIndex, t.failure]).sort()).toEqual([
      ["conv-turns-a", "m1", 0, { failed: "m1", effects: ["may_have_happened"] }],
      ["conv-turns-b", "m1", 0, { failed: "m1", effects: ["may_have_happened"] }],
    ]);
    const one = await runBin(["turns", "--failed", "--json", "--conversation", "conv-turns-b", ...backend.args]);
    expect((jsonLines(one.stdout) as FailedTurn[]).map((t) => t.conversationId)).toEqual(["conv-turns-b"]);
  });

  it("pages through the store's cursor, prints a table, and --older-than excludes fresh failures", async () => {
    const paged = await runBin(["turns", "--failed", "--json", "--limit", "0", "--page-size", "1", ...backend.args]);
    expect(jsonLines(paged.stdout)).toHaveLength(2);
    const table = await runBin(["turns", "--failed", ...backend.args]);
    expect(table.stdout.split("\n")[0]).toMatch(/^CONVERSATION\s+MESSAGE\s+TURN\s+FAILED AT\s+AGE$/);
    expect(table.stderr).toBe("2 failed turns\n");
    const old = await runBin(["turns", "--failed", "--older-than", "1h", ...backend.args]);
    expect(old.code).toBe(0);
    expect(old.stdout).toBe("");
  });
});

describe("dispatch-once turns usage", () => {
  it("needs --failed and a store; a Redis URL is refused", async () => {
    expect((await runBin(["turns", "--store", "x.db"])).stderr).toContain("say which turns: --failed");
    const none = await runBin(["turns", "--failed"]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("no conversation store");
    const redis = await runBin(["turns", "--failed", "--store", "redis://127.0.0.1:6379"]);
    expect(redis.code).toBe(2);
    expect(redis.stderr).toContain("there is no Redis conversation store");
  });
});
