import Anthropic from "@anthropic-ai/sdk";
import { startMockProvider } from "@dispatch-once/mock-provider";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ConversationRunner } from "../src/index.js";

/*
 * TURN-23 over the real SDK, and its read-back (TURN-7): attempt 1 pays acme and its stream is cut
 * before message_stop; the retry's model pays bob instead and the turn commits; the next turn of
 * the message pays acme, re-worded. It is answered from turn 0's payment, and a re-send of the
 * answered message reads it back under that key.
 */
describe("a call a re-run left unanswered, made again in the next turn (TURN-23, over the SDK)", () => {
  it("TURN-23 acme is paid once; turn 1's call carries turn 0's key, as sent and as read back", async () => {
    const pay = (payee: string, memo: string) => ({ content: [{ type: "tool_use" as const, name: "send_payment", input: { payee, amount: 42, currency: "EUR", memo } }] });
    let requests = 0;
    const provider = await startMockProvider({
      script: () => {
        requests += 1;
        if (requests === 1) return pay("acme", "first");
        if (requests === 2) return pay("bob", "rent");
        if (requests === 3) return pay("acme", "as asked");
        return { content: [{ type: "text" as const, text: "Done." }], stopReason: "end_turn" };
      },
    });
    try {
      provider.faults.enqueue({ kind: "reset", at: { beforeMessageStop: true } }); // the first response only
      const paid: string[] = [];
      const tools = new ToolRegistry([
        defineTool({
          name: "send_payment",
          effect: "keyed_write",
          input: z.object({ payee: z.string(), amount: z.number(), currency: z.string(), memo: z.string() }),
          identity: ["payee", "amount", "currency"],
          run: async (args) => {
            paid.push(args.payee);
            return { paymentId: `pay_${paid.length}` };
          },
        }),
      ]);
      const runner = new ConversationRunner({
        client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
        dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger() }),
        store: new MemoryConversationStore(),
        model: "claude-sonnet-5-5",
        tools: tools.providerSchemas(),
        retry: { backoffMs: () => 1 },
      });
      const result = await runner.send("conv-deferred", { id: "m1", content: "pay acme and bob" });
      expect(paid).toEqual(["acme", "bob"]);
      const acmeKey = result.records?.[0]?.calls[0]?.key;
      expect(result.records?.map((r) => [r.turnIndex, r.calls.map((c) => [c.name, c.effect])])).toEqual([[0, [["send_payment", "happened"]]]]);
      const turn1 = result.turns.find((t) => t.turnIndex === 1);
      expect(turn1?.calls).toEqual([expect.objectContaining({ key: acmeKey, replayed: true, result: { paymentId: "pay_1" }, carriedFromTurn: 0 })]);
      // A re-send of the answered message reads the same back from the store.
      const again = await runner.send("conv-deferred", { id: "m1", content: "pay acme and bob" });
      expect(again.fromStore).toBe(true);
      expect(again.turns.find((t) => t.turnIndex === 1)?.calls).toEqual([expect.objectContaining({ key: acmeKey, ordinal: 0, carriedFromTurn: 0 })]);
      expect(again.turns.find((t) => t.turnIndex === 0)?.calls).toEqual([expect.objectContaining({ name: "send_payment", result: { paymentId: "pay_2" } })]);
      expect(paid).toEqual(["acme", "bob"]);
    } finally {
      await provider.close();
    }
  });
});
