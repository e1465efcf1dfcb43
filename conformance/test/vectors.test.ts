import { MemoryLedger, ResolutionRefusedError, type AuditEntry, type LedgerRow, type ResolveRequest, type ResolvedRow } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { BUNDLED_LEDGER_VECTORS, ledgerChecks, memoryLedgerSubject, parseVectorFile, runVectorCase, vectorNeeds, type VectorCase } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";

/** LEDGER-27's bug in resolve, as every adapter had it: not_performed of an expired in-flight row drops its claim id. */
class ResolveDropsClaimId extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const written = await super.resolve(request);
    delete (this as unknown as { rows: Map<string, LedgerRow & { claimId?: string }> }).rows.get(request.key)!.claimId;
    return written;
  }
}
/** RESOLVE-7's bug: a resolution appends no audit entry (the transitions into unknown still do). */
class ResolveUnaudited extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const written = await super.resolve(request);
    (this as unknown as { audits: Map<string, AuditEntry[]> }).audits.get(request.key)!.pop();
    return written;
  }
}
/** RESOLVE-2's bug: resolution_refused names the adapter's storage key (a hashed one), not the key the operator sent. */
class RefusalNamesStorageKey extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    try {
      return await super.resolve(request);
    } catch (error) {
      if (ResolutionRefusedError.isInstance(error)) throw new ResolutionRefusedError(`do:h:${request.key}`, error.state);
      throw error;
    }
  }
}
/** RESOLVE-7's bug: every resolution is audited twice (the adapter's write path and its trigger both append). */
class ResolveAuditedTwice extends MemoryLedger {
  override async resolve(request: ResolveRequest): Promise<ResolvedRow> {
    const written = await super.resolve(request);
    const entries = (this as unknown as { audits: Map<string, AuditEntry[]> }).audits.get(request.key)!;
    entries.push({ ...entries.at(-1)! });
    return written;
  }
}
const vectorById = (id: string) => parseVectorFile(BUNDLED_LEDGER_VECTORS).cases.find((c) => c.id === id)!;

