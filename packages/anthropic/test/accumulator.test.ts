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
