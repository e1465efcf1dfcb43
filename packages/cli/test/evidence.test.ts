// What `list` and `inspect` say about a settled row's effect must be what its row and audit trail
// establish (RESOLVE-7, LEDGER-8): a release is "not performed" only on someone's word, and
// whose word it was is part of the answer; an owner's release of a keyed_write may have happened.
import type { LedgerRow } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKENDS, jsonLines, randomKey, runBin, type Backend } from "./helpers.js";

describe.each(BACKENDS)("the evidence list and inspect print on %s", (_name, open) => {
  let backend: Backend;
  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  async function claimed(effect: "keyed_write" | "unkeyed_write", conversationId: string): Promise<{ key: string; fence: number }> {
    const key = randomKey();
    const claim = await backend.ledger.claim({ key, toolName: "pay", effect, owner: "worker", leaseMs: 60_000, request: '{"amount":5}', conversationId, turnIndex: 0 });
    if (claim.outcome !== "claimed") throw new Error("not claimed");
    return { key, fence: claim.fence };
  }
  const listed = async (conversationId: string) => {
    const text = await runBin(["list", "--conversation", conversationId, ...backend.args]);
    const json = await runBin(["list", "--conversation", conversationId, "--json", ...backend.args]);
    expect(text.code, text.stderr).toBe(0);
    return { text: text.stdout, rows: jsonLines(json.stdout) as (LedgerRow & { evidence: unknown })[] };
  };
  const inspected = async (key: string) => {
    const text = await runBin(["inspect", key, ...backend.args]);
    const json = await runBin(["inspect", key, "--json", ...backend.args]);
    expect(text.code, text.stderr).toBe(0);
    return { text: text.stdout, json: JSON.parse(json.stdout) as { evidence: unknown } };
  };

  it("LEDGER-8: a keyed_write its owner released (after a lost response) may have happened: never listed as a plain, not-performed 'released'", async () => {
    const conversation = `ev-keyed-${backend.name}`;
    const row = await claimed("keyed_write", conversation);
    await backend.ledger.release(row.key, row.fence);
    const { text, rows } = await listed(conversation);
    expect(text).toContain("released (may have happened");
    expect(rows[0]?.evidence).toEqual({ effect: "may_have_happened", basis: "tool" });
    const shown = await inspected(row.key);
    expect(shown.text).toMatch(/^state:\s+released \(may have happened/m);
    expect(shown.json.evidence).toEqual({ effect: "may_have_happened", basis: "tool" });
  });

  it("RESOLVE-7: a row an operator released with resolve --not-performed reads 'not performed on <actor>'s word', with the reason in --json", async () => {
    const conversation = `ev-operator-${backend.name}`;
    const row = await claimed("unkeyed_write", conversation);
    await backend.ledger.markUnknown(row.key, row.fence, "tool_error");
    const resolved = await runBin(["resolve", row.key, "--not-performed", "--reason", "no trace at the bank", "--actor", "alice", "--grace", "0s", "--expected-fence", String(row.fence), "--retention", "24h", ...backend.args]);
    expect(resolved.code, resolved.stderr).toBe(0);
    const evidence = { effect: "not_happened", basis: "operator", actor: "alice", reason: "no trace at the bank" };
    const { text, rows } = await listed(conversation);
    expect(text).toContain("released (not performed on alice's word)");
    expect(rows[0]?.evidence).toEqual(evidence);
    const shown = await inspected(row.key);
    expect(shown.text).toMatch(/^state:\s+released \(not performed on alice's word\)$/m);
    expect(shown.json.evidence).toEqual(evidence);
  });

  it("RESOLVE-7: a row an operator failed reads 'failed (on <actor>'s word)'; an unkeyed_write its owner released reads 'not performed, as its tool answered'", async () => {
    const conversation = `ev-failed-${backend.name}`;
    const failed = await claimed("unkeyed_write", conversation);
    await backend.ledger.markUnknown(failed.key, failed.fence, "tool_error");
    const resolved = await runBin(["resolve", failed.key, "--failed", "declined", "--reason", "bank log", "--actor", "bob", "--grace", "0s", "--expected-fence", String(failed.fence), "--retention", "24h", ...backend.args]);
    expect(resolved.code, resolved.stderr).toBe(0);
    const released = await claimed("unkeyed_write", conversation);
    await backend.ledger.release(released.key, released.fence);
    const { text, rows } = await listed(conversation);
    expect(text).toContain("failed (on bob's word)");
    expect(text).toContain("released (not performed, as its tool answered)");
    expect(rows.find((r) => r.key === failed.key)?.evidence).toEqual({ effect: "not_happened", basis: "operator", actor: "bob", reason: "bank log" });
    expect(rows.find((r) => r.key === released.key)?.evidence).toEqual({ effect: "not_happened", basis: "tool" });
  });
});
