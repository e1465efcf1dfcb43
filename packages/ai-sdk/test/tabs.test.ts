import { MemoryLedger } from "@dispatch-once/core";
import { tool, type ModelMessage, type UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf } from "../src/index.js";

/*
 * Two browser tabs of one chat (useChat: the client holds the history). Both hold the same
 * history and each sends a NEW user message: both messages are the chat's next user message, so
 * both requests count the same turn index (AISDK-1). Found by trials/app-aisdk (scenarios 3b, 3c):
 * when the two asks were the same payment, the second tab's call met the first tab's key and was
 * answered with its payment; one payment was made and both tabs told "paid" with its id, so the
 * user who asked twice was told of two payments. A user message the history does not share with
 * the turn's first one is another ask of the turn (a fork): AISDK-17.
 */
const pay = (runs: { payee: string; key: string; ordinal: number }[]) =>
  tool({
    inputSchema: z.object({ payee: z.string(), amount: z.number() }),
    execute: async ({ payee }, options) => {
      const info = dispatchOnceOf(options)!;
      runs.push({ payee, key: info.idempotencyKey, ordinal: info.ordinal });
      return { paid: `${payee}#${runs.length}` };
    },
  });
const user = (id: string, text: string): UIMessage => ({ id, role: "user", parts: [{ type: "text", text }] });
const hello: UIMessage[] = [user("u1", "hello"), { id: "a1", role: "assistant", parts: [{ type: "text", text: "Hi." }] }];

function chat() {
  const runs: { payee: string; key: string; ordinal: number }[] = [];
  const ledger = new MemoryLedger();
  const once = createOnceTools({ tools: { pay: pay(runs) }, effects: { pay: "keyed_write" }, ledger, dispatcher: { logger: { warn: () => {} } } });
  let n = 0;
  /** One request: the tab's messages; the model calls pay(payee, 5) once. */
  const request = async (messages: readonly UIMessage[] | ModelMessage[], payee: string) => {
    const turn = once.forTurn({ conversationId: "chat_tabs", messages });
    const toolCallId = `call_${++n}`;
    const result = await turn.tools.pay.execute!({ payee, amount: 5 }, { toolCallId, messages: [] });
    return { result, outcome: turn.outcomeOf(toolCallId)!, turn };
  };
  return { runs, request, once, ledger };
}

describe("two tabs of one chat send new messages on the same history (AISDK-17)", () => {
  it("the same payment asked in both tabs at once is made twice, each tab told its own", async () => {
    const { runs, request } = chat();
    const [a, b] = await Promise.all([request([...hello, user("uA", "pay acme 5")], "acme"), request([...hello, user("uB", "pay acme 5")], "acme")]);
    expect(runs.map((r) => r.payee), JSON.stringify({ runs, a: a.result, b: b.result })).toEqual(["acme", "acme"]);
    expect(a.outcome.key).not.toBe(b.outcome.key);
    expect(a.result).not.toEqual(b.result);
    expect([a.outcome.replayed, b.outcome.replayed]).toEqual([false, false]);
  });

  it("a stale tab that asks the same payment later is another ask, not the first tab's payment", async () => {
    const { runs, request } = chat();
    const a = await request([...hello, user("uA", "pay acme 5")], "acme");
    const b = await request([...hello, user("uB", "pay acme 5")], "acme");
    expect(runs, JSON.stringify({ a: a.result, b: b.result })).toHaveLength(2);
    expect(b.outcome.replayed).toBe(false);
    expect(b.result).not.toEqual(a.result);
  });

  it("each tab's re-send (a regenerate, the same messages) is answered from its own call", async () => {
    const { runs, request } = chat();
    const a = await request([...hello, user("uA", "pay acme 5")], "acme");
    const b = await request([...hello, user("uB", "pay acme 5")], "acme");
    const b2 = await request([...hello, user("uB", "pay acme 5")], "acme");
    const a2 = await request([...hello, user("uA", "pay acme 5")], "acme");
    expect(runs).toHaveLength(2);
    expect([a2.result, b2.result]).toEqual([a.result, b.result]);
    expect([a2.outcome.replayed, b2.outcome.replayed]).toEqual([true, true]);
  });

  it("keys of the turn's first message are the ones it always had (ordinal 0 first), so conversations under way keep theirs", async () => {
    const { request, once } = chat();
    const a = await request([...hello, user("uA", "pay acme 5")], "acme");
    expect(a.outcome.key).toBe(once.dispatcher.keyFor({ name: "pay", input: { payee: "acme", amount: 5 } }, { conversationId: "chat_tabs", turnIndex: 2, ordinal: 0 }));
  });

  it("an edit of the last user message keeps its id: the same turn, not a fork (the same ask is answered, once)", async () => {
    const { runs, request } = chat();
    await request([...hello, user("uA", "pay acme 5")], "acme");
    const edited = await request([...hello, user("uA", "pay acme 5, please")], "acme");
    expect(runs).toHaveLength(1);
    expect(edited.outcome.replayed).toBe(true);
  });

  it("the turn's own record is no effect: unansweredCalls lists the other tab's payment, never the record", async () => {
    const { request } = chat();
    await request([...hello, user("uA", "pay acme 5")], "acme");
    const b = await request([...hello, user("uB", "pay bob 5")], "bob");
    const { calls } = await b.turn.unansweredCalls();
    expect(calls.map((c) => c.name)).toEqual(["pay"]);
    expect(calls[0]!.effect).toBe("happened");
  });

  it("model messages carry no id: two of them at one turn index are not told apart (documented)", async () => {
    const { runs, request } = chat();
    const model = (text: string): ModelMessage[] => [{ role: "user", content: "hello" }, { role: "assistant", content: "Hi." }, { role: "user", content: text }];
    await request(model("pay acme 5"), "acme");
    await request(model("pay acme 5 again"), "acme");
    expect(runs).toHaveLength(1);
  });
});
