/**
 * LEDGER-14 and LEDGER-20: the declared capabilities, and that they agree with the subject.
 */
import { must, mustEqual, show } from "../../failure.js";
import { withFixture } from "../support.js";
import { type LedgerCheckSpec } from "./common.js";

export const capabilitiesDeclared: LedgerCheckSpec = {
  rule: "LEDGER-14",
  name: "capabilities declare durability, clock, sharedAcrossProcesses and maxResultBytes",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const c = fixture.ledger.capabilities as unknown as Record<string, unknown>;
      must(c !== undefined && c !== null, "ledger.capabilities is missing");
      must(c.durability === "durable" || c.durability === "volatile", `capabilities.durability is ${show(c.durability)}, expected "durable" or "volatile"`);
      must(c.clock === "store" || c.clock === "process", `capabilities.clock is ${show(c.clock)}`);
      must(typeof c.sharedAcrossProcesses === "boolean", `capabilities.sharedAcrossProcesses is ${show(c.sharedAcrossProcesses)}`);
      must(Number.isSafeInteger(c.maxResultBytes) && (c.maxResultBytes as number) > 0, `capabilities.maxResultBytes is ${show(c.maxResultBytes)}`);
    }),
};

export const capabilitiesAgreeWithSubject: LedgerCheckSpec = {
  rule: "LEDGER-14",
  name: "declared capabilities agree with the subject's (shared store, durable only if it survives restart)",
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      const c = fixture.ledger.capabilities;
      mustEqual(c.sharedAcrossProcesses, ctx.subject.capabilities.sharedAcrossProcesses, "ledger vs subject sharedAcrossProcesses");
      if (c.durability === "durable") {
        must(ctx.subject.capabilities.survivesRestart, "a ledger declaring durability \"durable\" must survive a restart (ctx.subject.capabilities.survivesRestart)");
      }
      const reopened = await fixture.reopen();
      mustEqual(reopened.capabilities.durability, c.durability, "durability of a reopened instance");
    }),
};

export const sharedLedgerDeclaresStoreClock: LedgerCheckSpec = {
  rule: "LEDGER-20",
  name: "a ledger shared across processes measures leases on the store's clock",
  needs: ["sharedAcrossProcesses"],
  run: (ctx) =>
    withFixture(ctx.subject, async (fixture) => {
      mustEqual(fixture.ledger.capabilities.clock, "store", "capabilities.clock of a ledger shared across processes");
    }),
};

/** Every check of this file, in order. */
export const CAPABILITIES_CHECKS: readonly LedgerCheckSpec[] = [capabilitiesDeclared, capabilitiesAgreeWithSubject, sharedLedgerDeclaresStoreClock];
