import { ConversationBusyError, MemoryConversationStore, effectOf } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { payCall, world } from "./toy.js";

const CONV = "conv-busy";

/**
 * A redelivered or re-sent message whose turn another worker is running (or a dead worker left
 * bound) meets conversation_busy. Its payment may be under way: "no effect" would be a lie the
 * effect log contradicts (adoption trial 4: kill -9 mid-payment, the queue's redelivery was told
 * conversation_busy with effect "no" after the payment landed).
 */
describe("TURN-10 conversation_busy says whether the message's own turn is under way", () => {
  it("a re-send of a message another holder has bound: inProgress, effect possibly; a queued message: effect no", async () => {
    const store = new MemoryConversationStore();
    // Worker B took m1 and is paying: it holds the lease and bound the message.
    await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
    const lease = await store.acquireLease(CONV, "worker-b", 60_000);
    if (!lease.acquired) throw new Error("worker B could not take the lease");
    expect((await store.beginTurn(CONV, lease.fence))?.message.id).toBe("m1");

    const { runner } = world(() => [...payCall("toolu_1", "first"), { t: "end" }], false, { store, runner: { busyWaitMs: 0 } });
    const resent = await runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(ConversationBusyError.isInstance(resent)).toBe(true);
    expect((resent as ConversationBusyError).inProgress).toBe(true);
    expect(effectOf(resent)).toBe("possibly");
    expect((resent as Error).message).toMatch(/in progress/);

    const queued = await runner.send(CONV, { id: "m2", content: "pay beta" }).catch((e: unknown) => e);
    expect(ConversationBusyError.isInstance(queued)).toBe(true);
    expect((queued as ConversationBusyError).inProgress).toBe(false);
    expect(effectOf(queued)).toBe("no");
  });
});
