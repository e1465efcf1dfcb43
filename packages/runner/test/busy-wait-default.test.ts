import { ConversationBusyError, MemoryConversationStore } from "@dispatch-once/core";
import { afterEach, describe, expect, it, vi } from "vitest";
import { defaultBusyWaitMs } from "../src/runner.js";
import { payCall, world } from "./toy.js";

const CONV = "conv-busy-default";

/** A store whose message m1 a worker bound under a 60 s turn lease and then died (Date faked from here). */
async function boundByDeadHolder(): Promise<MemoryConversationStore> {
  vi.useFakeTimers({ toFake: ["Date"] });
  const store = new MemoryConversationStore();
  await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
  const dead = await store.acquireLease(CONV, "worker-dead", 60_000);
  if (!dead.acquired) throw new Error("the dead worker could not take the lease");
  expect((await store.beginTurn(CONV, dead.fence))?.message.id).toBe("m1");
  return store;
}

/**
 * A worker died holding the conversation's turn lease (a queue's stalled job, a SIGKILL) with the
 * message bound. Its redelivery or re-send must outlast that lease and take the message over; a
 * default wait at or below the lease ends every such send `conversation_busy` (trials/app-bullmq:
 * every attempt of a job busy, the job failed for good while the lease ran). The wait is measured on
 * a clock this test moves forward (Date faked, real timers), so nothing waits a minute.
 */
describe("TURN-10 the default busy wait outlasts a dead holder's turn lease", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("with turnLeaseMs 60 s and no busyWaitMs, a re-send takes over the dead holder's message and pays once", async () => {
    const store = await boundByDeadHolder();

    const { runner, performed } = world((request) => (request === 1 ? [...payCall("toolu_1", "rent"), { t: "end" }] : [{ t: "text", index: 0, text: "paid" }, { t: "end" }]), false, {
      store,
      runner: { turnLeaseMs: 60_000, pollMs: 1 },
    });
    // The store's clock and the sender's both read Date: a second of it every real millisecond.
    const clock = setInterval(() => vi.setSystemTime(Date.now() + 1_000), 1);
    try {
      const sent = await runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      expect(ConversationBusyError.isInstance(sent), `the re-send ended busy: ${String(sent)}`).toBe(false);
      expect(sent).toMatchObject({ status: "answered", messageId: "m1" });
      expect(performed).toEqual([{ to: "acme", memo: "rent" }]);
    } finally {
      clearInterval(clock);
    }
  });

  it("an explicit busyWaitMs below the lease still ends the send busy (the option wins over the default)", async () => {
    const store = await boundByDeadHolder();
    const { runner, performed } = world(() => [...payCall("toolu_1", "rent"), { t: "end" }], false, {
      store,
      runner: { turnLeaseMs: 60_000, busyWaitMs: 10_000, pollMs: 1 },
    });
    const clock = setInterval(() => vi.setSystemTime(Date.now() + 1_000), 1);
    try {
      const sent = await runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      expect(ConversationBusyError.isInstance(sent)).toBe(true);
      expect((sent as ConversationBusyError).waitedMs).toBeLessThan(60_000);
      expect(performed).toEqual([]);
    } finally {
      clearInterval(clock);
    }
  });

  it("the default is 30 s, or the turn lease and a third of it when that is longer", () => {
    expect(defaultBusyWaitMs(3_000)).toBe(30_000);
    expect(defaultBusyWaitMs(30_000)).toBe(40_000);
    expect(defaultBusyWaitMs(60_000)).toBe(80_000);
  });
});
