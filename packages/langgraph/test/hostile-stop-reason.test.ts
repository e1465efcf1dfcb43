import { AIMessage } from "@langchain/core/messages";
import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { assertStopReason, onceRetryOn } from "../src/index.js";

/*
 * LANGGRAPH-3: the app's stopReasonOf is application code. One that answers "" (a client's absent
 * field read as `finishReason ?? ""`) must count as no stop reason, as the default reader's "" does:
 * taken for a reason, a cut stream's calls would run, the last with arguments the model never
 * finished. One that answers something not a string is the app's mistake, named as such, and not
 * retried: before, it was a bare TypeError that onceRetryOn retried, a model call each time.
 */
const cut = new AIMessage({ content: "", tool_calls: [{ id: "c1", name: "pay", args: { amount: 5 } }] });

describe("LANGGRAPH-3 what the app's stopReasonOf answers", () => {
  it('"" is no stop reason: stream_incomplete, as the default reader treats it', () => {
    let thrown: unknown;
    try {
      assertStopReason(cut, { stopReasonOf: () => "" });
    } catch (error) {
      thrown = error;
    }
    expect(isDispatchOnceError(thrown, "stream_incomplete"), String(thrown)).toBe(true);
  });
  it.each([null, 0, true, { reason: "tool_use" }])("%s (not a string) is refused as invalid_argument naming the option, not retried", (answer) => {
    let thrown: unknown;
    try {
      assertStopReason(cut, { stopReasonOf: () => answer as never });
    } catch (error) {
      thrown = error;
    }
    expect(isDispatchOnceError(thrown, "invalid_argument"), String(thrown)).toBe(true);
    expect(thrown).toMatchObject({ field: "options.stopReasonOf" });
    expect(onceRetryOn(thrown)).toBe(false);
  });
});
