import { describe, expect, it } from "vitest";
import { MemoryLedger } from "@dispatch-once/core";
import { ledgerChecks, memoryLedgerSubject, registerLedgerChecks, runChecks } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";

const runs = Number(process.env.CONFORMANCE_RUNS ?? 100);
const seed = process.env.CONFORMANCE_SEED === undefined ? undefined : Number(process.env.CONFORMANCE_SEED);
const options = { runs, ...(seed === undefined ? {} : { seed }) };

// The reference ledger through the runner-agnostic registration, as an adapter's suite would do it.
registerLedgerChecks(memoryLedgerSubject(), { describe, it }, options);

// A second, independent ledger (JSON text in a shared KV store) that declares every capability,
// so the restart, multi-instance, corruption and unavailability checks run too.
registerLedgerChecks(kvSubject("kv-reference"), { describe, it }, options);

describe("report for the in-memory ledger", () => {
  it("conforms, with only the capabilities it lacks reported not applicable", async () => {
    const subject = memoryLedgerSubject();
    const report = await runChecks(ledgerChecks(subject, options), { subject: subject.name });
    expect(report.conforms).toBe(true);
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    const status = Object.fromEntries(report.rules.map((r) => [r.rule, r.status]));
    // In-process rows have no bytes to corrupt and no connection to lose.
    expect(status["LEDGER-11"]).toBe("not_applicable");
    expect(status["LEDGER-12"]).toBe("not_applicable");
    // One process: the cross-process clock rule has nothing to apply to.
    expect(status["LEDGER-20"]).toBe("not_applicable");
    for (let n = 1; n <= 21; n++) {
      if (n === 11 || n === 12 || n === 20) continue;
      expect(status[`LEDGER-${n}`], `LEDGER-${n}`).toBe("pass");
    }
    const restart = report.checks.filter((c) => c.name.includes("restart") && c.status === "not_applicable");
    expect(restart.length).toBeGreaterThan(0);
    for (const c of restart) expect(c.reasonNotApplicable).toContain("survivesRestart");
  });

  it("reports the memory ledger's declared capabilities as they are", async () => {
    const fixture = await memoryLedgerSubject().create({ maxResultBytes: 4096 });
    expect(fixture.ledger).toBeInstanceOf(MemoryLedger);
    expect(fixture.ledger.capabilities).toMatchObject({ durability: "volatile", sharedAcrossProcesses: false, maxResultBytes: 4096 });
    expect(await fixture.reopen()).toBe(fixture.ledger);
    await fixture.destroy();
  });

  it("marks checks needing an undeclared capability not applicable instead of skipping them", () => {
    const checks = ledgerChecks(memoryLedgerSubject(), { runs: 1, seed: 1 });
    const na = checks.filter((c) => !c.applicable);
    expect(na.map((c) => c.rule)).toEqual(expect.arrayContaining(["LEDGER-11", "LEDGER-12", "LEDGER-6"]));
    for (const c of na) expect(c.reasonNotApplicable).toMatch(/^needs /);
    // Every vector of spec/vectors/ledger-transitions.json becomes a check named by its rule and id.
    expect(checks.filter((c) => c.name.startsWith("vector LT-")).length).toBeGreaterThanOrEqual(48);
    // LEDGER-21 is certified by its own deterministic checks and vectors, not only by the model.
    expect(checks.filter((c) => c.rule === "LEDGER-21" && !c.name.startsWith("vector")).length).toBeGreaterThanOrEqual(7);
    expect(checks.filter((c) => c.rule === "LEDGER-21" && c.name.startsWith("vector")).length).toBeGreaterThanOrEqual(9);
  });
});

describe("LEDGER-14, LEDGER-25: a subject written before the listExpiredInFlight declaration", () => {
  const only = (subject: ReturnType<typeof memoryLedgerSubject>) =>
    ledgerChecks(subject, options).filter((c) => c.rule === "LEDGER-25" || (c.rule === "LEDGER-14" && c.name.startsWith("capabilities.supports")));

  it("leaving it out is not a failure: the LEDGER-25 checks are reported not applicable, by name, with the reason", async () => {
    const base = memoryLedgerSubject();
    const { listExpiredInFlight: _left, ...capabilities } = base.capabilities;
    const report = await runChecks(only({ ...base, capabilities }), { subject: "memory-undeclared" });
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    const listed = report.checks.filter((c) => c.rule === "LEDGER-25");
    expect(listed.length).toBeGreaterThan(0);
    for (const check of listed) {
      expect(check.status).toBe("not_applicable");
      expect(check.reasonNotApplicable).toContain("declare listExpiredInFlight");
    }
  });

  it("declaring it false while the ledger offers it fails LEDGER-14; declaring it true runs the LEDGER-25 checks", async () => {
    const base = memoryLedgerSubject();
    const denied = await runChecks(only({ ...base, capabilities: { ...base.capabilities, listExpiredInFlight: false } }), { subject: "memory-denied" });
    expect(denied.checks.find((c) => c.rule === "LEDGER-14")).toMatchObject({ status: "fail", error: expect.stringContaining("listExpiredInFlight") });
    const declared = await runChecks(only(base), { subject: "memory-declared" });
    expect(declared.checks.filter((c) => c.rule === "LEDGER-25").every((c) => c.status === "pass")).toBe(true);
  });
});
