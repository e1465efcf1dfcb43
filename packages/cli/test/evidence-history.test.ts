// An unkeyed_write row its owner released says "not performed" only for that run (LEDGER-8). When
// an earlier claim of the same call ended unknown and was released on someone's word, that
// claim's owner may still send its request (§6.12's paused owner), and the dispatcher told the
// app "may have happened" (ClaimReleasedError, fence above 1). list and inspect must not say
// "not performed" of it on the last run's word alone.
import type { LedgerRow } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BACKENDS, jsonLines, randomKey, runBin, type Backend } from "./helpers.js";

describe.each(BACKENDS)("a release after an earlier claim was settled on someone's word, on %s", (_name, open) => {
  let backend: Backend;
  beforeAll(async () => {
    backend = await open();
  });
  afterAll(async () => {
    await backend?.cleanup();
  });

  it("LEDGER-8 RESOLVE-7 an unkeyed_write released by its owner after an operator's not-performed release of an unknown claim reads may have happened", async () => {
    const conversation = `ev-history-${backend.name}`;
    const key = randomKey();
    const claim = (owner: string) => backend.ledger.claim({ key, toolName: "pay", effect: "unkeyed_write", owner, leaseMs: 60_000, request: '{"amount":5}', conversationId: conversation, turnIndex: 0 });
    // Fence 1: the owner's request went out and its response was lost.
    const first = await claim("worker-a");
    if (first.outcome !== "claimed") throw new Error("not claimed");
    await backend.ledger.markUnknown(key, first.fence, "tool_error: socket hang up");
    // An operator finds nothing downstream (yet) and releases it (fence 2).
    await backend.ledger.resolve!({ key, resolution: { outcome: "not_performed" }, actor: "alice", reason: "no trace at the bank", expectedFence: first.fence });
    // A replay claims it (fence 3); its tool refuses before acceptance: not performed, this run.
    const third = await claim("worker-b");
    if (third.outcome !== "claimed") throw new Error("not re-claimed");
    await backend.ledger.release(key, third.fence);

    const text = await runBin(["list", "--conversation", conversation, ...backend.args]);
    const json = await runBin(["list", "--conversation", conversation, "--json", ...backend.args]);
    const shown = await runBin(["inspect", key, "--json", ...backend.args]);
    expect(text.code, text.stderr).toBe(0);
    const [row] = jsonLines(json.stdout) as (LedgerRow & { evidence: { effect: string } })[];
    console.log(`${backend.name}: fence ${row?.fence} ${row?.state}; list says: ${text.stdout.split("\n")[1]?.replace(/\s+/g, " ")}; evidence ${JSON.stringify(row?.evidence)}`);
    expect(row).toMatchObject({ state: "released", fence: third.fence });
    expect(row?.evidence.effect).toBe("may_have_happened");
    expect((JSON.parse(shown.stdout) as { evidence: { effect: string } }).evidence.effect).toBe("may_have_happened");
    expect(text.stdout).not.toContain("not performed");
    expect(text.stdout).toContain("released (may have happened");
  });
});
