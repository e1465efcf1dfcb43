import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, InvalidToolDefinitionError, MemoryLedger, RECORD_ROW_PREFIX, ToolRegistry, defineTool, isRecordRowName } from "../src/index.js";
import { markRecordTool } from "../src/internal/index.js";

// EFFECT-8: the names under which Dispatch-Once keeps its own bookkeeping rows are no app's tool.
const write = (name: string, formerNames?: string[]) => ({ name, effect: "keyed_write" as const, input: z.object({}), ...(formerNames ? { formerNames } : {}), run: () => null });

describe("EFFECT-8 reserved record-row names", () => {
  it("names the prefix and tells record rows from tool rows", () => {
    expect(RECORD_ROW_PREFIX).toBe("dispatch-once-");
    expect(["dispatch-once-turn", "dispatch-once-message", "dispatch-once-repair", "dispatch-once-later"].map(isRecordRowName)).toEqual([true, true, true, true]);
    expect(["send_payment", "dispatch-once", "dispatch_once_turn", "my-dispatch-once-turn"].map(isRecordRowName)).toEqual([false, false, false, false]);
  });

  for (const name of ["dispatch-once-turn", "dispatch-once-message", "dispatch-once-repair", "dispatch-once-anything"]) {
    it(`refuses an app's tool named ${name} in defineTool, the registry and the dispatcher`, () => {
      expect(() => defineTool(write(name))).toThrow(InvalidToolDefinitionError);
      expect(() => defineTool(write(name))).toThrow(/reserved.*dispatch-once-/);
      expect(() => new ToolRegistry([write(name)])).toThrow(InvalidToolDefinitionError);
      expect(() => new Dispatcher({ tools: [write(name)], ledger: new MemoryLedger() })).toThrow(InvalidToolDefinitionError);
    });
  }

  it("refuses a reserved former name: its record rows would be read as the tool's (IDENT-11)", () => {
    expect(() => defineTool(write("send_payment", ["dispatch-once-turn"]))).toThrow(/former name "dispatch-once-turn".*reserved/);
  });

  it("accepts a record tool that Dispatch-Once's own packages mark (./internal)", () => {
    const tool = defineTool(markRecordTool(write("dispatch-once-turn")));
    expect(new ToolRegistry([tool]).has("dispatch-once-turn")).toBe(true);
    // A copy is another definition: the mark does not travel with a spread.
    expect(() => new ToolRegistry([{ ...tool }])).toThrow(InvalidToolDefinitionError);
  });
});
