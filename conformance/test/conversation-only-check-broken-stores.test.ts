import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks, type Report } from "../src/index.js";
import { kvConversationSubject, type ConversationBugs } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * Planted bugs that exactly one check can see, beside conversation-broken-stores.test.ts: each
 * store must be rejected by the check named and by no other (the model-based check included),
 * so that the check is shown to be the one holding its rule at this point, not a duplicate.
 */
const BROKEN: Array<{ bug: keyof ConversationBugs; rule: string; what: string; check: RegExp; message: RegExp }> = [
  // TURN-17: a row from before failedAt is listed at 0.
  { bug: "unknownFailedAtIsNow", rule: "TURN-17", what: "a failure without a kept time is listed as failed now", check: /failure time the store did not keep/, message: /its failure time was not kept/ },
  { bug: "cursorAtZeroRestarts", rule: "TURN-17", what: "a cursor at failedAt 0 is taken for no cursor", check: /failure time the store did not keep/, message: /still a cursor after 50 pages|a cursor after a turn failed at 0/ },
];

const SEED = 20261203;

async function certify(bugs: ConversationBugs, name: string): Promise<Report> {
  const subject = kvConversationSubject(name, bugs);
  return runChecks(conversationStoreChecks(subject, { runs: 200, seed: SEED }), { subject: name, seed: SEED, runs: 200, levels: ["conversation"] });
}

describe("broken conversation stores that only one check rejects", () => {
  for (const { bug, rule, what, check, message } of BROKEN) {
    it(`${bug} (${what}) fails ${rule}, in that check alone`, async () => {
      const report = await certify({ [bug]: true }, `kv-${bug}`);
      expect(report.conforms).toBe(false);
      const failing = report.checks.filter((c) => c.status === "fail");
      expect(failing.map((c) => `${c.rule} ${c.name}`), `the failing checks for ${bug}`).toHaveLength(1);
      expect(failing[0]!.rule).toBe(rule);
      expect(failing[0]!.name).toMatch(check);
      expect(failing[0]!.error).toMatch(message);
    });
  }
});
