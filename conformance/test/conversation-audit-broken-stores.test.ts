import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks, type Report } from "../src/index.js";
import { kvConversationSubject, type ConversationBugs } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * Audit mutants of the conversation-store level, beside conversation-broken-stores.test.ts: each
 * store carries one planted bug that was not planted before, and must be rejected with the rule it
 * breaks, by the deterministic check named and by the model-based check (the rule it blames).
 */
const BROKEN: Array<{ bug: keyof ConversationBugs; rule: string; what: string; check: RegExp; model: string }> = [
  { bug: "commitIgnoresCount", rule: "TURN-5", what: "commitTurn compares fence and message but not the turn count (lost update)", check: /turn index other than the committed count/, model: "TURN-5" },
  { bug: "failIgnoresFence", rule: "TURN-10", what: "failMessage takes a stale fence", check: /old fence gets conversation_lease_lost/, model: "TURN-10" },
  { bug: "renewIgnoresFence", rule: "TURN-10", what: "renewLease with a stale fence extends the new holder's lease", check: /old fence gets conversation_lease_lost/, model: "TURN-10" },
  { bug: "releaseIgnoresFence", rule: "TURN-10", what: "releaseLease with a stale fence frees the new holder's lease", check: /stale release is ignored/, model: "TURN-10" },
  { bug: "beginIgnoresFence", rule: "TURN-10", what: "beginTurn takes a stale fence", check: /old fence gets conversation_lease_lost/, model: "TURN-10" },
  { bug: "reentrantSameOwner", rule: "TURN-10", what: "acquireLease is re-entrant for the same owner string", check: /exclusive while live/, model: "TURN-10" },
  { bug: "begunNotDurable", rule: "TURN-15", what: "the fence that began a turn index is kept per instance", check: /resumed survives a restart/, model: "TURN-15" },
  { bug: "resendRequeuesAnswered", rule: "TURN-2", what: "a re-send of an answered message queues it again", check: /re-send of an answered message/, model: "TURN-2" },
  { bug: "indexCountsBindings", rule: "TURN-12", what: "the stored binding after a failed turn is the next index", check: /new message after a failed turn takes the failed turn's index/, model: "TURN-11" },
  { bug: "failAnyState", rule: "RECORD-4", what: "failMessage fails an answered message", check: /a message not in progress cannot fail/, model: "TURN-12" },
];

const SEED = 20261130;

/** The checks of the rule a bug breaks and the model-based check (as in conversation-broken-stores.test.ts). */
async function certify(bugs: ConversationBugs, name: string, rule: string): Promise<Report> {
  const subject = kvConversationSubject(name, bugs);
  const checks = conversationStoreChecks(subject, { runs: 200, seed: SEED }).filter((c) => c.rule === rule || c.name.startsWith("model-based"));
  return runChecks(checks, { subject: name, seed: SEED, runs: 200, levels: ["conversation"] });
}

describe("audit: more broken conversation stores are rejected with the rule they break", () => {
  for (const { bug, rule, what, check, model } of BROKEN) {
    it(`${bug} (${what}) fails ${rule}`, async () => {
      const report = await certify({ [bug]: true }, `kv-${bug}`, rule);
      expect(report.conforms).toBe(false);
      const failing = report.checks.filter((c) => c.status === "fail" && c.rule === rule);
      const named = failing.find((c) => check.test(c.name));
      expect(named, `a failing ${rule} check matching ${check} (failing: ${report.checks.filter((c) => c.status === "fail").map((c) => c.name).join(" | ")})`).toBeDefined();
      const property = report.checks.find((c) => c.name.startsWith("model-based"))!;
      expect(property.status, `the model-based check for ${bug}`).toBe("fail");
      expect(property.counterexample!.violates, property.error).toBe(model);
      expect(property.error).toContain(`--seed ${SEED} --path "${property.counterexample!.path}"`);
    });
  }
});
