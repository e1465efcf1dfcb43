import { MemoryConversationStore, MemoryLedger, ToolError, type ConversationStore, type Ledger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import type { CallRecord } from "../src/index.js";
import { payCall, world } from "./toy.js";

/**
 * TURN-13 and RECORD-5: a record written after this runner lost the conversation speaks of keys
 * the holder that took it over runs too (keys come from the turn index, not from the holder). This
 * attempt's own "not performed" says nothing of that holder's run: the record must not tell the
 * user a payment did not happen when it did. (Found by the end-to-end kit on the OpenAI side over
 * SQLite, CI 2026-12-03: a holder stalled past its lease, its payment refused with a 503, while the
 * new holder paid under the same key; the stalled one's record said not_happened.)
 */
const CONV = "conv-superseded-truth";

/** A memory ledger that declares itself durable, as the SQLite ledger of the finding is: a release at fence 1 then says "not performed". */
function durable(base: MemoryLedger): Ledger {
  return Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" } });
}

function setup() {
  const store = new MemoryConversationStore();
  let runs = 0;
  // While this runner still streams, another worker takes the conversation over (this one stalled
  // past its lease) and runs the same turn: the same call, the same key, and this time it pays.
  let taken = false;
  const takeOver = async (conversationId: string, fence: number) => {
    if (taken) return;
    taken = true;
    await store.releaseLease(conversationId, fence);
    await store.acquireLease(conversationId, "worker-b", 60_000);
    await toy.dispatcher.dispatch({ name: "pay", input: { to: "acme", memo: "rent" }, callId: "b1" }, { conversationId, turnIndex: 0 });
  };
  const view = Object.assign(Object.create(store) as ConversationStore, {
    failMessage: async (conversationId: string, fence: number, messageId: string, record: never) => {
      await takeOver(conversationId, fence);
      return store.failMessage(conversationId, fence, messageId, record);
    },
  });
  // The response ends; its payment was refused (not performed), so the turn fails, and its
  // failMessage finds the conversation taken over.
  const toy = world(() => [...payCall("a1", "rent"), { t: "end" }], false, {
    store: view,
    ledger: durable(new MemoryLedger()),
    // This runner's request is refused before it is accepted (a 503); the other holder's goes through.
    beforePay: () => {
      if (++runs === 1) throw new ToolError("503 Service unavailable", { disposition: "not_performed" });
    },
    runner: { busyWaitMs: 0, retry: { attempts: 1, backoffMs: () => 1 } },
  });
  return { runner: toy.runner, store, performed: toy.performed };
}

const callsOf = async (store: MemoryConversationStore) =>
  ((await store.records(CONV)) as unknown as { kind: string; calls?: CallRecord[] }[]).flatMap((r) => (r.calls ?? []).map((c) => ({ kind: r.kind, effect: c.effect, key: c.key })));

describe("a record written after the conversation was taken over tells the truth of its keys (TURN-13, RECORD-5)", () => {
  it("TURN-13 RECORD-5 a failed turn whose failMessage found the conversation taken over keeps its record saying the payment the new holder made under its key happened", async () => {
    const { runner, store, performed } = setup();
    await runner.send(CONV, { id: "m1", content: "pay acme" }).catch(() => undefined);
    expect(performed).toHaveLength(1);
    const calls = await callsOf(store);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject({ kind: "failed_turn", effect: "happened" });
  });
});
