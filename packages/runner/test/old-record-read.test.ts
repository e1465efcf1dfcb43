// A failed-turn record stored by an older version (before RECORD-5 said "not retryable" for an
// effect known to have happened) may say `retryable: true` beside a call whose effect happened and
// that was never completed: a payment made whose record never reached the ledger, or whose claim an
// operator settled. A reader must not offer a re-send for it (RECORD-5, ERR-4): the row is, or may
// become, the operator's, and a re-send may pay again. Here the record was written by another
// worker of the older version (a rolling deploy) while this send waited for the conversation.
import { describe, expect, it } from "vitest";
import { MemoryConversationStore, retryableOf, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { readFailedTurnRecord, TurnFailedError } from "../src/index.js";
import { world } from "./toy.js";

function oldRecord(messageId: string, call: { status: string; effect: string }): JsonValue {
  return {
    kind: "failed_turn",
    conversationId: "conv-old",
    messageId,
    turnIndex: 0,
    attempts: 1,
    position: "call_unresolved",
    error: { name: "LedgerUnavailableError", message: "the effect of call k1 happened (the run returned a result), but the ledger could not record it" },
    calls: [{ attempt: 1, id: "c1", name: "pay", key: "k1", ...call, summary: "error: ..." }],
    effects: [{ key: "k1", name: "pay", effect: call.effect }],
    // What the older version wrote: a re-send "can help".
    retryable: true,
    at: "2026-01-01T00:00:00.000Z",
  };
}

describe("RECORD-5 ERR-4 a stored record of an older version is read as not retryable when a call's effect happened unsettled", () => {
  const stored: [string, { status: string; effect: string }, boolean][] = [
    ["an error whose effect happened", { status: "error", effect: "happened" }, false],
    ["an outcome left unknown", { status: "outcome_unknown", effect: "may_have_happened" }, false],
    // A completed call replays its result: the record's word stands.
    ["a completed call beside a cut stream", { status: "completed", effect: "happened" }, true],
    ["an error whose effect may have happened", { status: "error", effect: "may_have_happened" }, true],
  ];

  it.each(stored)("the replayed failure of %s (%o): retryable %s", async (_name, call, retryable) => {
    const inner = new MemoryConversationStore();
    let otherWorkerFailed = false;
    // The older worker holds the conversation and fails the message while this send waits for it.
    const store: ConversationStore = Object.assign(Object.create(inner) as ConversationStore, {
      acquireLease: async (...args: Parameters<ConversationStore["acquireLease"]>) => {
        if (!otherWorkerFailed) {
          otherWorkerFailed = true;
          const lease = await inner.acquireLease("conv-old", "older-worker", 60_000);
          if (!lease.acquired) throw new Error("the older worker could not take the lease");
          await inner.beginTurn("conv-old", lease.fence);
          await inner.failMessage("conv-old", lease.fence, "m1", oldRecord("m1", call));
          await inner.releaseLease("conv-old", lease.fence);
          return { acquired: false, owner: "older-worker", leaseExpiresAt: Date.now() + 60_000 };
        }
        return inner.acquireLease(...args);
      },
    });
    const { runner, provider, performed } = world(() => [{ t: "end" }], false, { store, runner: { pollMs: 1 } });
    await inner.appendUserMessage("conv-old", { id: "m1", content: provider.userMessage("pay acme") });
    const error = await runner.send("conv-old", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(performed).toHaveLength(0);
    expect(error).toBeInstanceOf(TurnFailedError);
    const failed = error as TurnFailedError;
    console.log(`${_name}: replayed ${failed.replayed}, record.retryable ${failed.record.retryable}, retryableOf ${retryableOf(failed)}`);
    expect(failed.replayed).toBe(true);
    expect(failed.record.retryable).toBe(retryable);
    expect(retryableOf(failed)).toBe(retryable ? "same_message" : "no");
    // The stored record itself is left as it was written.
    expect(((await inner.message("conv-old", "m1"))?.failure as { retryable: boolean }).retryable).toBe(true);
  });

  it("readFailedTurnRecord reads an old-form record's retryable from its calls, and leaves a new one's false as it is", () => {
    expect(readFailedTurnRecord(oldRecord("m1", { status: "error", effect: "happened" })).retryable).toBe(false);
    expect(readFailedTurnRecord(oldRecord("m1", { status: "error", effect: "may_have_happened" })).retryable).toBe(true);
    expect(readFailedTurnRecord({ ...(oldRecord("m1", { status: "completed", effect: "happened" }) as object), retryable: false } as JsonValue).retryable).toBe(false);
  });
});
