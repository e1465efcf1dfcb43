// `dispatch-once turns --stalled`: messages in progress that no live turn lease holds (TURN-22).
// The adoption trial's scenario 7 (trials/app-openai-postgres/FRICTION.md item 7): a worker paid,
// died before the commit, and nobody re-sent the message.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Dispatcher, defineTool, type ConversationStore, type StalledMessage } from "@dispatch-once/core";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { jsonLines, postgresStoreBackend, runBin, sqliteStoreBackend, type StoreBackend } from "./helpers.js";

/** Bind the conversation's message m1 under a lease of `leaseMs` (0: over at once, as a dead worker's). */
async function bind(store: ConversationStore, c: string, leaseMs: number): Promise<number> {
  await store.appendUserMessage(c, { id: "m1", content: { role: "user", content: `pay for ${c}` } });
  const lease = await store.acquireLease(c, `worker-${c}`, leaseMs);
  if (!lease.acquired) throw new Error("not acquired");
  await store.beginTurn(c, lease.fence);
  return lease.fence;
}

describe.each([
  ["sqlite", sqliteStoreBackend],
  ["postgres", postgresStoreBackend],
] as const)("dispatch-once turns --stalled on %s", (_name, open) => {
  let dir: string;
  let backend: StoreBackend;
  let ledgerPath: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-stalled-"));
    backend = await open();
    ledgerPath = join(dir, "ledger.db");
    const ledger = createSqliteLedger({ path: ledgerPath });
    const pay = defineTool({ name: "send_payment", effect: "unkeyed_write", input: z.object({ amount: z.int() }), run: () => ({ id: "pay_1" }) });
    const dispatcher = new Dispatcher({ tools: [pay], ledger, logger: { warn: () => {} } });
    try {
      // Scenario 7: the payment ran and its row completed; the worker died before the commit.
      await bind(backend.store, "conv-stalled", 0);
      await dispatcher.dispatch({ name: "send_payment", input: { amount: 12 } }, { conversationId: "conv-stalled", turnIndex: 0 });
    } finally {
      await ledger.close();
    }
    // A runner that gave up and released its lease (a commit the store refused to take).
    await backend.store.releaseLease("conv-released", await bind(backend.store, "conv-released", 600_000));
    // A runner still working: its lease is live.
    await bind(backend.store, "conv-live", 600_000);
    // A committed turn, and a failed one (`turns --failed` lists it).
    const fence = await bind(backend.store, "conv-committed", 0);
    await backend.store.commitTurn("conv-committed", { fence, messageId: "m1", turnIndex: 0, assistant: "paid", stopReason: "end_turn", answers: true });
    await backend.store.failMessage("conv-failed", await bind(backend.store, "conv-failed", 0), "m1", { failed: "m1", retryable: true });
  });
  afterAll(async () => {
    await backend?.cleanup();
    rmSync(dir, { recursive: true, force: true });
  });

  it("the trial's scenario 7: neither turns --failed nor list --state in_flight,unknown shows the paid, uncommitted message", async () => {
    const failed = await runBin(["turns", "--failed", "--json", "--conversation", "conv-stalled", ...backend.args]);
    expect(failed.code, failed.stderr).toBe(0);
    expect(failed.stdout).toBe("");
    const open = await runBin(["list", "--ledger", ledgerPath, "--state", "in_flight,unknown", "--json"]);
    expect(open.code, open.stderr).toBe(0);
    expect(open.stdout).toBe("");
  });

  it("--stalled lists it (and a released one), never a live lease's, a committed or a failed message", async () => {
    const result = await runBin(["turns", "--stalled", "--json", ...backend.args]);
    expect(result.code, result.stderr).toBe(0);
    const listed = jsonLines(result.stdout) as StalledMessage[];
    expect(listed.map((m) => [m.conversationId, m.messageId, m.turnIndex, m.leaseOwner ?? null]).sort()).toEqual([
      ["conv-released", "m1", 0, null],
      ["conv-stalled", "m1", 0, "worker-conv-stalled"],
    ]);
    expect(result.stderr).toBe("2 stalled messages\n");
  });

  it("a table with the ledger's rows of the turn (--ledger); --older-than and --conversation narrow it", async () => {
    const table = await runBin(["turns", "--stalled", "--conversation", "conv-stalled", "--ledger", ledgerPath, ...backend.args]);
    expect(table.code, table.stderr).toBe(0);
    const [header, row] = table.stdout.split("\n");
    expect(header).toMatch(/^CONVERSATION\s+MESSAGE\s+TURN\s+STALLED SINCE\s+AGE\s+LEASE OWNER\s+LEDGER$/);
    expect(row).toMatch(/^conv-stalled\s+m1\s+0\s+\S+\s+\S+\s+worker-conv-stalled\s+send_payment completed$/);
    const old = await runBin(["turns", "--stalled", "--older-than", "1h", ...backend.args]);
    expect(old.code, old.stderr).toBe(0);
    expect(old.stdout).toBe("");
    expect(old.stderr).toBe("0 stalled messages\n");
  });
});

describe("dispatch-once turns usage (--stalled)", () => {
  it("takes exactly one of --failed and --stalled", async () => {
    const both = await runBin(["turns", "--failed", "--stalled", "--store", "x.db"]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("one of --failed and --stalled");
  });
});
