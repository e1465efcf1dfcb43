import { MemoryLedger } from "@dispatch-once/core";
import { tool, type UIMessage } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf, turnIndexOf } from "../src/index.js";

/*
 * The AI SDK's message-persistence pattern: the client sends only its last message, the server
 * loads the chat from its store, appends it, and saves the whole chat in `onFinish` (with
 * `consumeStream()`, so it finishes even when the client went away). A client whose stream was
 * cut re-sends the same user message (same id); the server already saved that message and its
 * answer, so the request it builds holds the message twice. That is a re-send of the turn
 * (AISDK-6), not a new turn: a new turn index would give the model's repeat of the call new keys.
 */
const input = { payee: "bob", amount: 5 };
const userMessage = (id: string): UIMessage => ({ id, role: "user", parts: [{ type: "text", text: "pay bob $5" }] });
const answer = (toolCallId: string): UIMessage => ({
  id: `a-${toolCallId}`,
  role: "assistant",
  parts: [{ type: "tool-pay", toolCallId, state: "output-available", input, output: { ok: true } }] as UIMessage["parts"],
});

function route() {
  const runs: { turnIndex: number; ordinal: number; key: string }[] = [];
  const pay = tool({
    inputSchema: z.object({ payee: z.string(), amount: z.number() }),
    execute: async (_input, options) => {
      const info = dispatchOnceOf(options)!;
      runs.push({ turnIndex: info.turnIndex, ordinal: info.ordinal, key: info.idempotencyKey });
      return { ok: true };
    },
  });
  const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger: new MemoryLedger() });
  /** One request of the route: the stored chat plus the client's last message; the model calls pay once. */
  const request = async (stored: UIMessage[], last: UIMessage, toolCallId: string) => {
    const messages = [...stored, last];
    const turn = once.forTurn({ conversationId: "chat_p", messages });
    await turn.tools.pay.execute!(input, { toolCallId, messages: [] });
    return { messages, outcome: turn.outcomeOf(toolCallId)! };
  };
  return { runs, request };
}

describe("AISDK-10: a user message sent again (same id) keeps its turn", () => {
  it("the server saved the turn in onFinish, the client re-sends its message: answered from the ledger, nothing runs again", async () => {
    const { runs, request } = route();
    const first = await request([], userMessage("msg-1"), "call_a");
    // onFinish saved the message and its answer; the client never saw the answer and re-sends.
    const stored = [...first.messages, answer("call_a")];
    const again = await request(stored, userMessage("msg-1"), "call_b");
    expect(runs).toHaveLength(1);
    expect(again.outcome).toMatchObject({ replayed: true, key: first.outcome.key });
  });

  it("control: a new message with the same words (a new id) is a new turn, and its call runs", async () => {
    const { runs, request } = route();
    const first = await request([], userMessage("msg-1"), "call_a");
    await request([...first.messages, answer("call_a")], userMessage("msg-2"), "call_b");
    expect(runs.map((r) => r.turnIndex)).toEqual([1, 2]);
  });

  it("turnIndexOf gives a repeated user message its first sending's turn; messages without ids count one by one", () => {
    const u = (id?: string) => ({ role: "user", ...(id !== undefined ? { id } : {}) });
    expect(turnIndexOf([u("m1"), { role: "assistant" }, u("m1")])).toBe(1);
    expect(turnIndexOf([u("m1"), { role: "assistant" }, u("m2"), { role: "assistant" }, u("m2")])).toBe(2);
    expect(turnIndexOf([u("m1"), { role: "assistant" }, u("m2"), { role: "assistant" }, u("m1")])).toBe(1);
    expect(turnIndexOf([u("m1"), u("m2"), u("m3")])).toBe(3);
    // Model messages carry no id: every user message is a turn.
    expect(turnIndexOf([u(), { role: "assistant" }, u()])).toBe(2);
  });
});
