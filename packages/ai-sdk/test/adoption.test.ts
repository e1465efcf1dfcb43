import { MemoryLedger, isDispatchOnceError } from "@dispatch-once/core";
import { tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools, dispatchOnceOf } from "../src/index.js";

/** Findings of the adoption trial (part 2): bad input to the AI SDK side's entry points. */

function refusal(f: () => unknown): [string, string | undefined] | "accepted" {
  try {
    f();
  } catch (error) {
    if (!isDispatchOnceError(error)) return [`untyped ${(error as Error)?.name}: ${(error as Error)?.message}`, undefined];
    return [error.code, (error as { field?: string }).field];
  }
  return "accepted";
}

const pay = tool({ description: "pay", inputSchema: z.object({ to: z.string() }), execute: async () => ({ ok: true }) });

describe("adoption trial (ai-sdk): bad input is refused with a typed error naming the field", () => {
  it("ERR-1 a tool set member that is not a tool is refused (was TypeError 'reading execute')", () => {
    expect(refusal(() => createOnceTools({ tools: { pay: null } as never, effects: {} as never, ledger: new MemoryLedger() }))).toEqual(["invalid_argument", "options.tools.pay"]);
    expect(refusal(() => createOnceTools({ tools: { pay: 5 } as never, effects: {} as never, ledger: new MemoryLedger() }))).toEqual(["invalid_argument", "options.tools.pay"]);
  });

  it("ERR-1 the dispatcher option must be an object without tools or ledger (5 was spread as nothing; tools and ledger given there were silently replaced)", () => {
    const base = { tools: { pay }, effects: { pay: "keyed_write" as const }, ledger: new MemoryLedger() };
    expect(refusal(() => createOnceTools({ ...base, dispatcher: 5 as never }))).toEqual(["invalid_argument", "options.dispatcher"]);
    expect(refusal(() => createOnceTools({ ...base, dispatcher: [] as never }))).toEqual(["invalid_argument", "options.dispatcher"]);
    expect(refusal(() => createOnceTools({ ...base, dispatcher: { tools: [] } as never }))).toEqual(["invalid_argument", "options.dispatcher.tools"]);
    expect(refusal(() => createOnceTools({ ...base, dispatcher: { ledger: new MemoryLedger() } as never }))).toEqual(["invalid_argument", "options.dispatcher.ledger"]);
    expect(refusal(() => createOnceTools({ ...base, dispatcher: { pollMs: 5 } }))).toBe("accepted");
  });

  it("ERR-1 dispatchOnceOf refuses something that is not execute's options (was TypeError 'reading dispatchOnce')", () => {
    expect(refusal(() => dispatchOnceOf(undefined as never))).toEqual(["invalid_argument", "options"]);
    expect(refusal(() => dispatchOnceOf(null as never))).toEqual(["invalid_argument", "options"]);
    expect(dispatchOnceOf({ toolCallId: "t1", messages: [] })).toBeUndefined();
  });
});
