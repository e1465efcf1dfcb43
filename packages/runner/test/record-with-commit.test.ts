import { MemoryConversationStore, type ConversationStore, type JsonValue, type TurnCommit } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import type { ResumedTurnRecord } from "../src/index.js";
import { payCall, world } from "./toy.js";

/**
 * RECORD-8's record goes in the commit's own write (TURN-5): a worker that dies right after its
 * commit (before anything else it would write) leaves the record beside the conversation with the
 * turn, never the turn alone. (Found by the crash suite, faults/test/crash.test.ts: a runner
 * process SIGKILLed right after committing a turn that its attempt 2 answered with text, while
 * attempt 1's payment went through.)
 */
const CONV = "conv-record-with-commit";

/** Attempt 1 pays and is cut after the call; attempt 2 answers with text only. */
const retriedWithText = (n: number) => (n === 1 ? [...payCall("c1", "first"), "cut" as const] : [{ t: "text" as const, index: 0, text: "Nothing to pay." }, { t: "end" as const }]);

const kept = (records: JsonValue[]) => (records as unknown as { kind: string }[]).filter((r) => r.kind === "resumed_turn") as unknown as ResumedTurnRecord[];

/** The store as a worker that dies right after its commit sees it: nothing after the commit returns. */
function diesAfterCommit(store: ConversationStore): { store: ConversationStore; commits: TurnCommit[] } {
  const commits: TurnCommit[] = [];
  let dead = false;
  const never = () => new Promise<never>(() => undefined);
  const view = Object.assign(Object.create(store) as ConversationStore, {
    commitTurn: async (conversationId: string, commit: TurnCommit) => {
      if (dead) return never();
      commits.push(commit);
      await store.commitTurn(conversationId, commit);
      dead = true;
      return never();
    },
    addRecord: never,
    renewLease: never,
    releaseLease: never,
  });
  return { store: view, commits };
}

describe("the committed turn's record is written with the commit (RECORD-8, TURN-5)", () => {
  it("RECORD-8 a worker that dies right after committing leaves the turn and its record, both", async () => {
    const store = new MemoryConversationStore();
    const dying = diesAfterCommit(store);
    const { runner, performed } = world(retriedWithText, true, { store: dying.store });
    void runner.send(CONV, { id: "m1", content: "pay acme" });
    while (dying.commits.length === 0) await new Promise((r) => setTimeout(r, 1));
    expect(performed).toHaveLength(1);
    expect((await store.message(CONV, "m1"))?.state).toBe("answered");
    const records = kept(await store.records(CONV));
    expect(records).toHaveLength(1);
    expect(records[0]!.calls).toEqual([expect.objectContaining({ name: "pay", attempt: 1, status: "completed", effect: "happened", result: { n: 1 } })]);
    expect(dying.commits[0]!.record).toEqual(records[0]);
  });

  it("RECORD-8 a refused commit keeps no committed-turn record; the superseded attempt's record says what it did (TURN-13)", async () => {
    const store = new MemoryConversationStore();
    // Another worker takes the conversation while this one streams attempt 2: its commit is refused.
    let taken = false;
    const view = Object.assign(Object.create(store) as ConversationStore, {
      commitTurn: async (conversationId: string, commit: TurnCommit) => {
        if (!taken) {
          taken = true;
          await store.releaseLease(conversationId, commit.fence);
          await store.acquireLease(conversationId, "worker-b", 60_000);
        }
        return store.commitTurn(conversationId, commit);
      },
    });
    const { runner } = world(retriedWithText, true, { store: view, runner: { busyWaitMs: 0 } });
    const error = await runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "conversation_busy" }); // worker B holds the conversation now
    expect((await store.records(CONV)).map((r) => (r as { kind: string }).kind)).toEqual(["superseded_attempt"]);
    expect(await store.log(CONV)).toEqual([]);
  });

  it("RECORD-8 a store that does not declare recordsWithCommit gets the record with addRecord, after the commit and before the answer", async () => {
    const base = new MemoryConversationStore();
    const order: string[] = [];
    const store = Object.assign(Object.create(base) as ConversationStore, {
      capabilities: { ...base.capabilities, recordsWithCommit: false },
      commitTurn: async (conversationId: string, commit: TurnCommit) => {
        order.push(`commit${commit.record === undefined ? "" : " with a record"}`);
        return base.commitTurn(conversationId, commit);
      },
      addRecord: async (conversationId: string, record: JsonValue) => {
        order.push("addRecord");
        return base.addRecord(conversationId, record);
      },
    });
    const { runner } = world(retriedWithText, true, { store });
    const result = await runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(order).toEqual(["commit", "addRecord"]);
    expect(result.records).toEqual(kept(await base.records(CONV)));
    expect(result.records).toHaveLength(1);
  });
});
