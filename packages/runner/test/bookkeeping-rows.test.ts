import { Dispatcher, MemoryConversationStore, MemoryLedger, defineTool, type JsonValue } from "@dispatch-once/core";
import { markRecordTool } from "@dispatch-once/core/internal";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import type { ResumedTurnRecord } from "../src/index.js";
import { world, type ToyEvent } from "./toy.js";

/*
 * EFFECT-8 with RECORD-8: an app shares one ledger and conversation id between the AI SDK wrapper
 * (its `dispatch-once-turn` row at a turn's index holds no effect) and the runner. Worker A pays
 * acme in m1's turn 0 and dies before its commit; worker B resumes the turn, its model answers
 * with text, and the committed turn's record lists the rows the turn does not answer: the payment,
 * never the bookkeeping row (which would tell the user of an effect that is none).
 */
const CONV = "conv-bookkeeping";
const textOnly = (): (ToyEvent | "cut")[] => [{ t: "text", index: 0, text: "Nothing to pay." }, { t: "end" }];

describe("EFFECT-8: a resumed turn's record never lists a bookkeeping row as an effect", () => {
  it("EFFECT-8 with RECORD-8: A pays acme at turn 0 and dies, the AI SDK wrapper's dispatch-once-turn row is at turn 0 too; B's committed record lists acme's payment alone", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const a = world(textOnly, false, { store, ledger, performed });
    await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme" } });
    const lease = await store.acquireLease(CONV, "worker-a", 1_000);
    if (!lease.acquired) throw new Error("worker A could not take the conversation");
    const snapshot = await store.beginTurn(CONV, lease.fence);
    const paid = await a.dispatcher.turn({ conversationId: CONV, turnIndex: snapshot!.turnIndex, resumed: snapshot!.resumed }).dispatch({ name: "pay", input: { to: "acme", memo: "from A" } });
    // The AI SDK wrapper's record of a turn's user message (AISDK-17), claimed as it claims it.
    const record = defineTool(markRecordTool({ name: "dispatch-once-turn", effect: "keyed_write", input: z.object({}), run: async () => ({ messageId: "m-ai" }) }));
    await new Dispatcher({ ledger, tools: [record] }).dispatch({ name: "dispatch-once-turn", input: {} }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    now += 60_000; // A's lease lapses
    const b = world(textOnly, false, { store, ledger, performed });
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    // The effect log and the ledger read directly: one payment; a payment row and a bookkeeping row at turn 0.
    expect(performed).toEqual([{ to: "acme", memo: "from A" }]);
    expect((await ledger.listRows({ conversationId: CONV })).rows.map((r) => [r.toolName, r.turnIndex]).sort()).toEqual([["dispatch-once-turn", 0], ["pay", 0]]);
    // What was recorded (kept beside the conversation) and reported: the payment alone.
    const stored = ((await store.records(CONV)) as unknown as (ResumedTurnRecord & JsonValue)[]).filter((r) => r.kind === "resumed_turn");
    expect(stored.map((r) => r.calls.map((c) => [c.name, c.key, c.effect]))).toEqual([[["pay", paid.key, "happened"]]]);
    expect(result.records).toEqual(stored);
  });
});
