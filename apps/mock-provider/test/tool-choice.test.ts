import { describe, expect, it } from "vitest";
import { forcedByToolChoice, say, toolUse, turn, type MessagesRequest } from "../src/index.js";

const PAY = { to: "acme", amount_cents: 1200 };
const paid = (toolChoice?: MessagesRequest["tool_choice"]): MessagesRequest => ({
  model: "m",
  max_tokens: 64,
  messages: [
    { role: "user", content: "pay acme" },
    { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "send_payment", input: PAY }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "paid" }] },
  ],
  ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
});
const done = turn(say("Paid."));

describe("tool_choice, as the API honours it", () => {
  it("any or the named tool makes the response a call: the conversation's last allowed call, made again", () => {
    for (const choice of [{ type: "any" as const }, { type: "tool" as const, name: "send_payment" }]) {
      expect(forcedByToolChoice(paid(choice), done)).toEqual(turn(toolUse("send_payment", PAY)));
    }
  });

  it("auto, none, no tool_choice, and a scripted turn that already calls an allowed tool are answered as scripted", () => {
    for (const choice of [undefined, { type: "auto" as const }, { type: "none" as const }]) expect(forcedByToolChoice(paid(choice), done)).toBe(done);
    const calls = turn(toolUse("send_payment", { to: "bob", amount_cents: 1 }));
    expect(forcedByToolChoice(paid({ type: "any" }), calls)).toBe(calls);
  });

  it("a forced call with none to make again fails loudly (invalid_turn)", () => {
    expect(() => forcedByToolChoice(paid({ type: "tool", name: "void_payment" }), done)).toThrow(expect.objectContaining({ code: "invalid_turn" }));
  });
});
