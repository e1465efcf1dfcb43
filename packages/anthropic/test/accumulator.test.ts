import { describe, expect, it } from "vitest";
import { TurnAccumulator } from "../src/index.js";

const start = { type: "message_start", message: { id: "msg_1" } } as never;
const toolStart = (index: number, id: string) =>
  ({ type: "content_block_start", index, content_block: { type: "tool_use", id, name: "send_payment", input: {} } }) as never;
const args = (index: number, partial_json: string) =>
  ({ type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json } }) as never;
const stop = (index: number) => ({ type: "content_block_stop", index }) as never;

describe("TurnAccumulator", () => {
  it("STREAM-2 tracks each call's phase and reports where the stream died", () => {
    const acc = new TurnAccumulator();
    acc.apply(start);
    expect(acc.failurePosition()).toBe("before_any_call");
    acc.apply(toolStart(0, "toolu_a"));
    expect(acc.calls[0]!.phase).toBe("announced");
    expect(acc.failurePosition()).toBe("arguments_streaming");
    acc.apply(args(0, ""));
    acc.apply(args(0, '{"payee":"ac'));
    expect(acc.calls[0]!.phase).toBe("arguments_streaming");
    acc.apply(args(0, 'me","amount":1}'));
    const complete = acc.apply(stop(0));
    expect(complete).toMatchObject({ callId: "toolu_a", phase: "complete", input: { payee: "acme", amount: 1 } });
    expect(acc.failurePosition()).toBe("during_dispatch");
    complete!.phase = "resolved";
    expect(acc.failurePosition()).toBe("after_dispatch_before_stop");
    expect(acc.messageStopped).toBe(false);
  });

  it("STREAM-3 abandons calls whose arguments never finished, keeping their partial text", () => {
    const acc = new TurnAccumulator();
    acc.apply(start);
    acc.apply(toolStart(0, "toolu_a"));
    acc.apply(args(0, '{"payee":"ac'));
    const abandoned = acc.abandonOpenCalls();
    expect(abandoned).toEqual([expect.objectContaining({ phase: "abandoned", partialJson: '{"payee":"ac' })]);
    expect(acc.failurePosition()).toBe("arguments_streaming");
  });

  it("a tool call with no argument fragments has the input {}; invalid JSON is reported, not thrown", () => {
    const acc = new TurnAccumulator();
    acc.apply(toolStart(0, "toolu_a"));
    expect(acc.apply(stop(0))!.input).toEqual({});
    acc.apply(toolStart(1, "toolu_b"));
    acc.apply(args(1, '{"payee":'));
    expect(acc.apply(stop(1))!.inputError).toBeDefined();
  });
});

describe("TurnAccumulator.apply with events that are not Messages stream events (ERR-1)", () => {
  const refusal = (event: unknown) => {
    try {
      new TurnAccumulator().apply(event as never);
    } catch (error) {
      return error;
    }
    return "accepted";
  };
  it.each([
    ["undefined", undefined, "event"],
    ["null", null, "event"],
    ["a string", "message_stop", "event"],
    ["an event without type", { index: 0 }, "event.type"],
    ["a content_block_start without its block", { type: "content_block_start", index: 0 }, "event.content_block"],
    ["a content_block_delta without its delta", { type: "content_block_delta", index: 0 }, "event.delta"],
    ["a message_start without its message", { type: "message_start" }, "event.message"],
    ["a message_delta without its delta", { type: "message_delta" }, "event.delta"],
    ["a tool_use block without its name", { type: "content_block_start", index: 0, content_block: { type: "tool_use", id: "toolu_a" } }, "event.content_block.name"],
  ])("%s (%j) is invalid_argument naming %s", (_name, event, field) => {
    expect(refusal(event)).toMatchObject({ code: "invalid_argument", field });
  });

  it("a text_delta without its text is refused, not committed as the text 'undefined'", () => {
    const acc = new TurnAccumulator();
    acc.apply(start);
    acc.apply({ type: "content_block_start", index: 0, content_block: { type: "text", text: "" } } as never);
    const thrown = (() => {
      try {
        acc.apply({ type: "content_block_delta", index: 0, delta: { type: "text_delta" } } as never);
      } catch (error) {
        return error;
      }
      return `accepted; content now ${JSON.stringify(acc.content())}`;
    })();
    expect(thrown).toMatchObject({ code: "invalid_argument", field: "event.delta.text" });
    expect(acc.content()).toEqual([{ type: "text", text: "" }]);
  });

  it("an event type it does not know (a newer API's) is ignored, as before", () => {
    const acc = new TurnAccumulator();
    acc.apply(start);
    expect(acc.apply({ type: "ping" } as never)).toBeUndefined();
    expect(acc.apply({ type: "some_future_event", whatever: 1 } as never)).toBeUndefined();
  });
});
