import { describe, expect, it } from "vitest";
import { MemoryLedger, checkRetireRequest, type ClaimRequest, type ClaimResult, type LedgerRow, type RetireOptions, type RetireResult } from "@dispatch-once/core";
import { ledgerChecks, memoryLedgerSubject, runChecks, type LedgerSubject } from "../src/index.js";

/**
 * The retire checks (LEDGER-28) prove their power: each ledger below is the reference MemoryLedger
 * with one planted bug, and the LEDGER-28 checks must reject it.
 */
type Stored = LedgerRow & { claimId?: string };
const rowsOf = (ledger: MemoryLedger) => (ledger as unknown as { rows: Map<string, Stored> }).rows;
const retiredOf = (ledger: MemoryLedger) => (ledger as unknown as { retired: Map<string, Map<string, number>> }).retired;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs a claim with the key's retired ids hidden, then puts them back: the claim ignores retirement. */
async function claimIgnoringRetired(ledger: MemoryLedger, request: ClaimRequest, claim: (r: ClaimRequest) => Promise<ClaimResult>): Promise<ClaimResult> {
  const retired = retiredOf(ledger);
  const ids = retired.get(request.key);
  retired.delete(request.key);
  try {
    return await claim(request);
  } finally {
    if (ids !== undefined) retired.set(request.key, ids);
  }
}

class ForgetsWithoutRow extends MemoryLedger {
  override async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const result = await super.retire(key, claimId, options);
    if (rowsOf(this).get(key) === undefined) retiredOf(this).get(key)?.delete(claimId); // nothing to remember it on
    return result;
  }
}
class RetiredOnlyOnReleased extends MemoryLedger {
  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    if (rowsOf(this).get(request.key)?.state === "released") return super.claim(request);
    return claimIgnoringRetired(this, request, (r) => super.claim(r));
  }
}
class ReleasesOthersRow extends MemoryLedger {
  override async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const row = rowsOf(this).get(key);
    if (options?.release === true && row?.state === "in_flight") row.claimId = claimId; // releases whoever holds it
    return super.retire(key, claimId, options);
  }
}
class ReleasesWithoutRelease extends MemoryLedger {
  override async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    checkRetireRequest(key, claimId, options);
    return super.retire(key, claimId, { release: true });
  }
}
class RecognisesBeforeRetired extends MemoryLedger {
  override async claim(request: ClaimRequest): Promise<ClaimResult> {
    const row = rowsOf(this).get(request.key);
    if (request.claimId !== undefined && row?.state === "in_flight" && row.claimId === request.claimId) {
      return claimIgnoringRetired(this, request, (r) => super.claim(r));
    }
    return super.claim(request);
  }
}
class ForgetsRetiredOnSweep extends MemoryLedger {
  override async sweep(): Promise<number> {
    retiredOf(this).clear(); // retention ignored: every retired id goes at the next sweep
    return super.sweep();
  }
}
class RacyRetire extends MemoryLedger {
  override async retire(key: string, claimId: string, options?: RetireOptions): Promise<RetireResult> {
    const release = checkRetireRequest(key, claimId, options);
    const seen = await this.lookup(key);
    const heldByIt = release && seen?.state === "in_flight" && rowsOf(this).get(key)?.claimId === claimId;
    await sleep(2); // read, await, then record: a claim landing in the gap is neither refused nor released
    await super.retire(key, claimId);
    if (!heldByIt) return { released: false };
    await this.release(key, seen!.fence);
    return { released: true };
  }
}

const BROKEN: Array<{ bug: string; ledger: typeof MemoryLedger; what: string; check: RegExp }> = [
  { bug: "forgetsWithoutRow", ledger: ForgetsWithoutRow, what: "retire forgets the claim id when the key has no row", check: /without a row is refused/ },
  { bug: "retiredOnlyOnReleased", ledger: RetiredOnlyOnReleased, what: "claim checks retired ids only on released rows", check: /without a row is refused|own in-flight row/ },
  { bug: "releasesOthersRow", ledger: ReleasesOthersRow, what: "retire with release releases a row held under another claim id", check: /releases only the row in flight under its own claim id/ },
  { bug: "releasesWithoutRelease", ledger: ReleasesWithoutRelease, what: "retire releases the row although release is false", check: /release false \(or no options\)/ },
  { bug: "recognisesBeforeRetired", ledger: RecognisesBeforeRetired, what: "LEDGER-26 recognition runs before the retired check", check: /before LEDGER-26 recognition/ },
  { bug: "forgetsRetiredOnSweep", ledger: ForgetsRetiredOnSweep, what: "retired ids forgotten at the next sweep, retention ignored", check: /stays refused after sweep within the retention/ },
  { bug: "racyRetire", ledger: RacyRetire, what: "non-atomic retire: reads the row, awaits, then records and releases", check: /racing copies of the same claim/ },
];

