// What list and inspect say of a settled row's effect where the row alone cannot tell, beside the
// trail-reading cases of evidence.test.ts and evidence-history.test.ts (RECORD-2: a call whose
// effect may have happened is never described as not performed, nor one that happened as failed):
// - a ledger that keeps no audit trail: an unkeyed_write released at fence 2 had a fence-1 claim
//   whose owner may still send (LEDGER-8), and nothing there records who released it or how that
//   claim ended;
// - a reconcile probe that found the effect performed but whose result could not be stored: the
//   row is failed closed (result_not_storable, RECON-3, RECON-7), and the effect happened.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Dispatcher, defineTool, type Ledger, type LedgerRow } from "@dispatch-once/core";
import { createSqliteLedger } from "@dispatch-once/ledger-sqlite";
import { afterAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { inspectCommand } from "../src/commands/inspect.js";
import { listCommand } from "../src/commands/list.js";
import type { Command } from "../src/context.js";
import { jsonLines, randomKey, runBin } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "dispatch-once-cli-evidence-"));
const path = join(dir, "ledger.db");
const ledger = createSqliteLedger(path);
afterAll(async () => {
  await ledger.close();
  rmSync(dir, { recursive: true, force: true });
});

/** The same SQLite ledger, declaring no audit trail (an adapter without the OPTIONAL auditTrail). */
function withoutTrail(inner: Ledger): Ledger {
  const supports = { ...inner.capabilities.supports, auditTrail: false };
  return Object.assign(Object.create(inner) as Ledger, { capabilities: { ...inner.capabilities, supports } });
}

/** Run a command's own `run` on the given ledger (the CLI opens only the stores it knows). */
async function runOn(command: Command, store: Ledger, values: Record<string, string | boolean>, positionals: string[] = []): Promise<string> {
  let stdout = "";
  const code = await command.run({
    io: { stdout: (text) => void (stdout += text), stderr: () => {}, env: {}, cwd: dir },
    values,
    positionals,
    command: command.name,
    ledger: async () => ({ ledger: store, target: { kind: "sqlite", path }, display: path }),
  });
  expect(code).toBe(0);
  return stdout;
}

describe("evidence where the row alone cannot tell (RECORD-2)", () => {
  it("RECORD-2 LEDGER-8 on a ledger without an audit trail, an unkeyed_write released at fence 2 may have happened: list and inspect never say not performed", async () => {
    const key = randomKey();
    // Fence 1: its owner sent the request and paused past its lease: the row turns unknown (lease_expired).
    const first = await ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "worker-a", leaseMs: 1, request: '{"amount":40}', conversationId: "conv-no-trail", turnIndex: 0 });
    if (first.outcome !== "claimed") throw new Error("not claimed");
    await new Promise((resolve) => setTimeout(resolve, 20));
    const expired = await ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "worker-b", leaseMs: 60_000, request: '{"amount":40}', conversationId: "conv-no-trail", turnIndex: 0 });
    if (expired.outcome !== "existing" || expired.row.state !== "unknown") throw new Error(`not unknown: ${JSON.stringify(expired)}`);
    // Someone released it (fence 2); the fence-1 owner may still send. A reader without the trail sees only the fence.
    await ledger.resolve!({ key, resolution: { outcome: "not_performed" }, actor: "alice", reason: "no trace at the bank yet", expectedFence: first.fence });
    const store = withoutTrail(ledger);
    const unrecorded = { effect: "may_have_happened", basis: "unrecorded" };
    const listed = jsonLines(await runOn(listCommand, store, { json: true, conversation: "conv-no-trail" })) as (LedgerRow & { evidence: unknown })[];
    expect(listed.map((r) => [r.key, r.state, r.fence, r.evidence])).toEqual([[key, "released", 2, unrecorded]]);
    expect(await runOn(listCommand, store, { conversation: "conv-no-trail" })).toContain("released (may have happened; an earlier claim of it is not recorded)");
    const shown = JSON.parse(await runOn(inspectCommand, store, { json: true }, [key])) as { audit: unknown; evidence: unknown };
    expect(shown).toMatchObject({ audit: null, evidence: unrecorded });
    expect(await runOn(inspectCommand, store, {}, [key])).toMatch(/^state:\s+released \(may have happened; an earlier claim of it is not recorded\)$/m);
  });

  it("RECORD-2 RECON-7 a row a reconcile probe found performed, whose result could not be stored, reads as happened on the probe's word, never as a failure", async () => {
    const tool = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: () => ({ invoiceId: "inv_1" }),
      // The downstream's answer is no JSON value: the row is failed closed, result_not_storable.
      reconcile: () => ({ outcome: "performed", result: { invoiceId: "inv_1", total: 40n } as never }),
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, logger: { warn: () => {} } });
    const key = randomKey();
    const claim = await ledger.claim({ key, toolName: "create_invoice", effect: "unkeyed_write", owner: "worker", leaseMs: 60_000, request: '{"amount":40}', conversationId: "conv-probe-unstorable", turnIndex: 0 });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    await ledger.markUnknown(key, claim.fence, "tool_error: socket hang up after send");
    const report = await dispatcher.reconcile(key, { actor: "alice" });
    expect(report).toMatchObject({ verdict: "performed", settled: "failed" });
    expect(await ledger.lookup(key)).toMatchObject({ state: "failed", error: { code: "result_not_storable" } });

    const listed = await runBin(["list", "--conversation", "conv-probe-unstorable", "--json", "--ledger", path]);
    const [row] = jsonLines(listed.stdout) as (LedgerRow & { evidence: { effect: string; basis: string } })[];
    expect(row?.evidence).toMatchObject({ effect: "happened", basis: "probe" });
    const text = await runBin(["list", "--conversation", "conv-probe-unstorable", "--ledger", path]);
    expect(text.stdout).toContain("failed (the effect happened by a reconcile probe; result not stored)");
    const shown = await runBin(["inspect", key, "--json", "--ledger", path]);
    expect((JSON.parse(shown.stdout) as { evidence: unknown }).evidence).toMatchObject({ effect: "happened", basis: "probe" });
  });
});
