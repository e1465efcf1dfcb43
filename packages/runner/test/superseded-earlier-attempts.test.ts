import { MemoryConversationStore, type ConversationStore, type TurnCommit } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import type { CallRecord, RunnerEvent, SupersededAttemptRecord } from "../src/index.js";
import { payCall, world } from "./toy.js";

/**
 * TURN-13, RECORD-7: attempt 1 of a turn pays and its stream is cut after the call; attempt 2's
 * model answers differently (text, no call: a real model need not repeat itself); meanwhile the
 * runner stalled past its turn lease and another holder took the turn over, so attempt 2's commit
 * is refused. Attempt 1's payment is in no committed turn, and this runner is the only one that
 * saw it: on a ledger that does not list rows, the holder that committed cannot name it. The
 * superseded attempt's record must list it. (Found by the end-to-end kit, divergent re-runs, on
 * the reference ledger without its listing: seed 777, path "23", both stream sides. The record
 * listed attempt 2's calls only, none.)
 */
const CONV = "conv-superseded-earlier";

type Script = Parameters<typeof world>[0];

const paidThenCut: Script = (n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }]);

function setup(script: Script = paidThenCut, cutAfterResolved = true) {
  const store = new MemoryConversationStore();
  // Right before this runner's commit, another worker takes the conversation over (this one
  // stalled past its lease): the commit is refused.
  const view = Object.assign(Object.create(store) as ConversationStore, {
    commitTurn: async (conversationId: string, commit: TurnCommit) => {
      await store.releaseLease(conversationId, commit.fence);
      await store.acquireLease(conversationId, "worker-b", 60_000);
      return store.commitTurn(conversationId, commit);
    },
  });
  return { store, toy: world(script, cutAfterResolved, { store: view, runner: { busyWaitMs: 0 } }) };
}

describe("a superseded attempt's record after a retry the model answered differently (TURN-13, RECORD-7)", () => {
  it("TURN-13 RECORD-7 attempt 1 paid and was cut, attempt 2 answered with text and lost the commit: the record lists attempt 1's payment as happened", async () => {
    const { store, toy } = setup();
    await toy.runner.send(CONV, { id: "m1", content: "pay acme" }).catch(() => undefined);
    expect(toy.performed).toHaveLength(1);
    const paidKey = (toy.events.find((e) => e.type === "call_resolved") as Extract<RunnerEvent, { type: "call_resolved" }>).key;
    expect(paidKey).toBeDefined();
    const superseded = ((await store.records(CONV)) as unknown as { kind: string }[]).filter((r) => r.kind === "superseded_attempt") as unknown as SupersededAttemptRecord[];
    expect(superseded).toHaveLength(1);
    expect(superseded[0]).toMatchObject({ attempt: 2 });
    const listed = superseded[0]!.calls.map((c: CallRecord) => [c.attempt, c.key, c.effect]);
    expect(listed).toEqual([[1, paidKey, "happened"]]);
  });

  it("TURN-13 an earlier attempt's call abandoned while its arguments streamed (never dispatched, no key) is not listed: it had no effect to tell", async () => {
    const { store, toy } = setup((n) => (n === 1 ? [...payCall("c1", "first").slice(0, 2), "cut"] : [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }]), false);
    await toy.runner.send(CONV, { id: "m1", content: "pay acme" }).catch(() => undefined);
    expect(toy.events.filter((e) => e.type === "call_abandoned")).toHaveLength(1);
    expect(toy.performed).toEqual([]);
    const superseded = ((await store.records(CONV)) as unknown as { kind: string }[]).filter((r) => r.kind === "superseded_attempt") as unknown as SupersededAttemptRecord[];
    expect(superseded).toHaveLength(1);
    expect(superseded[0]!.calls).toEqual([]);
  });
});
