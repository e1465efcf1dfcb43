// EFFECT-8: the rows Dispatch-Once's own packages keep in an application's ledger (the AI SDK
// wrapper's dispatch-once-turn, dispatch-once-message and dispatch-once-repair rows) hold no
// effect. An operator is never shown one as an effect, nor allowed to settle one: resolving a
// dispatch-once-turn row not_performed releases it, and the next request may number the turn's
// messages again (AISDK-17).
import type { Ledger, LedgerRow, StalledMessage } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FIXTURES, jsonLines, randomKey, runBin, sqliteBackend, sqliteStoreBackend, type Backend, type StoreBackend } from "./helpers.js";

async function claim(ledger: Ledger, toolName: string, effect: "keyed_write" | "unkeyed_write", request: unknown, leaseMs = 600_000, turnIndex = 0): Promise<{ key: string; fence: number }> {
  const key = randomKey();
  const claimed = await ledger.claim({ key, toolName, effect, owner: "dead-worker", leaseMs, request: JSON.stringify(request), conversationId: "chat-1", turnIndex });
  if (claimed.outcome !== "claimed") throw new Error("seed claim not claimed");
  return { key, fence: claimed.fence };
}

describe("dispatch-once and the AI SDK wrapper's bookkeeping rows (EFFECT-8)", () => {
  let backend: Backend;
  let stores: StoreBackend;
  let payment: { key: string; fence: number };
  /** A dispatch-once-turn row a process died holding: its lease has run out. */
  let turnRecord: { key: string; fence: number };
  /** A dispatch-once-message row left unknown. */
  let messageRecord: { key: string; fence: number };
  let repairRecord: { key: string; fence: number };
  const run = (...args: string[]) => runBin([...args, ...backend.args]);

  beforeAll(async () => {
    backend = await sqliteBackend();
    const ledger = backend.ledger;
    payment = await claim(ledger, "send_payment", "unkeyed_write", { amount: 5 }, 600_000, 1);
    await ledger.markUnknown(payment.key, payment.fence, "tool_error");
    turnRecord = await claim(ledger, "dispatch-once-turn", "keyed_write", {}, 1, 1);
    messageRecord = await claim(ledger, "dispatch-once-message", "keyed_write", { messageId: "m1" });
    await ledger.markUnknown(messageRecord.key, messageRecord.fence, "request_mismatch: test");
    repairRecord = await claim(ledger, "dispatch-once-repair", "keyed_write", { toolName: "send_payment", input: "{" }, 600_000, 1);
    await ledger.complete(repairRecord.key, repairRecord.fence, '{"amount":5}');
    // The turn record's 1 ms lease must have run out on the ledger's clock before the tests read it.
    for (let row = await ledger.lookup(turnRecord.key); row?.state === "in_flight" && row.leaseExpiresAt >= Date.now(); row = await ledger.lookup(turnRecord.key)) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  });
  afterAll(async () => {
    await backend?.cleanup();
    await stores?.cleanup();
  });

  it("list leaves them out by default and says how many it left out", async () => {
    const table = await run("list");
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toContain(payment.key);
    expect(table.stdout).not.toContain("dispatch-once-");
    expect(table.stderr).toBe("1 row (3 bookkeeping rows of Dispatch-Once itself, which hold no effect, not shown: --records shows them)\n");
    const open = await run("list", "--state", "unknown,in_flight", "--json");
    expect((jsonLines(open.stdout) as LedgerRow[]).map((r) => r.key)).toEqual([payment.key]);
  });

  it("list --records shows them, labelled as bookkeeping with no effect; --tool <reserved name> shows that one", async () => {
    const json = await run("list", "--records", "--json");
    expect(json.code, json.stderr).toBe(0);
    const rows = jsonLines(json.stdout) as (LedgerRow & { evidence: { effect: string; basis: string } })[];
    expect(Object.fromEntries(rows.map((r) => [r.toolName, r.evidence]))).toEqual({
      send_payment: { effect: "may_have_happened", basis: "none" },
      "dispatch-once-turn": { effect: "none", basis: "record" },
      "dispatch-once-message": { effect: "none", basis: "record" },
      "dispatch-once-repair": { effect: "none", basis: "record" },
    });
    const table = await run("list", "--records");
    const line = table.stdout.split("\n").find((l) => l.startsWith(turnRecord.key));
    expect(line).toMatch(/^\S+\s+in_flight \(bookkeeping, no effect\)\s+dispatch-once-turn\s/);
    expect(table.stdout.split("\n").find((l) => l.startsWith(messageRecord.key))).toMatch(/^\S+\s+unknown \(bookkeeping, no effect\)\s+dispatch-once-message\s/);
    const byTool = await run("list", "--tool", "dispatch-once-turn", "--json");
    expect((jsonLines(byTool.stdout) as LedgerRow[]).map((r) => r.key)).toEqual([turnRecord.key]);
  });

  it("inspect says what the row is", async () => {
    const text = await run("inspect", turnRecord.key);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^state:\s+in_flight \(bookkeeping, no effect\)$/m);
    expect(text.stdout).toMatch(/^record:\s+Dispatch-Once's own bookkeeping .*no effect.*nothing to settle/m);
    const json = await run("inspect", messageRecord.key, "--json");
    expect((JSON.parse(json.stdout) as { evidence: unknown }).evidence).toEqual({ effect: "none", basis: "record" });
  });

  for (const [label, args] of [
    ["--not-performed", ["--not-performed", "--grace", "0s"]],
    ["--completed", ["--completed", "{}"]],
    ["--failed", ["--failed", "gone", "--grace", "0s"]],
  ] as const) {
    it(`resolve ${label} refuses a record row (exit 4), and the row is unchanged`, async () => {
      for (const record of [turnRecord, messageRecord]) {
        const before = await backend.ledger.lookup(record.key);
        const trail = await backend.ledger.auditTrail!(record.key);
        const result = await run("resolve", record.key, ...args, "--reason", "looked", "--actor", "ops", "--retention", "24h", "--expected-fence", String(record.fence));
        expect(result.code, result.stderr).toBe(4);
        expect(result.stderr).toContain(`resolve refused for ${record.key}, nothing was written: its tool`);
        expect(result.stderr).toContain("Dispatch-Once's own bookkeeping");
        expect(await backend.ledger.lookup(record.key)).toEqual(before);
        expect(await backend.ledger.auditTrail!(record.key)).toEqual(trail);
      }
    });
  }

  it("reconcile refuses a record row (exit 4) without asking a probe; the row is unchanged", async () => {
    const before = await backend.ledger.lookup(messageRecord.key);
    const trail = await backend.ledger.auditTrail!(messageRecord.key);
    const result = await run("reconcile", messageRecord.key, "--tools", `${FIXTURES}/mixed-tools.mjs`, "--retention", "24h", "--actor", "ops");
    expect(result.code, result.stderr).toBe(4);
    expect(result.stderr).toContain(`reconcile refused for ${messageRecord.key}, nothing was written: its tool`);
    expect(await backend.ledger.lookup(messageRecord.key)).toEqual(before);
    expect(await backend.ledger.auditTrail!(messageRecord.key)).toEqual(trail);
  });

  it("turns --stalled --ledger names the turn's effects only", async () => {
    stores = await sqliteStoreBackend();
    await stores.store.appendUserMessage("chat-1", { id: "m1", content: { role: "user", content: "pay" } });
    const lease = await stores.store.acquireLease("chat-1", "dead-worker", 0);
    if (!lease.acquired) throw new Error("not acquired");
    await stores.store.beginTurn("chat-1", lease.fence);
    const json = await runBin(["turns", "--stalled", "--json", "--ledger", backend.args[1]!, ...stores.args]);
    expect(json.code, json.stderr).toBe(0);
    const [message] = jsonLines(json.stdout) as (StalledMessage & { ledgerRows: { toolName: string }[] })[];
    expect(message?.ledgerRows.map((r) => r.toolName)).toEqual([]);
  });
});
