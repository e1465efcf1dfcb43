import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks, type Report } from "../src/index.js";
import { kvConversationSubject, type ConversationBugs } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * The kit proves its power: each store below carries one planted bug and must be rejected,
 * with the rule it breaks failing in the deterministic check written for it (`check`). `model`
 * names the rule the model-based check must blame in its shrunk counterexample, for the bugs a
 * random sequence of operations reaches.
 */
const BROKEN: Array<{ bug: keyof ConversationBugs; rule: string; what: string; check: RegExp; model?: string; message?: RegExp }> = [
  { bug: "commitIgnoresFence", rule: "TURN-5", what: "commitTurn ignores the fence", check: /stale fence is refused/, model: "TURN-5" },
  { bug: "commitChecksCountOnly", rule: "TURN-5", what: "commitTurn checks the turn count only", check: /not in progress .* is refused/, model: "TURN-5" },
  { bug: "racyCommit", rule: "TURN-5", what: "commitTurn checks, yields, then writes without the lock", check: /8 concurrent commits/, model: "TURN-5" },
  { bug: "appendNotIdempotent", rule: "TURN-2", what: "a re-send appends a second message", check: /re-send of a message id/, model: "TURN-2" },
  { bug: "acquireIgnoresExpiry", rule: "TURN-10", what: "acquireLease grants a live lease", check: /exclusive while live/, model: "TURN-10" },
  { bug: "leaseArgumentsUnchecked", rule: "TURN-10", what: "acquireLease and renewLease take any owner and leaseMs", check: /owner and length are checked/ },
  { bug: "fenceRestartsOnRelease", rule: "TURN-10", what: "the fence restarts at 1 after a release", check: /higher than all earlier ones/, model: "TURN-10" },
  // TURN-10's lease grant ids: the model sends none, so only these checks can catch them.
  { bug: "grantIdIgnored", rule: "TURN-10", what: "a re-sent acquire with its grant id meets its own grant as held", check: /is that same grant/, message: /expected the lease to be acquired/ },
  { bug: "grantByOwner", rule: "TURN-10", what: "an acquire with any grant id is the live grant of the same owner string", check: /another grant id, or none, meets a live grant as held/ },
  { bug: "grantIdOutlivesGrant", rule: "TURN-10", what: "a grant id is matched without its fence, and outlives a grant made without one", check: /after its lease expired and another holder took it/, message: /worker-c holds the lease without a grant id/ },
  { bug: "forgetsEarlierGrants", rule: "TURN-10", what: "only the latest grant id is kept: a late copy of an earlier grant takes a free lease", check: /a copy of an earlier grant's acquire/, message: /g1's late copy while the lease is free/ },
  { bug: "givenBackForgotten", rule: "TURN-10", what: "a give-back of a grant id no grant carries keeps nothing: a late copy of that acquire takes a free lease", check: /given back before any grant carried it/, message: /g0's late copy while the lease is free/ },
  { bug: "releaseGrantIgnoresId", rule: "TURN-10", what: "releaseLeaseGrant frees whatever grant holds the lease", check: /releaseLeaseGrant gives back exactly the grant/ },
  { bug: "grantIdUnchecked", rule: "TURN-10", what: "grant ids are not checked", check: /grant id not of LEASE_GRANT_ID_PATTERN's form is refused/, message: /grantId|invalid_store_input/ },
  { bug: "reopensAfterOtherBound", rule: "TURN-12", what: "a re-send reopens a failed message after another was bound", check: /after another message was bound/, model: "TURN-12" },
  // The model's records are not failed-turn records of a message: only the deterministic check catches it.
  { bug: "reopenDropsFailedRecords", rule: "TURN-12", what: "a reopen drops the message's failed-turn records (a runner cannot date its first failure)", check: /reopens it while it is the most recently bound/, message: /records after the reopen/ },
  // TURN-12's re-send window: the model sends no window, so only its checks can catch it.
  { bug: "reopenWindowIgnored", rule: "TURN-12", what: "reopenWithinMs is ignored (supports.reopenWindow declared)", check: /reopens a failed message only while its failure is younger than the window/, message: /reopenWithinMs 0/ },
  { bug: "reopenedHidesFirstFailure", rule: "TURN-12", what: "a reopened message does not show firstFailedAt (a resumed retry cannot check its window)", check: /a reopened message shows firstFailedAt/, message: /must show firstFailedAt/ },
  { bug: "bindingHidesBoundAt", rule: "TURN-11", what: "a bound message does not show boundAt (a runner cannot date a message that never failed)", check: /a bound message shows boundAt/, message: /must show boundAt/ },
  { bug: "reopenWindowIgnoresBinding", rule: "TURN-12", what: "the re-send window counts from the first failure only, not from the earlier binding (supports.boundAt declared)", check: /counts from it when it is earlier than the first failure/, message: /counted from its binding|listed with reopenWithinMs 300/ },
  { bug: "boundAtNotInherited", rule: "TURN-12", what: "a message bound at a failed message's index is dated by its own binding (its calls meet older rows)", check: /takes that message's window start as its boundAt/, message: /boundAt must be m1's/ },
  { bug: "boundNotSaid", rule: "TURN-12", what: "beginTurn does not say which call bound the message (a new message's first run cannot be told from a take-over)", check: /takes that message's window start as its boundAt/, message: /bound of the beginTurn that binds m1/ },
  { bug: "reopenWindowFromLastFailure", rule: "TURN-12", what: "the re-send window is measured from the last failure (a retry that fails again restarts it)", check: /counts from a message's first failure/, message: /reopenWithinMs 300/ },
  { bug: "listReopenableIgnoresWindow", rule: "TURN-17", what: "listFailedTurns ignores reopenWithinMs: reopenable true for a re-send the window refuses", check: /with reopenWithinMs, a listed failed turn says reopenable exactly/, message: /reopenWithinMs 300/ },
  { bug: "listWindowFromLastFailure", rule: "TURN-17", what: "listFailedTurns judges reopenWithinMs from the last failure", check: /with reopenWithinMs, a listed failed turn says reopenable exactly/, message: /reopenWithinMs 300/ },
  { bug: "lifo", rule: "TURN-9", what: "beginTurn binds the newest queued message", check: /arrival order/, model: "TURN-9" },
  { bug: "rebindsOnTakeover", rule: "TURN-11", what: "a new lease holder binds the newest message instead of the bound one", check: /new lease holder gets the bound message/, model: "TURN-9" },
  { bug: "recordsInLog", rule: "RECORD-4", what: "records are appended to the log", check: /beside the log/, model: "RECORD-4" },
  { bug: "commitRecordAlways", rule: "TURN-5", what: "a commit's record is kept when the commit is refused", check: /commit's record/ },
  { bug: "commitRecordDropped", rule: "TURN-5", what: "a commit's record is dropped (recordsWithCommit declared)", check: /commit's record/ },
  { bug: "forgetsOnRestart", rule: "TURN-14", what: "a fresh instance sees nothing (declared durable)", check: /fresh instance sees every message/ },
  { bug: "fenceResetsOnRestart", rule: "TURN-14", what: "the fence counter restarts with each instance", check: /never goes backwards/, model: "TURN-10" },
  { bug: "resumedOnlyInProgress", rule: "TURN-15", what: "resumed only for a message found in progress (not a reopened one)", check: /begun under an earlier lease grant/, model: "TURN-15" },
  { bug: "dataUnchecked", rule: "TURN-18", what: "data JSON cannot carry is kept (a NaN as null)", check: /JSON cannot carry is refused/ },
  { bug: "latin1Content", rule: "TURN-7", what: "non-ASCII content comes back mangled", check: /come back deep-equal/, model: "TURN-7" },
  { bug: "conversationIdsFoldCase", rule: "TURN-19", what: "conversation ids compared case-insensitively", check: /ids are compared exactly/, message: /^conversation ids that differ only in ASCII case:/ },
  { bug: "messageIdsFoldCase", rule: "TURN-19", what: "message ids compared case-insensitively", check: /ids are compared exactly/, message: /^message ids that differ only in ASCII case:/ },
  { bug: "messageIdsTruncated", rule: "TURN-19", what: "message ids cut to 64 characters", check: /ids are compared exactly/, message: /^two 128-character message ids that differ only in their last character:/ },
  // The model does not list failed turns: only the deterministic TURN-17 checks can catch these.
  { bug: "listsEveryFailedReopenable", rule: "TURN-17", what: "listFailedTurns says reopenable for every failed message, also after another was bound", check: /reopenable exactly when a re-send would reopen/, message: /after another message was bound at its index/ },
  { bug: "listsReopened", rule: "TURN-17", what: "listFailedTurns lists reopened messages (an index a reopen does not remove from)", check: /lists exactly the messages in state failed/, message: /expected exactly the failed messages/ },
  { bug: "failedAtProcessClock", rule: "TURN-17", what: "failedAt stamped with the process clock, not the store's", check: /lists exactly the messages in state failed/, message: /must be on the store's clock/ },
  { bug: "listOrderById", rule: "TURN-17", what: "listFailedTurns orders by ids only, not by failedAt first", check: /orders by \(failedAt, conversation id, message id\)/ },
  { bug: "ignoresLimit", rule: "TURN-17", what: "listFailedTurns ignores the limit given (pages of 100)", check: /at most limit per page/, message: /exactly limit/ },
  { bug: "limitUnchecked", rule: "TURN-17", what: "listFailedTurns serves a limit above 1000", check: /at most limit per page/, message: /limit: 1001/ },
  { bug: "cursorInclusive", rule: "TURN-17", what: "the cursor resumes at the last listed turn (each page repeats it)", check: /cursor lists every turn that stays failed exactly once/, message: /listed twice/ },
  { bug: "cursorIsOffset", rule: "TURN-17", what: "the cursor is an offset (a listed turn that is reopened makes the next page skip one)", check: /cursor lists every turn that stays failed exactly once/, message: /never listed/ },
  { bug: "ignoresConversationFilter", rule: "TURN-17", what: "listFailedTurns ignores conversationId", check: /conversationId \}\) lists exactly that conversation's/ },
  { bug: "olderThanProcessClock", rule: "TURN-17", what: "olderThanMs counted on the process clock, failedAt on the store's", check: /olderThanMs \}\) counts on the store's clock/ },
  { bug: "listingRecordsItself", rule: "TURN-17", what: "listFailedTurns writes a record of each listing", check: /is read-only/ },
  { bug: "stalledIgnoresLiveLease", rule: "TURN-22", what: "listStalledMessages lists a live runner's message too (the lease not read)", check: /lists exactly the messages in progress whose lease expired or was released/, message: /no live lease holds/ },
  { bug: "stalledCursorInclusive", rule: "TURN-22", what: "listStalledMessages' cursor resumes at the last listed message (each page repeats it)", check: /pages in \(stalledSince, conversation id, message id\) order/, message: /still a cursor after 50 pages|across pages/ },
];

const SEED = 20261130;

/**
 * The kit's checks of the rule a bug breaks, and the model-based check where it must blame one:
 * enough to show the kit rejects the store with that rule (the control runs the whole kit). The
 * other checks would only add their time, most of it waiting for leases and windows to pass.
 */
async function certify(bugs: ConversationBugs, name: string, rule?: string, model?: string): Promise<Report> {
  const subject = kvConversationSubject(name, bugs);
  const checks = conversationStoreChecks(subject, { runs: 200, seed: SEED }).filter(
    (c) => rule === undefined || c.rule === rule || (model !== undefined && c.name.startsWith("model-based")),
  );
  return runChecks(checks, { subject: name, seed: SEED, runs: 200, levels: ["conversation"] });
}

describe("broken conversation stores are rejected with the rule they break", () => {
  it("control: the same store without a bug conforms", async () => {
    const report = await certify({}, "kv-correct");
    expect(report.checks.filter((c) => c.status === "fail")).toEqual([]);
    expect(report.conforms).toBe(true);
  });

  for (const { bug, rule, what, check, model, message } of BROKEN) {
    it(`${bug} (${what}) fails ${rule}`, async () => {
      const report = await certify({ [bug]: true }, `kv-${bug}`, rule, model);
      expect(report.conforms).toBe(false);
      expect(report.rules.find((r) => r.rule === rule)?.status, `${rule} for ${bug}`).toBe("fail");
      const failing = report.checks.filter((c) => c.status === "fail" && c.rule === rule);
      const named = failing.find((c) => check.test(c.name));
      expect(named, `a failing ${rule} check matching ${check} (failing: ${failing.map((c) => c.name).join(" | ")})`).toBeDefined();
      expect(named!.error).toBeTruthy();
      // Where one check covers several planted bugs, the case that caught this one is named.
      if (message !== undefined) expect(named!.error).toMatch(message);
      if (model !== undefined) {
        const property = report.checks.find((c) => c.name.startsWith("model-based"))!;
        expect(property.status, `the model-based check for ${bug}`).toBe("fail");
        const cx = property.counterexample!;
        expect(cx.violates, property.error).toBe(model);
        expect(cx.seed).toBe(SEED);
        expect(cx.path).toMatch(/^\d+(:\d+)*$/);
        expect(cx.timeline[0]).toMatch(/^t=1 /);
        expect(cx.timeline.at(-1)).toMatch(/✗ .*\((TURN|RECORD)-\d+\)$/);
        expect(property.error).toContain(`--seed ${SEED} --path "${cx.path}"`);
      }
    });
  }

  it("a failing model check replays exactly from its seed and path", async () => {
    const subject = kvConversationSubject("kv-commitIgnoresFence", { commitIgnoresFence: true });
    const model = (options: { seed: number; path?: string; runs?: number }) =>
      conversationStoreChecks(subject, options).filter((c) => c.name.startsWith("model-based"));
    const first = await runChecks(model({ runs: 200, seed: SEED }), { subject: subject.name });
    const cx = first.checks[0]!.counterexample!;
    const replay = await runChecks(model({ seed: cx.seed, path: cx.path }), { subject: subject.name });
    expect(replay.checks[0]!.status).toBe("fail");
    // Every run uses fresh conversation ids; apart from them the replay is the same timeline.
    const anonymous = (timeline: string[]) => timeline.map((l) => l.replace(/model-[0-9a-f]{8}-/g, "model-*-"));
    expect(anonymous(replay.checks[0]!.counterexample!.timeline)).toEqual(anonymous(cx.timeline));
    expect(replay.checks[0]!.counterexample!.value).toEqual(cx.value);
  });
});
