import { asyncStoragesRunBy } from "@dispatch-once/test-processes";
import { MemoryLedger } from "@dispatch-once/core";
import { tool, type ModelMessage, type ToolCallRepairFunction, type ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools } from "../src/index.js";

/*
 * On Node 20 an AsyncLocalStorage that has run once stays in the process's list of storages for
 * good (until `disable()`, which nothing calls), and every promise the process creates afterwards
 * walks that list: with a storage per `createOnceTools`, an app that makes its tools per request
 * or per chat (tools that close over the user's token) slows every promise down a little more
 * with each one, for the life of the process (1 000 of them: about 0.1 ms a promise). Found by
 * the byte-level harness (faults/test/byte-cut-ai-sdk.test.ts), whose cases each make their own:
 * two thirds of its CPU went to `_propagate` in node:async_hooks.
 */


/** A fresh createOnceTools (as an app that builds its tools per request does), one call and one repair through it. */
async function oneRequest(i: number): Promise<void> {
  const pay = tool({ description: "pay", inputSchema: z.object({ to: z.string() }), execute: async ({ to }) => ({ paid: to }) });
  const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger: new MemoryLedger() });
  const messages: ModelMessage[] = [{ role: "user", content: "pay bob" }];
  const turn = once.forTurn({ conversationId: `chat_${i}`, messages });
  expect(await turn.tools.pay.execute!({ to: "bob" }, { toolCallId: "call_1", messages: [] })).toEqual({ paid: "bob" });
  const repair: ToolCallRepairFunction<ToolSet> = async ({ toolCall }) => ({ ...toolCall, input: JSON.stringify({ to: "bob" }) });
  const repaired = await turn.repairToolCall(repair)({ toolCall: { type: "tool-call", toolCallId: "call_2", toolName: "pay", input: "{to: bob}" } } as Parameters<ToolCallRepairFunction<ToolSet>>[0]);
  expect(repaired?.input).toBe('{"to":"bob"}');
}

describe("async context: one set of storages for every createOnceTools", () => {
  it("AISDK-2 the wrapper's calls and repairs of any number of createOnceTools run in the same AsyncLocalStorage instances as those of one", async () => {
    const one = await asyncStoragesRunBy(() => oneRequest(0));
    expect(one.size).toBeGreaterThan(0);
    const many = await asyncStoragesRunBy(async () => {
      for (let i = 1; i <= 5; i++) await oneRequest(i);
    });
    expect([...many].filter((storage) => !one.has(storage)), "storages made by later createOnceTools calls (each stays in Node 20's list for good)").toEqual([]);
  });
});
