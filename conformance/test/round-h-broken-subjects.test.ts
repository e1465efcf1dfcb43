import { describe, expect, it } from "vitest";
import { conversationStoreChecks, ledgerChecks, runChecks, type Check, type Report } from "../src/index.js";
import { kvSubject } from "./fixtures/kv-ledger.js";
import { kvConversationSubject } from "./conversation-fixtures/kv-conversation-store.js";
import { ROUND_H_CONVERSATION, ROUND_H_LEDGER, type RoundBug } from "./fixtures/round-h-bugs.js";

/**
 * Mutation round h-round at both levels (the lists and what each bug is: fixtures/round-h-bugs.ts).
 * CI time: each planted subject runs the one check that rejects it and stops there; the new checks
 * run once more against the same subjects without a bug.
 */
const SEED = 20261204;

function only<B>(checks: Check[], bug: RoundBug<B>): Check[] {
  const picked = checks.filter((c) => c.rule === bug.rule && bug.check.test(c.name));
  expect(picked.map((c) => c.name), `exactly one ${bug.rule} check matching ${bug.check}`).toHaveLength(1);
  return picked;
}

function rejected<B>(report: Report, bug: RoundBug<B>): void {
  expect(report.conforms).toBe(false);
  const [check] = report.checks;
  expect(check!.status, `${check!.rule} ${check!.name}`).toBe("fail");
  expect(check!.error).toBeTruthy();
  if (bug.message !== undefined) expect(check!.error).toMatch(bug.message);
}

describe("mutation round h-round: broken ledgers are rejected by the check of the rule they break", () => {
  for (const bug of ROUND_H_LEDGER) {
    it(`${String(bug.bug)} (${bug.what}) fails ${bug.rule}`, async () => {
      const subject = kvSubject(`kv-${String(bug.bug)}`, { [bug.bug]: true });
      rejected(await runChecks(only(ledgerChecks(subject, { runs: 30, seed: SEED }), bug), { subject: subject.name, seed: SEED }), bug);
    });
  }

  it("the new checks pass the same ledger without a bug", async () => {
    const fresh = ROUND_H_LEDGER.filter((b) => b.new);
    const checks = ledgerChecks(kvSubject("kv-correct"), { runs: 30, seed: SEED }).filter((c) => fresh.some((b) => c.rule === b.rule && b.check.test(c.name)));
    expect(checks).toHaveLength(fresh.length);
    const report = await runChecks(checks, { subject: "kv-correct", seed: SEED });
    expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
  });
});

describe("mutation round h-round: broken conversation stores are rejected by the check of the rule they break", () => {
  for (const bug of ROUND_H_CONVERSATION) {
    it(`${String(bug.bug)} (${bug.what}) fails ${bug.rule}`, async () => {
      const subject = kvConversationSubject(`kv-${String(bug.bug)}`, { [bug.bug]: true });
      const checks = only(conversationStoreChecks(subject, { runs: 30, seed: SEED }), bug);
      rejected(await runChecks(checks, { subject: subject.name, seed: SEED, levels: ["conversation"] }), bug);
    });
  }

  it("the new checks pass the same store without a bug", async () => {
    const fresh = ROUND_H_CONVERSATION.filter((b) => b.new);
    const checks = conversationStoreChecks(kvConversationSubject("kv-correct"), { runs: 30, seed: SEED }).filter((c) => fresh.some((b) => c.rule === b.rule && b.check.test(c.name)));
    expect(checks).toHaveLength(fresh.length);
    const report = await runChecks(checks, { subject: "kv-correct", seed: SEED, levels: ["conversation"] });
    expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
  });
});
