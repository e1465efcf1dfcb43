import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, defineTool, isRecordRowName } from "../src/index.js";
import { markRecordTool, turnRowsOf } from "../src/internal/index.js";

/*
 * EFFECT-8 with LIST-3: an app that shares one ledger and conversation id between the AI SDK
 * wrapper (whose bookkeeping rows, `dispatch-once-turn` at a turn's index, hold no effect) and
 * another dispatcher. The listing of a turn's rows that IDENT-10's guard, the runner's record
 * (RECORD-8), the Anthropic tool runner (ATR-12) and MCP (MCP-15) read is of effects: a
 * bookkeeping row is none of them.
 */
describe("EFFECT-8: turnRowsOf lists a turn's effect rows, never a bookkeeping row", () => {
  it("EFFECT-8: a payment and the AI SDK wrapper's dispatch-once-turn row at turn 3 of one conversation: the listing holds the payment alone", async () => {
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const pay = defineTool({ name: "pay", effect: "keyed_write", input: z.object({ to: z.string() }), run: async (args) => (performed.push(args), { paid: args.to }) });
    const app = new Dispatcher({ ledger, tools: [pay] });
    // The AI SDK wrapper's record of the turn's first user message (AISDK-17), as it claims it.
    const record = defineTool(markRecordTool({ name: "dispatch-once-turn", effect: "keyed_write", input: z.object({}), run: async () => ({ messageId: "m-ai" }) }));
    const wrapper = new Dispatcher({ ledger, tools: [record] });
    await wrapper.dispatch({ name: "dispatch-once-turn", input: {} }, { conversationId: "c-shared", turnIndex: 3, ordinal: 0 });
    const paid = await app.dispatch({ name: "pay", input: { to: "acme" } }, { conversationId: "c-shared", turnIndex: 3 });
    // The effect log and the ledger read directly: one payment, two rows at turn 3.
    expect(performed).toEqual([{ to: "acme" }]);
    const all = (await ledger.listRows({ conversationId: "c-shared" })).rows.filter((r) => r.turnIndex === 3);
    expect(all.map((r) => r.toolName).sort()).toEqual(["dispatch-once-turn", "pay"]);
    // The listing: the payment's row alone.
    const rows = await turnRowsOf(ledger, "c-shared", 3);
    expect(rows?.map((r) => [r.toolName, r.key])).toEqual([["pay", paid.key]]);
    expect(rows?.some((r) => isRecordRowName(r.toolName))).toBe(false);
  });
});
