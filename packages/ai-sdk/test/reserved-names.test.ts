import { isDispatchOnceError, MemoryLedger } from "@dispatch-once/core";
import { tool } from "ai";
import { z } from "zod";
import { describe, expect, it } from "vitest";
import { createOnceTools } from "../src/index.js";
import { quiet } from "./helpers.js";

/*
 * EFFECT-8: the wrapper keeps its own rows under names beginning with "dispatch-once-" (AISDK-11's
 * repairs, AISDK-17's turn and message records), and AISDK-14's listing leaves them out as no
 * effect. An app's tool under such a name would have its payments left out with them: refused.
 */
const pay = () => tool({ inputSchema: z.object({ amount: z.number() }), execute: async () => ({ paid: true }) });

describe("EFFECT-8 createOnceTools refuses a reserved tool name", () => {
  for (const name of ["dispatch-once-turn", "dispatch-once-message", "dispatch-once-repair", "dispatch-once-refund"]) {
    it(`refuses ${name} with invalid_argument naming the reserved prefix`, () => {
      let thrown: unknown;
      try {
        createOnceTools({ tools: { [name]: pay() }, effects: { [name]: "keyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
      } catch (error) {
        thrown = error;
      }
      expect(isDispatchOnceError(thrown, "invalid_argument"), String(thrown)).toBe(true);
      expect(thrown).toMatchObject({ field: `options.tools.${name}` });
      expect(String((thrown as Error).message)).toMatch(/reserved.*"dispatch-once-"/);
    });
  }

  it("still accepts a name that only contains the words", () => {
    const once = createOnceTools({ tools: { dispatch_once_turn: pay(), "my-dispatch-once-turn": pay() }, effects: { dispatch_once_turn: "keyed_write", "my-dispatch-once-turn": "keyed_write" }, ledger: new MemoryLedger(), dispatcher: quiet });
    for (const name of ["dispatch_once_turn", "my-dispatch-once-turn"]) {
      expect(once.dispatcher.keyFor({ name, input: { amount: 1 } }, { conversationId: "c", turnIndex: 0, ordinal: 0 })).toMatch(/^[0-9a-f]{32}$/);
    }
  });
});
