import { describe, expect, it } from "vitest";
import { MemoryConversationStore } from "@dispatch-once/core";
import { BOUND_AT_CHECKS, REOPEN_WINDOW_CHECKS, conversationStoreChecks, memoryConversationSubject, registerConversationStoreChecks, runChecks } from "../src/index.js";
import { kvConversationSubject } from "./conversation-fixtures/kv-conversation-store.js";

const runs = Number(process.env.CONFORMANCE_RUNS ?? 100);
const seed = process.env.CONFORMANCE_SEED === undefined ? undefined : Number(process.env.CONFORMANCE_SEED);
const options = { runs, ...(seed === undefined ? {} : { seed }) };

// The reference store through the runner-agnostic registration, as a store's own suite does it.
registerConversationStoreChecks(memoryConversationSubject(), { describe, it }, options);

// A second, independent store (JSON per conversation in a shared map, a lock per conversation)
// that declares restart and sharing, so the restart checks and the model's restart steps and
// cross-instance races run too.
registerConversationStoreChecks(kvConversationSubject("conversation-kv-reference"), { describe, it }, options);

describe("report for MemoryConversationStore", () => {
  it("conforms; only the capabilities it lacks are not applicable", async () => {
    const subject = memoryConversationSubject();
    const report = await runChecks(conversationStoreChecks(subject, options), { subject: subject.name, levels: ["conversation"] });
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(report.conforms).toBe(true);
    const status = Object.fromEntries(report.rules.map((r) => [r.rule, r.status]));
    for (const rule of ["TURN-2", "TURN-5", "TURN-7", "TURN-9", "TURN-10", "TURN-11", "TURN-12", "TURN-14", "TURN-15", "TURN-17", "RECORD-4"]) {
      expect(status[rule], rule).toBe("pass");
    }
    const na = report.checks.filter((c) => c.status === "not_applicable");
    expect(na.map((c) => c.reasonNotApplicable).sort()).toEqual([
      "needs corruption (raw.corrupt)",
      // One process's map, on that process's clock: no other instance to skew (TURN-10's store-clock check).
      "needs sharedAcrossProcesses (several instances are one store); needs clockSkew (raw.skewedInstance: an instance on a skewed process clock)",
      // An in-process map has no connection to go silent (TURN-21's two silent-store checks).
      "needs silentStore (raw.storeAddress and raw.openVia, for the kit's SilenceProxy in front of the storage, and limits.operationBoundMs, the store's documented bound)",
      "needs silentStore (raw.storeAddress and raw.openVia, for the kit's SilenceProxy in front of the storage, and limits.operationBoundMs, the store's documented bound)",
      "needs survivesRestart (a fresh instance sees earlier writes)",
      "needs survivesRestart (a fresh instance sees earlier writes)",
      "needs survivesRestart (a fresh instance sees earlier writes)",
      "needs survivesRestart (a fresh instance sees earlier writes)",
      "needs unavailability (raw.disconnected)",
    ]);
  });

  it("hands out the reference store itself", async () => {
    const fixture = await memoryConversationSubject().create();
    expect(fixture.store).toBeInstanceOf(MemoryConversationStore);
    expect(fixture.store.capabilities).toEqual({ durability: "volatile", clock: "process", sharedAcrossProcesses: false, recordsWithCommit: true, supports: { leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true } });
    expect(await fixture.reopen()).toBe(fixture.store);
    await fixture.destroy();
  });

  it("TURN-12's re-send window checks are not applicable to a subject that does not declare reopenWindow (a third-party store written before it), and fail one that declares it for a store without supports.reopenWindow", async () => {
    const names = new Set(REOPEN_WINDOW_CHECKS.map((c) => c.name));
    const windowChecks = (subject: ReturnType<typeof memoryConversationSubject>) => conversationStoreChecks(subject, options).filter((c) => names.has(c.name));
    const reference = memoryConversationSubject();
    const { reopenWindow: _declared, ...undeclaredCapabilities } = reference.capabilities;
    const undeclared = await runChecks(windowChecks({ ...reference, capabilities: undeclaredCapabilities }), { subject: "undeclared", levels: ["conversation"] });
    expect(undeclared.checks.map((c) => [c.rule, c.status, c.reasonNotApplicable])).toEqual(
      ["TURN-12", "TURN-12", "TURN-12", "TURN-12", "TURN-17"].map((rule) => [rule, "not_applicable", "needs reopenWindow (appendUserMessage takes reopenWithinMs: supports.reopenWindow)"]),
    );
    const declared = await runChecks(windowChecks(reference), { subject: "reference", levels: ["conversation"] });
    expect(declared.checks.map((c) => c.status)).toEqual(["pass", "pass", "pass", "pass", "pass"]);
    const without = {
      ...reference,
      async create() {
        const fixture = await reference.create();
        Object.defineProperty(fixture.store, "capabilities", { value: { ...fixture.store.capabilities, supports: { leaseGrants: true } } });
        return fixture;
      },
    };
    const failed = await runChecks(windowChecks(without), { subject: "without", levels: ["conversation"] });
    expect(failed.checks.map((c) => c.status)).toEqual(["fail", "fail", "fail", "fail", "fail"]);
    for (const c of failed.checks) expect(c.error).toMatch(/declares reopenWindow, but the store's capabilities.supports.reopenWindow is undefined/);
  });

  it("TURN-11's and TURN-12's boundAt checks are not applicable to a subject that does not declare boundAt; TURN-11's fails one that declares it for a store without supports.boundAt", async () => {
    const names = new Set(BOUND_AT_CHECKS.map((c) => c.name));
    const boundChecks = (subject: ReturnType<typeof memoryConversationSubject>) => conversationStoreChecks(subject, options).filter((c) => names.has(c.name));
    const reference = memoryConversationSubject();
    const { boundAt: _declared, ...undeclaredCapabilities } = reference.capabilities;
    const undeclared = await runChecks(boundChecks({ ...reference, capabilities: undeclaredCapabilities }), { subject: "undeclared", levels: ["conversation"] });
    const notApplicable = "needs boundAt (a bound message shows its first binding's time: supports.boundAt)";
    expect(undeclared.checks.map((c) => [c.rule, c.status, c.reasonNotApplicable])).toEqual([["TURN-11", "not_applicable", notApplicable], ["TURN-12", "not_applicable", notApplicable], ["TURN-12", "not_applicable", notApplicable]]);
    const declared = await runChecks(boundChecks(reference), { subject: "reference", levels: ["conversation"] });
    expect(declared.checks.map((c) => c.status)).toEqual(["pass", "pass", "pass"]);
    const without = {
      ...reference,
      async create() {
        const fixture = await reference.create();
        Object.defineProperty(fixture.store, "capabilities", { value: { ...fixture.store.capabilities, supports: { leaseGrants: true, reopenWindow: true } } });
        return fixture;
      },
    };
    const failed = await runChecks(boundChecks(without), { subject: "without", levels: ["conversation"] });
    expect(failed.checks.map((c) => c.status)).toEqual(["fail", "pass", "pass"]);
    expect(failed.checks[0]!.error).toMatch(/declares boundAt, but the store's capabilities.supports.boundAt is undefined/);
  });

  it("TURN-17 is not applicable to a subject that does not declare listFailedTurns, and fails one that declares it for a store without the method", async () => {
    const turn17 = (subject: ReturnType<typeof memoryConversationSubject>) => conversationStoreChecks(subject, options).filter((c) => c.rule === "TURN-17");
    const reference = memoryConversationSubject();
    const { listFailedTurns: _declared, ...undeclaredCapabilities } = reference.capabilities;
    const undeclared = await runChecks(turn17({ ...reference, capabilities: undeclaredCapabilities }), { subject: "undeclared", levels: ["conversation"] });
    expect(undeclared.checks.length).toBe(11);
    expect(new Set(undeclared.checks.map((c) => `${c.status}: ${c.reasonNotApplicable}`))).toEqual(new Set(["not_applicable: needs listFailedTurns (the store offers listFailedTurns)"]));
    const without = {
      ...reference,
      async create() {
        const fixture = await reference.create();
        (fixture.store as { listFailedTurns?: unknown }).listFailedTurns = undefined;
        return fixture;
      },
    };
    const failed = await runChecks(turn17(without), { subject: "without", levels: ["conversation"] });
    expect(failed.checks.map((c) => c.status)).toEqual(Array(11).fill("fail"));
    for (const c of failed.checks) expect(c.error).toMatch(/declares listFailedTurns, but the store has no listFailedTurns method/);
  });

  it("TURN-17's check of rows from before failedAt is not applicable without legacyFailedRows (optional: a subject written before it still loads), and fails a subject that declares it without raw.forgetFailedAt", async () => {
    const legacy = (subject: ReturnType<typeof memoryConversationSubject>) => conversationStoreChecks(subject, options).filter((c) => c.name.includes("failure time the store did not keep"));
    const reference = memoryConversationSubject();
    const { legacyFailedRows: _declared, ...older } = reference.capabilities;
    const undeclared = await runChecks(legacy({ ...reference, capabilities: older }), { subject: "older", levels: ["conversation"] });
    expect(undeclared.checks.map((c) => [c.rule, c.status, c.reasonNotApplicable])).toEqual([
      ["TURN-17", "not_applicable", "needs legacyFailedRows (raw.forgetFailedAt writes a failed message as a store from before failedAt left it)"],
    ]);
    const declared = await runChecks(legacy(reference), { subject: "reference", levels: ["conversation"] });
    expect(declared.checks.map((c) => c.status)).toEqual(["pass"]);
    const without = {
      ...reference,
      async create() {
        const fixture = await reference.create();
        delete (fixture.raw as { forgetFailedAt?: unknown }).forgetFailedAt;
        return fixture;
      },
    };
    const failed = await runChecks(legacy(without), { subject: "without", levels: ["conversation"] });
    expect(failed.checks.map((c) => c.status)).toEqual(["fail"]);
    expect(failed.checks[0]!.error).toMatch(/declares legacyFailedRows, but its raw hooks have no forgetFailedAt/);
    expect(() => conversationStoreChecks({ ...reference, capabilities: { ...older, legacyFailedRows: "yes" as never } })).toThrow(/capabilities.legacyFailedRows, when given, must be true or false/);
  });

  it("refuses a subject that does not declare its capabilities", () => {
    const bad = { name: "x", capabilities: { sharedAcrossProcesses: true }, create: async () => { throw new Error("unused"); } };
    expect(() => conversationStoreChecks(bad as never)).toThrow(/capabilities.survivesRestart must be declared/);
  });
});
