import { describe, expect, it } from "vitest";
import { MemoryConversationStore, isDispatchOnceError, type JsonValue } from "../src/index.js";

const WINDOW = 60_000;
const user = (text: string): JsonValue => ({ role: "user", content: text });

async function failOnce(store: MemoryConversationStore, c: string, id: string): Promise<void> {
  await store.appendUserMessage(c, { id, content: user(id) }, { reopenWithinMs: WINDOW });
  const lease = await store.acquireLease(c, "worker", 600_000);
  if (!lease.acquired) throw new Error("not acquired");
  expect((await store.beginTurn(c, lease.fence))?.message.id).toBe(id);
  await store.failMessage(c, lease.fence, id, { failed: id });
  await store.releaseLease(c, lease.fence);
}

describe("TURN-12 MemoryConversationStore's re-send window (supports.reopenWindow), on its clock, in the reopen's own step", () => {
  it("declares it; reopens below the window, not at it; measured from the FIRST failure, which a retry that fails again does not move", async () => {
    let clock = 1_000_000;
    const store = new MemoryConversationStore({ now: () => clock });
    expect(store.capabilities.supports?.reopenWindow).toBe(true);
    await failOnce(store, "conv-w", "m1");
    clock += WINDOW - 1;
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW })).toMatchObject({ reopened: true, message: { state: "queued" } });
    await failOnce(store, "conv-w", "m1");
    clock += 1;
    const past = await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") }, { reopenWithinMs: WINDOW });
    expect(past).toEqual({ appended: false, reopened: false, pastReopenWindow: true, message: expect.objectContaining({ state: "failed", failure: { failed: "m1" } }) });
    // Nothing changed: still failed, still listed (at its last failure's time), nothing queued.
    expect((await store.message("conv-w", "m1"))?.state).toBe("failed");
    expect((await store.listFailedTurns({ conversationId: "conv-w" })).turns.map((t) => [t.messageId, t.failedAt, t.reopenable])).toEqual([["m1", 1_000_000 + WINDOW - 1, true]]);
    const lease = await store.acquireLease("conv-w", "worker", 600_000);
    expect(lease.acquired && (await store.beginTurn("conv-w", lease.fence))).toBeUndefined();
    if (lease.acquired) await store.releaseLease("conv-w", lease.fence);
    // Without a window it reopens as TURN-12 always did (a runner of an earlier version).
    expect(await store.appendUserMessage("conv-w", { id: "m1", content: user("m1") })).toMatchObject({ reopened: true });
  });

  it("a message another was bound after says nothing of the window; a bad window is refused with invalid_store_input, changing nothing", async () => {
    const store = new MemoryConversationStore({ now: () => 5 });
    await failOnce(store, "conv-b", "m1");
    for (const bad of [-1, Number.NaN, Infinity, "60000"]) {
      const error = await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") }, { reopenWithinMs: bad as number }).catch((e: unknown) => e);
      expect(isDispatchOnceError(error, "invalid_store_input")).toBe(true);
      expect((error as { field?: string }).field).toBe("reopenWithinMs");
    }
    expect((await store.message("conv-b", "m1"))?.state).toBe("failed");
    await store.appendUserMessage("conv-b", { id: "m2", content: user("m2") });
    const lease = await store.acquireLease("conv-b", "worker", 600_000);
    if (!lease.acquired) throw new Error("not acquired");
    expect((await store.beginTurn("conv-b", lease.fence))?.message.id).toBe("m2");
    expect(await store.appendUserMessage("conv-b", { id: "m1", content: user("m1") }, { reopenWithinMs: 0 })).toEqual({ appended: false, reopened: false, message: expect.objectContaining({ state: "failed" }) });
  });
});
