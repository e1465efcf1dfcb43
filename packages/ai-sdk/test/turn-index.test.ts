import { MemoryLedger, isDispatchOnceError } from "@dispatch-once/core";
import { tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, turnIndexOf } from "../src/index.js";

describe("AISDK-1: the turn index is the number of user messages", () => {
  it("counts user messages in UI messages and in model messages alike", () => {
    expect(turnIndexOf([])).toBe(0);
    expect(turnIndexOf([{ role: "system" }, { role: "user" }, { role: "assistant" }, { role: "tool" }])).toBe(1);
    // An approval or a tool result is not a user message: a re-sent approval stays in its turn.
    expect(turnIndexOf([{ role: "user" }, { role: "assistant" }, { role: "tool" }, { role: "tool" }])).toBe(1);
    expect(turnIndexOf([{ role: "user" }, { role: "assistant" }, { role: "user" }])).toBe(2);
  });

  it("refuses what is not a message array", () => {
    let caught: unknown;
    try {
      turnIndexOf("hello" as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_argument")).toBe(true);
  });
});

describe("EFFECT-1: every executed tool declares its effect class", () => {
  const noop = tool({ inputSchema: z.object({}), execute: async () => "ok" });

  it("refuses a tool with execute and no effect", () => {
    let caught: unknown;
    try {
      createOnceTools({ tools: { noop }, effects: {} as never, ledger: new MemoryLedger() });
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_argument")).toBe(true);
  });

  it("KEY-2: forTurn refuses a conversation id outside core's alphabet before any call runs", () => {
    const once = createOnceTools({ tools: { noop }, effects: { noop: "keyed_write" }, ledger: new MemoryLedger() });
    let caught: unknown;
    try {
      once.forTurn({ conversationId: "chat id with spaces", messages: [{ role: "user" }] });
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_key_input")).toBe(true);
  });

  it("passes a tool without execute (a client-side tool) through unchanged", () => {
    const clientSide = tool({ inputSchema: z.object({}) });
    const once = createOnceTools({ tools: { noop, clientSide }, effects: { noop: "read", clientSide: "read" }, ledger: new MemoryLedger() });
    const turn = once.forTurn({ conversationId: "c", turnIndex: 0 });
    expect(turn.tools.clientSide).toBe(clientSide);
    expect(turn.tools.noop).not.toBe(noop);
  });
});
