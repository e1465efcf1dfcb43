import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { divergedCalls, divergedFollowUp, plannedCalls, scenarioArbitrary, withClosingSearch, withoutSplices, type MessagePlan, type PlannedCall } from "../src/scenario.js";

/**
 * The Chat Completions side's closing read (scenario.ts `withClosingSearch`): a turn that pays ends
 * with `search_payments`, so that a cut drawn after its last payment falls before the response
 * finished (on that API a call is dispatched at the next call's first fragment or at
 * `finish_reason`, STREAM-20). What the plan asks of every other call must not move: each fault,
 * death and unstorable result names the call it named, and a re-run omits or swaps the calls it did.
 * Scenarios as drawn (no servers): well under a second.
 */
const SEARCH: PlannedCall = { tool: "search_payments", args: {} };
const pays = (calls: PlannedCall[]) => calls.some((c) => c.tool !== "search_payments") && calls[calls.length - 1]?.tool !== "search_payments";
const withSearch = (calls: PlannedCall[] | undefined) => (calls === undefined ? undefined : pays(calls) ? [...calls, SEARCH] : calls);
/** What each index-keyed plan names: the call at the index, and what happens to it. */
const named = (m: MessagePlan) => {
  const all = plannedCalls(m);
  return {
    downstream: Object.entries(m.downstream).map(([i, f]) => [all[Number(i)], f]),
    death: m.death === undefined ? undefined : [all[m.death.call], m.death.when],
    unstorable: m.unstorable.map((i) => all[i]),
  };
};

const messages = fc.sample(scenarioArbitrary().map(withoutSplices), { seed: 20261207, numRuns: 300 }).flatMap((s) => s.conversations.flatMap((c) => c.messages));
const closed = messages.map((m) => ({ before: m, after: withClosingSearch({ conversations: [{ id: "c", messages: [m] }], providerSeed: 0 }).conversations[0]!.messages[0]! }));

describe("withClosingSearch: a Chat Completions turn that pays ends with a read", () => {
  it("STREAM-20 every turn that pays (a first turn, a tool loop's next) ends with search_payments, after its last write", () => {
    const paying = closed.filter(({ before }) => pays(before.calls));
    expect(paying.length).toBeGreaterThan(100);
    for (const { before, after } of closed) {
      expect(after.calls).toEqual(withSearch(before.calls));
      expect(after.followUp).toEqual(withSearch(before.followUp));
    }
  });

  it("every fault, death and unstorable result names the call it named; the cuts are the ones drawn", () => {
    // A plan that names a follow-up call after a closed first turn: its index moved up by one.
    expect(closed.filter(({ before }) => pays(before.calls) && (before.followUp ?? []).length > 0 && Object.keys(before.downstream).some((i) => Number(i) >= before.calls.length)).length).toBeGreaterThan(0);
    for (const { before, after } of closed) {
      expect(named(after)).toEqual(named(before));
      expect(after.cuts).toEqual(before.cuts);
      expect(after.followUpCuts).toEqual(before.followUpCuts);
      expect(after.outage).toEqual(before.outage);
    }
  });

  it("a re-run makes the calls it made, then the read: a divergence never omits or swaps the read", () => {
    const diverging = closed.filter(({ before }) => divergedCalls(before) !== undefined && pays(before.calls));
    expect(diverging.length).toBeGreaterThan(20);
    for (const { before, after } of closed) {
      const rerun = divergedCalls(before);
      expect(divergedCalls(after)).toEqual(rerun === undefined ? undefined : pays(before.calls) ? [...rerun, SEARCH] : rerun);
      const loopRerun = divergedFollowUp(before);
      expect(divergedFollowUp(after)).toEqual(loopRerun === undefined ? undefined : pays(before.followUp ?? []) ? [...loopRerun, SEARCH] : loopRerun);
    }
  });
});
