import { describe, expect, it } from "vitest";
import { BUNDLED_LEDGER_VECTORS, memoryLedgerSubject, parseVectorFile, runVectorCase, type VectorCase } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";

describe("ledger-transition vectors", () => {
  it("the bundled copy is the spec's file, with every case naming a LEDGER rule", () => {
    const file = parseVectorFile(BUNDLED_LEDGER_VECTORS);
    expect(file.cases.length).toBeGreaterThanOrEqual(48);
    for (const c of file.cases) expect(c.rule).toMatch(/^LEDGER-\d+$/);
    // Every claim sends a request (LEDGER-21), so a ledger cannot tell vectors from dispatches.
    for (const c of file.cases) for (const s of c.steps) if (s.op === "claim") expect(typeof s.request, `${c.id}`).toBe("string");
  });

  it("LEDGER-21 a claim that returns the claimant's own request, not the stored one, fails the vector and says so", async () => {
    const reclaim = parseVectorFile(BUNDLED_LEDGER_VECTORS).cases.find((c) => c.id === "LT-041")!;
    expect(reclaim.rule).toBe("LEDGER-21");
    await runVectorCase(memoryLedgerSubject(), reclaim);
    const error = await runVectorCase(kvSubject("kv-own-request", { returnsClaimantRequest: true }), reclaim).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    const lines = (error as Error).message.split("\n");
    expect(lines[0]).toMatch(/^LT-041 \(LEDGER-21\) step t=4: claim returned a request that is not byte-for-byte the stored one \(the claimant's own\)/);
    expect(lines.find((l) => l.startsWith("        ✗ expected"))).toContain('request=\'{"payee":"acct_991","amount":4200,"memo":"attempt a"}\'');
  });

  it("LEDGER-21 a request whose bytes the store changes fails the byte-for-byte vector", async () => {
    const bytes = parseVectorFile(BUNDLED_LEDGER_VECTORS).cases.find((c) => c.id === "LT-048")!;
    await runVectorCase(memoryLedgerSubject(), bytes);
    await expect(runVectorCase(kvSubject("kv-reencodes", { reencodesRequest: true }), bytes)).rejects.toThrow(
      /^LT-048 \(LEDGER-21\) step t=1: claim returned a request that is not byte-for-byte the stored one: lengths 127 vs 92 bytes/,
    );
  });

  it("a case whose expectation the ledger does not meet fails with its id, rule and a step timeline", async () => {
    const wrong: VectorCase = {
      id: "LT-X01",
      rule: "LEDGER-4",
      description: "deliberately wrong: the second claim after a release expects fence 3",
      steps: [
        { op: "claim", key: "k1", effect: "keyed_write", owner: "a", leaseMs: 30000, expect: { outcome: "claimed", fence: 1, takeover: false } },
        { op: "release", key: "k1", fence: 1, expect: { ok: true } },
        { op: "claim", key: "k1", effect: "keyed_write", owner: "b", leaseMs: 30000, expect: { outcome: "claimed", fence: 3, takeover: false } },
      ],
    };
    const error = await runVectorCase(memoryLedgerSubject(), wrong).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    const lines = (error as Error).message.split("\n");
    expect(lines[0]).toBe("LT-X01 (LEDGER-4) step t=3: claim: fence is 2, expected 3");
    expect(lines).toContain("  t=2 release k1 fence=1 -> ok");
    expect(lines).toContain("  t=3 claim k1 (keyed_write) by b -> claimed fence=2");
    expect(lines).toContain("        ✗ expected claimed fence=3");
  });

  it("an accepted operation that the vector expects refused is reported as such", async () => {
    const wrong: VectorCase = {
      id: "LT-X02",
      rule: "LEDGER-5",
      description: "deliberately wrong: the owner's own complete expected stale",
      steps: [
        { op: "claim", key: "k1", effect: "keyed_write", owner: "a", leaseMs: 30000, expect: { outcome: "claimed", fence: 1, takeover: false } },
        { op: "complete", key: "k1", fence: 1, result: "1", expect: { error: "stale_claim" } },
      ],
    };
    await expect(runVectorCase(memoryLedgerSubject(), wrong)).rejects.toThrow("step t=2: complete was accepted, expected 'stale_claim'");
  });

  it("rejects a file without cases", () => {
    expect(() => parseVectorFile({ vectors: [] })).toThrow(/`cases` array/);
  });
});
