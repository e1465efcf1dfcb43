import { asyncStoragesRunBy } from "@dispatch-once/test-processes";
import { MemoryLedger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { createOnceToolRunner } from "../src/index.js";
import { paymentsApp, providerPerTest } from "./tool-runner-fixtures.js";

/*
 * On Node 20 an AsyncLocalStorage that has run once stays in the process's list of storages for
 * good, and every promise the process creates afterwards walks that list: with a storage per
 * `createOnceToolRunner`, an app that makes its runner per request or per conversation slows every
 * promise of the process a little more with each one (1 000 of them: about 0.1 ms a promise).
 * The AI SDK wrapper had the same (packages/ai-sdk/test/async-context.test.ts).
 */

const provider = providerPerTest();


describe("async context: one storage for every createOnceToolRunner", () => {
  it("ATR-5 the wrapped calls of any number of createOnceToolRunner run in the same AsyncLocalStorage instances as those of one", async () => {
    const { client, sendPayment, effects } = await paymentsApp(provider(), { latencyMs: 0 });
    const oneConversation = async (i: number) => {
      const once = createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger: new MemoryLedger() });
      const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, stream: true, thread: false, messages: [{ role: "user", content: "pay acme" }] }, { conversationId: `conv-${i}` });
      await runner.runUntilDone();
    };
    const one = await asyncStoragesRunBy(() => oneConversation(0));
    expect(one.size).toBeGreaterThan(0);
    const many = await asyncStoragesRunBy(async () => {
      for (let i = 1; i <= 3; i++) await oneConversation(i);
    });
    expect(effects()).toHaveLength(4);
    expect([...many].filter((storage) => !one.has(storage)), "storages made by later createOnceToolRunner calls (each stays in Node 20's list for good)").toEqual([]);
  });
});
