import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks, type Report } from "../src/index.js";
import { kvConversationSubject, type ConversationBugs } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * Planted bugs that exactly one deterministic check can see, beside
 * conversation-broken-stores.test.ts: each store must be rejected by the check named and by no
 * other deterministic check, so that the check is shown to hold its rule at this point rather
 * than repeat another. `model` names the rule the model-based check blames where a random
 * sequence reaches the bug too; where it is absent, the model must pass. `also` names the one
 * other check that stands on the same planted data and so must reject the store too.
 */
const BROKEN: Array<{ bug: keyof ConversationBugs; rule: string; what: string; check: RegExp; message: RegExp; model?: string; also?: RegExp }> = [
  // TURN-17: a row from before failedAt is listed at 0.
  { bug: "olderThanSkipsUnknown", rule: "TURN-17", what: "olderThanMs skips failures whose time was not kept", check: /failure time the store did not keep/, message: /0 is older than any age/ },
  // The tie-order check stands on the same rows (ties at failedAt 0), so it sees these two as well.
  { bug: "unknownFailedAtIsNow", rule: "TURN-17", what: "a failure without a kept time is listed as failed now", check: /failure time the store did not keep/, message: /its failure time was not kept/, also: /code point order/ },
  { bug: "cursorAtZeroRestarts", rule: "TURN-17", what: "a cursor at failedAt 0 is taken for no cursor", check: /failure time the store did not keep/, message: /still a cursor after 50 pages|a cursor after a turn failed at 0/, also: /code point order/ },
  // TURN-17: ties in failedAt by code point (UTF-8 byte order).
  { bug: "tiesByCodeUnit", rule: "TURN-17", what: "ties listed and paged in UTF-16 code unit order", check: /code point order/, message: /by conversation id and then message id in code point order/ },
  { bug: "cursorByCodeUnit", rule: "TURN-17", what: "ties listed by code point but the cursor resumes by code unit", check: /code point order/, message: /in pages of \d+/ },
  // TURN-14: committed turns kept, indexes never issued again.
  { bug: "prunesOldTurns", rule: "TURN-14", what: "only the last 64 committed turns are kept (the index still counts them all)", check: /committed turns are kept and no turn index is issued again/, message: /the number of turns stored/ },
  // TURN-1: the index is the committed count, read from storage.
  { bug: "reopenedAtBoundIndex", rule: "TURN-1", what: "a reopened message's turn begins at its first turn's index", check: /number of turns committed before it/, message: /begin the reopened m1/, model: "TURN-1" },
  { bug: "instanceCountCache", rule: "TURN-1", what: "beginTurn takes the committed count this instance last saw", check: /number of turns committed before it/, message: /on the first instance after the other's commit/, model: "TURN-1" },
];

const SEED = 20261203;

async function certify(bugs: ConversationBugs, name: string): Promise<Report> {
  const subject = kvConversationSubject(name, bugs);
  return runChecks(conversationStoreChecks(subject, { runs: 200, seed: SEED }), { subject: name, seed: SEED, runs: 200, levels: ["conversation"] });
}

describe("broken conversation stores that only one check rejects", () => {
  for (const { bug, rule, what, check, message, model, also } of BROKEN) {
    it(`${bug} (${what}) fails ${rule}, in that check${also === undefined ? " alone" : " and the one named"}`, async () => {
      const report = await certify({ [bug]: true }, `kv-${bug}`);
      expect(report.conforms).toBe(false);
      const property = report.checks.find((c) => c.name.startsWith("model-based"))!;
      if (model === undefined) expect(property.status, `the model-based check for ${bug}: ${property.error}`).toBe("pass");
      else {
        expect(property.status, `the model-based check for ${bug}`).toBe("fail");
        expect(property.counterexample!.violates, property.error).toBe(model);
        expect(property.error).toContain(`--seed ${SEED} --path "${property.counterexample!.path}"`);
      }
      const failing = report.checks.filter((c) => c.status === "fail" && c !== property && !(also !== undefined && also.test(c.name)));
      if (also !== undefined) expect(report.checks.find((c) => also.test(c.name))?.status, `the check matching ${also}`).toBe("fail");
      expect(failing.map((c) => `${c.rule} ${c.name}`), `the failing deterministic checks for ${bug}`).toHaveLength(1);
      expect(failing[0]!.rule).toBe(rule);
      expect(failing[0]!.name).toMatch(check);
      expect(failing[0]!.error).toMatch(message);
    });
  }
});
