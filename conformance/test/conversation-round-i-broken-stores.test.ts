import { describe, expect, it } from "vitest";
import { conversationStoreChecks, runChecks, type Report } from "../src/index.js";
import { kvConversationSubject, type ConversationBugs } from "./conversation-fixtures/kv-conversation-store.js";

/**
 * Mutation round i (convmut), 2026-12-04: 30 broken conversation stores whose mechanism no planted
 * store had, as the author of a real store (SQL, Redis, a document store, a cache in front of one)
 * would get them wrong. Run through the whole kit at SEED first, 21 were rejected already and 9 were
 * certified (`hole: true`); each hole is now rejected by the check added for it, named after the rule
 * it breaks (spec TURN-2, TURN-5, TURN-14 and TURN-19 sharpened where they were silent).
 *
 * `checks` are the deterministic checks that must reject the store, each with its rule (and the
 * case that caught it, where one check covers several stores). `model` names the rule the
 * model-based check must blame, only where that rule truly describes the bug. Only the checks of
 * the rules named run, and the model-based check where `model` is given.
 */
interface RoundIBug {
  bug: keyof ConversationBugs;
  what: string;
  checks: Array<{ rule: string; check: RegExp; message?: RegExp }>;
  model?: string;
  hole?: true;
}

const BROKEN: RoundIBug[] = [
  // ---- certified before this round (holes), each rejected by its new check ----
  {
    bug: "commitRecordOnlyWhenAnswers",
    what: "a commit's record is kept only when the turn answers (a resumed turn that stops for tool use loses it)",
    checks: [{ rule: "TURN-5", check: /a commit's record \(recordsWithCommit\)/, message: /tool-use commit/ }],
    hole: true,
  },
  {
    bug: "isoDatesRevived",
    what: "stored JSON parsed with a date reviver: 2026-12-04T23:00:00Z comes back 2026-12-04T23:00:00.000Z",
    checks: [{ rule: "TURN-7", check: /come back deep-equal/, message: /look like timestamps/ }],
    hole: true,
  },
  {
    bug: "protoKeyLost",
    what: "stored JSON copied member by member: a __proto__ member becomes the prototype and is lost",
    checks: [{ rule: "TURN-7", check: /come back deep-equal/, message: /__proto__/ }],
    hole: true,
  },
  {
    bug: "recentIdsDedup",
    what: "a re-send recognised only among the last 100 messages (a capped recent-id set)",
    checks: [{ rule: "TURN-2", check: /however many messages came after it/, message: /a re-send of m001 after 300 messages/ }],
    hole: true,
  },
  {
    bug: "turnsOfByPrefix",
    what: "turnsOf(c, m1) selects message ids starting with m1 (m10's turns too)",
    checks: [{ rule: "TURN-19", check: /ids are not prefixes or patterns/, message: /turnsOf\(c, m1\)/ }],
    hole: true,
  },
  {
    bug: "recordsByPrefix",
    what: "records(c) returns the records of every conversation whose id starts with c",
    checks: [{ rule: "TURN-19", check: /ids are not prefixes or patterns/, message: /records\(c\)/ }],
    hole: true,
  },
  {
    bug: "unavailableListsNothing",
    what: "on an unreachable store listFailedTurns answers an empty page and releaseLeaseGrant does nothing",
    checks: [{ rule: "TURN-14", check: /an unreachable store raises store_unavailable/, message: /listFailedTurns on an unreachable store/ }],
    hole: true,
  },
  {
    bug: "logDedupsContent",
    what: "a content-addressed log: a message saying what an earlier entry said is left out",
    checks: [{ rule: "TURN-5", check: /each message's content enters the log/, message: /after 2 messages/ }],
    hole: true,
  },
  {
    bug: "turnsFirstMegabyte",
    what: "turnsOf and log read one 1 MiB page of turns (a DynamoDB Query without LastEvaluatedKey)",
    checks: [{ rule: "TURN-7", check: /however large the history/, message: /^this instance: the turn indexes/ }],
    hole: true,
  },
  // ---- rejected by the kit as it was ----
  {
    bug: "locksPerInstance",
    what: "one lock table per instance over shared data: atomic per process, not across instances",
    checks: [
      { rule: "TURN-5", check: /of 8 concurrent commits of one turn exactly one commits/ },
      { rule: "TURN-10", check: /of 8 concurrent acquires exactly one wins/ },
    ],
    model: "TURN-10",
  },
  {
    bug: "commitForBoundIndex",
    what: "commitTurn takes a failed message bound at the commit's index (another message took the index since)",
    checks: [{ rule: "TURN-5", check: /not in progress .* is refused/, message: /the failed m2/ }],
  },
  {
    bug: "turnsCachePerInstance",
    what: "turnsOf and log served from a per-instance cache of the first read",
    checks: [{ rule: "TURN-7", check: /however large the history/, message: /^another instance/ }],
  },
  {
    bug: "turnsSortedAsText",
    what: "turns ordered by their index as text (10 before 2)",
    checks: [
      { rule: "TURN-7", check: /however large the history/ },
      { rule: "TURN-14", check: /committed turns are kept/, message: /turnsOf\(m1\)/ },
    ],
  },
  {
    bug: "failureRecordVolatile",
    what: "the failed-turn record kept in the instance's memory (records() merges it): gone on a fresh instance",
    checks: [
      { rule: "RECORD-4", check: /a failed turn's record is kept beside the log/, message: /stored records after the failure/ },
      { rule: "TURN-14", check: /a fresh instance sees every message/ },
    ],
    model: "RECORD-4",
  },
  {
    bug: "restartRequeuesInFlight",
    what: "a reopened instance 'recovers' messages in progress back to queued",
    checks: [{ rule: "TURN-14", check: /a fresh instance sees every message/ }],
  },
  {
    bug: "commitReplayAnsweredTrue",
    what: "a commit of the last committed (message, index, fence) answers committed: true whatever its payload",
    checks: [{ rule: "TURN-5", check: /of 8 concurrent commits of one turn exactly one commits/, message: /got 8/ }],
    model: "TURN-5",
  },
  {
    bug: "messageIdsGlobal",
    what: "message ids unique across conversations: m1 of a second conversation taken for a re-send",
    checks: [{ rule: "TURN-19", check: /ids are compared exactly/, message: /was taken for m1 of/ }],
    model: "TURN-2",
  },
  {
    bug: "fenceIsEpochSeconds",
    what: "the fence is the store clock in whole seconds",
    checks: [{ rule: "TURN-10", check: /every grant's fence is higher than all earlier ones/ }],
    model: "TURN-10",
  },
  {
    bug: "renewFromCache",
    what: "renewLease trusts the instance's cache of its own grant and writes the lease back",
    checks: [{ rule: "TURN-10", check: /releaseLeaseGrant gives back exactly the grant/, message: /g3's fence after releaseLeaseGrant\(g3\)/ }],
  },
  {
    bug: "lastBoundPerInstance",
    what: "the last bound message kept per instance; a fresh instance takes the first at the highest index",
    checks: [],
    model: "TURN-12",
  },
  {
    bug: "inputOmitsMessageUnlessBound",
    what: "beginTurn's input carries the user message only on the binding call (a take-over sends the log without it)",
    checks: [{ rule: "TURN-11", check: /a new lease holder gets the bound message/ }],
    model: "TURN-9",
  },
  {
    bug: "answersOnlyFirstTurn",
    what: "answers honoured only on a message's first turn: after a tool loop the answer leaves it in progress",
    checks: [
      { rule: "TURN-11", check: /beginTurn binds the oldest queued message/ },
      { rule: "TURN-14", check: /committed turns are kept/, message: /m2's turn index/ },
    ],
  },
  {
    bug: "beginCacheByFence",
    what: "beginTurn memoised per instance by fence and log version, not by conversation",
    checks: [{ rule: "TURN-10", check: /conversations are independent/ }],
    model: "TURN-9",
  },
  {
    bug: "leaseLostAsGenericError",
    what: "a stale fence raises a plain Error, not conversation_lease_lost",
    checks: [{ rule: "TURN-10", check: /an expired lease is taken with a higher fence/, message: /got Error: lease lost/ }],
    model: "TURN-10",
  },
  {
    bug: "failMessageStaleNoop",
    what: "failMessage under a stale fence does nothing and says nothing",
    checks: [{ rule: "TURN-10", check: /an expired lease is taken with a higher fence/, message: /failMessage with the stale fence/ }],
    model: "TURN-10",
  },
  {
    bug: "beginStaleUndefined",
    what: "beginTurn under a stale fence answers undefined, as if nothing waited",
    checks: [{ rule: "TURN-10", check: /an expired lease is taken with a higher fence/, message: /beginTurn with the stale fence/ }],
    model: "TURN-10",
  },
  {
    bug: "reopenMovesToEnd",
    what: "a reopened message is re-inserted behind later arrivals (DELETE + INSERT)",
    checks: [{ rule: "TURN-12", check: /re-sent while later ones only wait is reopened and answered before them/ }],
    model: "TURN-12",
  },
  {
    bug: "recordsAsSet",
    what: "records kept as a set (SADD): a record equal to a kept one is dropped",
    checks: [{ rule: "TURN-7", check: /come back deep-equal/, message: /records/ }],
    model: "RECORD-4",
  },
  {
    // With two conversations interleaved (the model) or a fresh instance (TURN-15's restart check fails on its re-send too).
    bug: "lastBoundGlobal",
    what: "the last bound message is one variable of the instance for every conversation",
    checks: [],
    model: "TURN-12",
  },
  {
    bug: "leaseLiveOnProcessClock",
    what: "a lease judged live on the process clock against an expiry on the store's",
    checks: [{ rule: "TURN-10", check: /an expired lease is taken with a higher fence/ }],
    model: "TURN-10",
  },
];

const SEED = 20261205;
const RUNS = 100;

async function certify(bugs: ConversationBugs, name: string, rules: Set<string>, model: boolean): Promise<Report> {
  const subject = kvConversationSubject(name, bugs);
  const checks = conversationStoreChecks(subject, { runs: RUNS, seed: SEED }).filter((c) => (c.name.startsWith("model-based") ? model : rules.has(c.rule)));
  return runChecks(checks, { subject: name, seed: SEED, runs: RUNS, levels: ["conversation"] });
}

describe("mutation round i: broken conversation stores are rejected with the rule they break", () => {
  it("lists 30 stores, 9 of them holes of the kit before this round", () => {
    expect(BROKEN).toHaveLength(30);
    expect(new Set(BROKEN.map((b) => b.bug)).size).toBe(30);
    expect(BROKEN.filter((b) => b.hole)).toHaveLength(9);
  });

  for (const { bug, what, checks, model } of BROKEN) {
    it(`${bug} (${what}) fails ${[...new Set(checks.map((c) => c.rule)), ...(model ? [`the model (${model})`] : [])].join(", ")}`, async () => {
      const report = await certify({ [bug]: true }, `kv-${bug}`, new Set(checks.map((c) => c.rule)), model !== undefined);
      expect(report.conforms).toBe(false);
      const failing = report.checks.filter((c) => c.status === "fail");
      for (const { rule, check, message } of checks) {
        const named = failing.find((c) => c.rule === rule && check.test(c.name));
        expect(named, `a failing ${rule} check matching ${check} (failing: ${failing.map((c) => c.name).join(" | ")})`).toBeDefined();
        expect(named!.error).toBeTruthy();
        if (message !== undefined) expect(named!.error).toMatch(message);
      }
      if (model !== undefined) {
        const property = report.checks.find((c) => c.name.startsWith("model-based"))!;
        expect(property.status, `the model-based check for ${bug}`).toBe("fail");
        expect(property.counterexample!.violates, property.error).toBe(model);
        expect(property.error).toContain(`--seed ${SEED} --path "${property.counterexample!.path}"`);
      }
    });
  }

  it("the checks that caught the holes pass the same store without a bug", async () => {
    const holes = BROKEN.filter((b) => b.hole).flatMap((b) => b.checks);
    const checks = conversationStoreChecks(kvConversationSubject("kv-correct"), { runs: RUNS, seed: SEED }).filter((c) => holes.some((h) => h.rule === c.rule && h.check.test(c.name)));
    expect(checks.length).toBeGreaterThanOrEqual(7);
    const report = await runChecks(checks, { subject: "kv-correct", seed: SEED, levels: ["conversation"] });
    expect(report.checks.filter((c) => c.status !== "pass")).toEqual([]);
  });
});