const SEED = 20261201;
const subjectOf = (name: string, Ledger: typeof MemoryLedger): LedgerSubject => memoryLedgerSubject(name, Ledger);

async function certify(subject: LedgerSubject) {
  const checks = ledgerChecks(subject, { runs: 100, seed: SEED }).filter((c) => c.rule === "LEDGER-28");
  return runChecks(checks, { subject: subject.name, seed: SEED, runs: 100 });
}

describe("broken retire (LEDGER-28) is rejected", () => {
  it("control: the reference ledger passes every LEDGER-28 check, vector and the retire property", async () => {
    const report = await certify(subjectOf("memory-correct", MemoryLedger));
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(report.checks.filter((c) => c.status === "pass").length).toBeGreaterThanOrEqual(8 + 1 + 12);
  });

  it("a ledger without retire reports every LEDGER-28 check not applicable, and still conforms", async () => {
    class NoRetire extends MemoryLedger {
      constructor(options?: ConstructorParameters<typeof MemoryLedger>[0]) {
        super(options);
        (this.capabilities.supports as Record<string, unknown>).retire = false;
        (this as unknown as { retire?: unknown }).retire = undefined;
      }
    }
    const base = subjectOf("memory-no-retire", NoRetire);
    const subject: LedgerSubject = { ...base, capabilities: { ...base.capabilities, retire: false } };
    const checks = ledgerChecks(subject, { runs: 5, seed: SEED }).filter((c) => c.rule === "LEDGER-28" || c.rule === "LEDGER-14");
    const report = await runChecks(checks, { subject: subject.name, seed: SEED, runs: 5 });
    const retire = report.checks.filter((c) => c.rule === "LEDGER-28");
    expect(retire.length).toBeGreaterThanOrEqual(8 + 1 + 12);
    expect(retire.every((c) => c.status === "not_applicable" && /does not offer retire/.test(c.reasonNotApplicable ?? ""))).toBe(true);
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(report.rules.find((r) => r.rule === "LEDGER-28")?.status).toBe("not_applicable");
  });

  it("LEDGER-14: a subject that leaves retire undeclared while its ledger offers it fails the supports check", async () => {
    const base = subjectOf("memory-undeclared", MemoryLedger);
    const subject: LedgerSubject = { ...base, capabilities: { ...base.capabilities, retire: false } };
    const report = await runChecks(ledgerChecks(subject, { runs: 5, seed: SEED }).filter((c) => c.rule === "LEDGER-14" && /optional methods/.test(c.name)), { subject: subject.name });
    expect(report.checks[0]?.status).toBe("fail");
    expect(report.checks[0]?.error).toMatch(/retire/);
  });

  for (const { bug, ledger, what, check } of BROKEN) {
    it(`${bug} (${what}) fails LEDGER-28`, async () => {
      const report = await certify(subjectOf(`memory-${bug}`, ledger));
      expect(report.conforms).toBe(false);
      expect(report.rules.find((r) => r.rule === "LEDGER-28")?.status).toBe("fail");
      const failing = report.checks.filter((c) => c.status === "fail");
      const named = failing.find((c) => check.test(c.name));
      expect(named, `a failing LEDGER-28 check matching ${check} (failing: ${failing.map((c) => c.name).join(" | ")})`).toBeDefined();
      expect(named!.error).toBeTruthy();
    });
  }

  it("the retire property finds a planted bug, printing seed and path, and the path replays it", async () => {
    const subject = subjectOf("memory-recognisesBeforeRetired", RecognisesBeforeRetired);
    const property = (path?: string) =>
      ledgerChecks(subject, { runs: 200, seed: SEED, ...(path === undefined ? {} : { path }) }).filter((c) => c.name.startsWith("retire property"));
    const first = await runChecks(property(), { subject: subject.name });
    const result = first.checks[0]!;
    expect(result.status).toBe("fail");
    const cx = result.counterexample!;
    expect(cx.seed).toBe(SEED);
    expect(cx.path).toMatch(/^\d+(:\d+)*$/);
    expect(cx.violates).toBe("LEDGER-28");
    expect(result.error).toContain(`--seed ${SEED} --path "${cx.path}"`);
    expect(cx.timeline.at(-1)).toMatch(/✗ expected .*\(LEDGER-28\)$/);
    const replay = await runChecks(property(cx.path), { subject: subject.name });
    expect(replay.checks[0]!.status).toBe("fail");
    expect(replay.checks[0]!.counterexample!.timeline).toEqual(cx.timeline);
  });
});
