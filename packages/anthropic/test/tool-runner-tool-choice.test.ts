import { MemoryLedger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { createOnceToolRunner } from "../src/index.js";
import { paymentsApp, providerPerTest } from "./tool-runner-fixtures.js";

/*
 * STREAM-18 where the runner does not own the loop: the SDK's tool runner sends its params, a
 * forcing tool_choice included, with every request of the loop (it drops one only for a compaction
 * request), so each reply after a payment's result is made to call again, under the next ordinal of
 * the turn: a new key, a new payment. The README's recipe resets the choice after the first reply.
 */
const provider = providerPerTest();
const FORCED = { type: "tool" as const, name: "send_payment" };

/** The SDK's default is a message thread; `thread: false` sends the whole history each time. */
async function forcedLoop(thread?: false, stream = false) {
  const app = await paymentsApp(provider(), { latencyMs: 0 });
  const once = createOnceToolRunner({ tools: [app.sendPayment], effects: { send_payment: "keyed_write" }, ledger: new MemoryLedger() });
  const runner = once.toolRunner(
    app.client,
    { model: "claude-test", max_tokens: 1024, ...(thread === false ? { thread } : {}), stream, max_iterations: 3, tool_choice: FORCED, messages: [{ role: "user", content: "pay acme" }] },
    { conversationId: "conv-atr-forced" },
  );
  return { ...app, runner };
}

describe("ATR: a forcing tool_choice in the SDK's tool runner (STREAM-18)", () => {
  it("left on every request, it pays once per iteration: the risk the README names", async () => {
    const { runner, effects } = await forcedLoop();
    await runner.runUntilDone();
    expect(provider().requests.map((r) => (r.body as { tool_choice?: unknown }).tool_choice)).toEqual([FORCED, FORCED, FORCED]);
    expect(effects()).toHaveLength(3);
  });

  it("the README's recipe (auto from the second request on, the reply kept) pays once, streamed or not", async () => {
    for (const stream of [false, true]) {
      provider().clearRequests();
      const { runner, effects } = await forcedLoop(undefined, stream);
      let first = true;
      for await (const message of runner) {
        // Params changed in the loop body replace the history the SDK answers: keep the reply in it.
        const content = "finalMessage" in message ? (await message.finalMessage()).content : message.content;
        if (first) runner.setMessagesParams((params) => ({ ...params, messages: [...params.messages, { role: "assistant", content }], tool_choice: { type: "auto" } }));
        first = false;
      }
      expect(provider().requests.map((r) => (r.body as { tool_choice?: unknown }).tool_choice)).toEqual([FORCED, { type: "auto" }]);
      expect(effects()).toHaveLength(1);
    }
  });

  it("setMessagesParams in the loop body without the reply drops the reply: the model is asked again (what the recipe avoids)", async () => {
    const { runner, effects } = await forcedLoop(false);
    let first = true;
    for await (const _message of runner) {
      if (first) runner.setMessagesParams((params) => ({ ...params, tool_choice: { type: "auto" } }));
      first = false;
    }
    const sent = provider().requests.map((r) => (r.body as { messages: unknown[] }).messages.length);
    expect(sent).toEqual([1, 1, 3]);
    expect(effects()).toHaveLength(1);
  });
});
