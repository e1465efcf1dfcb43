import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks, type Report } from "../src/index.js";
import { kvConversationSubject, type ConversationBugs } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * Mutation round of 2026-12-03 at the conversation-store level: 13 bugs planted by an auditor who had not
 * read the lists beside this file. Ten the kit already rejected (kept as regressions); two it
 * certified, each now rejected by the check added for it (`new: true`); the third it certified, a
 * window counted from the latest failure, turned out to be conversation-broken-stores.test.ts's
 * reopenWindowFromLastFailure again and was replaced (round h-round) by a window on the process
 * clock, which the kit rejected already. Only the checks of the rule broken run, and the
 * model-based check where a random sequence reaches the bug.
 */
const BROKEN: Array<{ bug: keyof ConversationBugs; rule: string; what: string; check: RegExp; message?: RegExp; model?: string; new?: true }> = [
  { bug: "leaseLiveAtExpiry", rule: "TURN-10", what: "a lease is live at the millisecond it ends (>= for >)", check: /owner and length are checked|has expired from the instant it ends/, message: /once a 0 ms lease has run out|a lease is live only before leaseExpiresAt/ },
  { bug: "grantReplayBumpsFence", rule: "TURN-10", what: "an acquire re-sent with the live grant's id gets a new fence", check: /is that same grant/ },
  { bug: "grantReplayKeepsExpiry", rule: "TURN-10", what: "an acquire re-sent with the live grant's id does not restart the lease", check: /is that same grant/, message: /restarts the lease from now/ },
  { bug: "grantRecognisedAfterEnd", rule: "TURN-10", what: "a grant id re-sent after its lease ended takes the lease again under the old fence", check: /is that same grant/, message: /conversation_lease_lost/ },
  { bug: "cursorSkipsTies", rule: "TURN-17", what: "the listing cursor resumes strictly after its failedAt (same-millisecond ties skipped)", check: /listed by conversation id, then/ },
  { bug: "reopenKeepsFailure", rule: "TURN-12", what: "a reopened message keeps its old failure", check: /reopens it while it is the most recently bound/, model: "TURN-12" },
  { bug: "takeoverKeepsOwner", rule: "TURN-10", what: "an acquire over an expired lease keeps the old holder's owner string", check: /expired lease is taken with a higher fence/, model: "TURN-10" },
  { bug: "renewFromPreviousEnd", rule: "TURN-10", what: "renewLease extends from the previous end, not from now", check: /renew extends the lease from now/ },
  { bug: "leaseOnProcessClock", rule: "TURN-10", what: "acquireLease measures the lease on the process clock", check: /expired lease is taken with a higher fence/, model: "TURN-10" },
  { bug: "messageReadCache", rule: "TURN-5", what: "message() answers from the instance's first read (another instance's writes unseen)", check: /^model-based/, model: "TURN-11" },
  { bug: "grantIdFoldsCase", rule: "TURN-10", what: "grant ids compared case-insensitively", check: /grant ids are compared exactly/, message: /^grant ids that differ only in ASCII case:/, new: true },
  { bug: "grantIdTruncated", rule: "TURN-10", what: "grant ids cut to 32 characters (a CHAR(32) column)", check: /grant ids are compared exactly/, message: /^two 64-character grant ids that differ only in their last character:/, new: true },
  // Replaced in round h-round: the window counted from the latest failure planted here was reopenWindowFromLastFailure
  // of conversation-broken-stores.test.ts again (the same behaviour, the same check and case).
  { bug: "reopenWindowOnProcessClock", rule: "TURN-12", what: "the re-send window measured as Date.now() - firstFailedAt (the process clock against a failure time on the store's)", check: /reopens a failed message only while its failure is younger than the window/, message: /reopenWithinMs 0/ },
];

const SEED = 20261203;

/** As in conversation-broken-stores.test.ts: the model-based check runs only where `model` names the rule it must blame (its outcome is read only there). */
async function certify(bugs: ConversationBugs, name: string, rule?: string, model?: string): Promise<Report> {
  const subject = kvConversationSubject(name, bugs);
  const checks = conversationStoreChecks(subject, { runs: 200, seed: SEED }).filter(
    (c) => rule === undefined || c.rule === rule || (model !== undefined && c.name.startsWith("model-based")),
  );
  return runChecks(checks, { subject: name, seed: SEED, runs: 200, levels: ["conversation"] });
}

describe("mutation round of 2026-12-03: broken conversation stores are rejected with the rule they break", () => {
  for (const { bug, rule, what, check, message, model } of BROKEN) {
    it(`${bug} (${what}) fails ${rule}`, async () => {
      const report = await certify({ [bug]: true }, `kv-${bug}`, rule, model);
      expect(report.conforms).toBe(false);
      const failing = report.checks.filter((c) => c.status === "fail" && c.rule === rule);
      const named = failing.find((c) => check.test(c.name));
      expect(named, `a failing ${rule} check matching ${check} (failing: ${report.checks.filter((c) => c.status === "fail").map((c) => c.name).join(" | ")})`).toBeDefined();
      expect(named!.error).toBeTruthy();
      if (message !== undefined) expect(named!.error).toMatch(message);
      if (model !== undefined) {
        const property = report.checks.find((c) => c.name.startsWith("model-based"))!;
        expect(property.status, `the model-based check for ${bug}`).toBe("fail");
        expect(property.counterexample!.violates, property.error).toBe(model);
        expect(property.error).toContain(`--seed ${SEED} --path "${property.counterexample!.path}"`);
      }
    });
  }

  it("the new checks pass the same store without a bug", async () => {
    const rules = new Set(BROKEN.filter((b) => b.new).map((b) => b.rule));
    const report = await runChecks(
      conversationStoreChecks(kvConversationSubject("kv-correct"), { runs: 30, seed: SEED }).filter((c) => rules.has(c.rule)),
      { subject: "kv-correct", seed: SEED, runs: 30, levels: ["conversation"] },
    );
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
  });
});