describe("ledger-transition vectors", () => {
  it("the bundled copy is the spec's file, with every case naming a LEDGER or RESOLVE rule", () => {
    const file = parseVectorFile(BUNDLED_LEDGER_VECTORS);
    expect(file.cases.length).toBeGreaterThanOrEqual(89);
    for (const c of file.cases) expect(c.rule).toMatch(/^(LEDGER|RESOLVE)-\d+$/);
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

  it("LEDGER-27 a resolve whose not_performed release drops the expired claim's claim id fails LT-079 at the late copy, and says so", async () => {
    const vector = vectorById("LT-079");
    expect(vector.rule).toBe("LEDGER-27");
    await runVectorCase(memoryLedgerSubject(), vector);
    const error = await runVectorCase(memoryLedgerSubject("memory-resolve-drops-claim-id", ResolveDropsClaimId), vector).catch((e: unknown) => e as Error);
    expect(error).toBeInstanceOf(Error);
    const lines = (error as Error).message.split("\n");
    expect(lines[0]).toBe(`LT-079 (LEDGER-27) step t=9: claim was accepted (claimed fence=3 request='{"payee":"acct_991","amount":4200,"memo":"attempt a"}'), expected 'stale_claim'`);
    expect(lines).toContain("  t=3 resolve k1 'not_performed' -> resolved released fence=2 request='{\"payee\":\"acct_991\",\"amount\":4200,\"memo\":\"attempt a\"}'");
  });

  it("RESOLVE-2 RESOLVE-4 a refusal is compared with its code and the state it carries; an accepted resolve the vector expects refused says what it wrote", async () => {
    const wrong: VectorCase = {
      id: "LT-X03",
      rule: "RESOLVE-4",
      description: "deliberately wrong: a live row resolved with its own fence expected stale",
      steps: [
        { op: "claim", key: "k1", effect: "keyed_write", owner: "a", leaseMs: 30000, request: "{}", expect: { outcome: "claimed", fence: 1, takeover: false } },
        { op: "resolve", key: "k1", resolveRequest: { resolution: { outcome: "completed", result: "1" }, actor: "ops", reason: "why", expectedFence: 1 }, expect: { error: "stale_claim" } },
      ],
    };
    await expect(runVectorCase(memoryLedgerSubject(), wrong)).rejects.toThrow("step t=2: resolve: error is 'resolution_refused', expected 'stale_claim'");
    wrong.steps.splice(1, 0, { op: "markUnknown", key: "k1", fence: 1, reason: "tool_error", expect: { ok: true } });
    await expect(runVectorCase(memoryLedgerSubject(), wrong)).rejects.toThrow("step t=3: resolve was accepted (resolved completed fence=2 result='1' request='{}'), expected 'stale_claim'");
  });

  it("RESOLVE-7 a resolution that appends no audit entry fails LT-090 and names the entry missing", async () => {
    const vector = vectorById("LT-090");
    expect(vector.rule).toBe("RESOLVE-7");
    await runVectorCase(memoryLedgerSubject(), vector);
    await expect(runVectorCase(memoryLedgerSubject("memory-resolve-unaudited", ResolveUnaudited), vector)).rejects.toThrow(
      "LT-090 (RESOLVE-7) step t=7: auditTrail has 1 entries, expected 2: no entry 2 (resolved by 'ops@example.com' unknown -> released fence=2 outcome not_performed)",
    );
  });

  it("RESOLVE-7 a resolution audited twice fails LT-090 and names the entry too many", async () => {
    const vector = vectorById("LT-090");
    await expect(runVectorCase(memoryLedgerSubject("memory-resolve-audited-twice", ResolveAuditedTwice), vector)).rejects.toThrow(
      "LT-090 (RESOLVE-7) step t=7: auditTrail has 3 entries, expected 2: entry 3 is resolved by 'ops@example.com' unknown -> released fence=2 outcome not_performed",
    );
  });

  it("RESOLVE-2 a resolution_refused that names another key than the one sent fails LT-084 and says which", async () => {
    const vector = vectorById("LT-084");
    expect(vector.rule).toBe("RESOLVE-2");
    await runVectorCase(memoryLedgerSubject(), vector);
    await expect(runVectorCase(memoryLedgerSubject("memory-refusal-storage-key", RefusalNamesStorageKey), vector)).rejects.toThrow(/LT-084 \(RESOLVE-2\) step t=1: resolve refused with 'resolution_refused' naming key 'do:h:[0-9a-f]+', not the key it was sent/);
  });

  it("a case with an auditTrail step is not applicable to a subject that does not offer auditTrail", () => {
    const subject = memoryLedgerSubject();
    const without = { ...subject, capabilities: { ...subject.capabilities, auditTrail: false } };
    const checks = ledgerChecks(without, { runs: 1, seed: 1 }).filter((c) => /^vector LT-09[01]:/.test(c.name));
    expect(checks.map((c) => [c.applicable, c.reasonNotApplicable])).toEqual([
      [false, "the ledger does not offer auditTrail (capabilities.supports.auditTrail)"],
      [false, "the ledger does not offer auditTrail (capabilities.supports.auditTrail)"],
    ]);
  });

  it("a case with a resolve step is not applicable to a subject that does not offer resolve", () => {
    const subject = memoryLedgerSubject();
    const without = { ...subject, capabilities: { ...subject.capabilities, resolve: false } };
    const checks = ledgerChecks(without, { runs: 1, seed: 1 }).filter((c) => c.name.startsWith("vector LT-"));
    const resolving = parseVectorFile(BUNDLED_LEDGER_VECTORS).cases.filter((c) => vectorNeeds(c).includes("resolve"));
    expect(resolving.map((c) => c.id)).toContain("LT-079");
    for (const c of resolving) {
      const check = checks.find((k) => k.name.startsWith(`vector ${c.id}:`))!;
      expect(check.applicable, c.id).toBe(false);
      expect(check.reasonNotApplicable).toContain("does not offer resolve");
    }
    expect(checks.filter((k) => k.applicable).length).toBe(checks.length - resolving.length);
  });

  it("rejects a file without cases", () => {
    expect(() => parseVectorFile({ vectors: [] })).toThrow(/`cases` array/);
  });
});
