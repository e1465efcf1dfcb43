import { afterEach, describe, expect, it } from "vitest";
import { MemoryConversationStore, MemoryLedger } from "@dispatch-once/core";
import { startMockProvider, type MockProvider } from "@dispatch-once/mock-provider";
import type { ResumedTurnRecord, RunnerEvent } from "../src/index.js";
import { pausedAtCommit } from "@dispatch-once/test-processes";
import { PAY_ACME, closeDownstreams, setup } from "./fixtures.js";

/**
 * RECORD-7's known gap through the real SDK, the mock provider and the mock payments API (proposed
 * RECORD-8). Worker A's payment goes through, then A pauses before its commit, past its turn lease
 * (a GC pause, SIGSTOP). Worker B resumes the turn and the model answers the re-run with text
 * only, so B's committed turn does not contain the payment. The payments API's effect log is
 * the oracle: the payment was made once, and the record beside the conversation must say so.
 */
let provider: MockProvider | undefined;
afterEach(async () => {
  await provider?.close();
  provider = undefined;
  await closeDownstreams();
});

describe("a resumed turn that commits without the earlier holder's payment (proposed RECORD-8)", () => {
  it("RECORD-8 A paid and paused before its commit; B's model answers with text and B commits: one payment, listed as happened beside the conversation", async () => {
    let requests = 0;
    provider = await startMockProvider({
      script: () => {
        requests++;
        // The model answers the same prompt differently the second time.
        return requests === 1
          ? { content: [{ type: "tool_use", name: "send_payment", input: PAY_ACME }] }
          : { content: [{ type: "text", text: "I could not confirm the payment; please check your account." }], stopReason: "end_turn" };
      },
    });
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const { worker, effects } = await setup(provider, {
      guarded: true,
      latencyMs: 0,
      store,
      ledger: new MemoryLedger(),
      runner: { turnLeaseMs: 60_000, allowVolatileConversationStore: true },
    });
    const paused = pausedAtCommit(store);
    void worker({ store: paused.store }).send("conv-gap", { id: "m1", content: "pay acme" });
    await paused.reached;
    expect(effects()).toHaveLength(1);
    now += 61_000; // A's turn lease lapses while it is paused

    const events: RunnerEvent[] = [];
    const result = await worker({ onEvent: (e) => events.push(e) }).send("conv-gap", { id: "m1", content: "pay acme" });
    expect(result.turns.map((t) => [t.text, t.calls.length])).toEqual([["I could not confirm the payment; please check your account.", 0]]);
    expect(effects()).toHaveLength(1);
    const [payment] = effects();
    const kept = ((await store.records("conv-gap")) as unknown as { kind: string }[]).filter((r) => r.kind === "resumed_turn") as unknown as ResumedTurnRecord[];
    expect(kept).toHaveLength(1);
    expect(kept[0]).toMatchObject({ messageId: "m1", turnIndex: 0, resumed: true, listed: true });
    expect(kept[0]!.calls).toEqual([expect.objectContaining({ key: payment!.idempotencyKey, name: "send_payment", state: "completed", effect: "happened" })]);
    expect(result.records).toEqual(kept);
    expect(events.find((e) => e.type === "resumed_turn_recorded")).toMatchObject({ record: kept[0] });
  });
});
