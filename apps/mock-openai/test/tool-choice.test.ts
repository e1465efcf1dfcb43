import { describe, expect, it } from "vitest";
import { call, forcedByToolChoice, respond, say, type ResponsesRequest } from "../src/index.js";

const PAY = { to: "acme", amount_cents: 1200 };
const paid = (toolChoice?: unknown): ResponsesRequest => ({
  model: "m",
  input: [
    { role: "user", content: "pay acme" },
    { type: "function_call", call_id: "call_1", name: "send_payment", arguments: JSON.stringify(PAY) },
    { type: "function_call_output", call_id: "call_1", output: "paid" },
  ],
  ...(toolChoice !== undefined ? { tool_choice: toolChoice } : {}),
});
const done = say("Paid.");

describe("tool_choice, as the API honours it", () => {
  it("required, the named function, or allowed_tools in mode required makes the response a call: the input's last allowed call, made again", () => {
    for (const choice of ["required", { type: "function", name: "send_payment" }, { type: "allowed_tools", mode: "required", tools: [{ type: "function", name: "send_payment" }] }]) {
      expect(forcedByToolChoice(paid(choice), done)).toEqual(respond(call("send_payment", PAY)));
    }
  });

  it("auto, none, allowed_tools in mode auto, no tool_choice, and a scripted call are answered as scripted", () => {
    for (const choice of [undefined, "auto", "none", { type: "allowed_tools", mode: "auto", tools: [] }]) expect(forcedByToolChoice(paid(choice), done)).toBe(done);
    const calls = respond(call("send_payment", { to: "bob", amount_cents: 1 }));
    expect(forcedByToolChoice(paid("required"), calls)).toBe(calls);
  });

  it("a forced call with none to make again fails loudly (invalid_turn)", () => {
    expect(() => forcedByToolChoice(paid({ type: "function", name: "void_payment" }), done)).toThrow(expect.objectContaining({ code: "invalid_turn" }));
  });
});
