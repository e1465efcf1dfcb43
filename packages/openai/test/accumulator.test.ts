import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { MockOpenAI } from "@dispatch-once/mock-openai";
import type OpenAI from "openai";
import { ResponsesTurnAccumulator } from "../src/index.js";
import { PAY_ACME, PAY_BOB, accumulate, sdk, startProvider } from "./fixtures.js";

let mock: MockOpenAI;
let client: OpenAI;
beforeEach(async () => {
  mock = await startProvider();
  client = sdk(mock);
});
afterEach(async () => {
  await mock.close();
});

describe("ResponsesTurnAccumulator over the real SDK", () => {
  it("folds a complete response: calls complete with parsed arguments, the SDK-visible call_ids, text and output items", async () => {
    const { accumulator, error } = await accumulate(client, "pay acme and bob");
    expect(error).toBeUndefined();
    expect(accumulator.completed).toBe(true);
    expect(accumulator.calls.map((c) => [c.phase, c.name, c.input])).toEqual([
      ["complete", "send_payment", PAY_ACME],
      ["complete", "send_payment", PAY_BOB],
    ]);
    expect(accumulator.calls.map((c) => c.callId)).toEqual(mock.requests[0]!.calls.map((c) => c.callId));
    expect(accumulator.text()).toBe("Two payments.");
    expect(accumulator.output().map((o) => o.type)).toEqual(["message", "function_call", "function_call"]);
    expect(accumulator.responseId).toBe(mock.requests[0]!.responseId);
  });

  it("STREAM-4 a call is handed out at its output_item.done, while response.completed has not arrived yet", async () => {
    const states: boolean[] = [];
    const accumulator = new ResponsesTurnAccumulator();
    const stream = await client.responses.create({ model: "gpt-test", input: "pay acme", stream: true });
    for await (const event of stream) if (accumulator.apply(event) !== undefined) states.push(accumulator.completed);
    expect(states).toEqual([false]);
    expect(accumulator.completed).toBe(true);
  });

  it("STREAM-1/STREAM-2 a fault at every event position: failed unless response.completed arrived; the position matches the calls' phases", async () => {
    for (const kind of ["reset", "clean_close", "error_event", "failed_event"] as const) {
      let at = 0;
      for (;; at++) {
        const { accumulator, error } = await accumulate(client, "pay acme and bob", { kind, at: { event: at } });
        const record = mock.requests.at(-1)!;
        if (record.outcome === "script_error") break;
        const path = `${kind} at event ${at} (seed openai-tests, request ${record.requestNumber})`;
        expect(accumulator.completed, path).toBe(false);
        if (kind === "reset") expect(error, path).toBeInstanceOf(TypeError);
        else expect(error, path).toBeUndefined();
        if (kind === "error_event") expect(accumulator.streamError, path).toMatchObject({ event: "error" });
        if (kind === "failed_event") expect(accumulator.streamError, path).toMatchObject({ event: "response.failed" });
        const sent = record.events.map((e) => e.type);
        const done = record.events.filter((e) => e.type === "response.output_item.done" && (e.data.item as { type: string }).type === "function_call").length;
        const open = sent.lastIndexOf("response.output_item.added") > sent.lastIndexOf("response.output_item.done");
        const openIsCall = open && (record.events.filter((e) => e.type === "response.output_item.added").at(-1)!.data.item as { type: string }).type === "function_call";
        // Nothing was dispatched in this test: complete calls read as during_dispatch.
        const expected = done > 0 ? "during_dispatch" : openIsCall ? "arguments_streaming" : "before_any_call";
        expect(accumulator.failurePosition(), path).toBe(expected);
        expect(accumulator.calls.filter((c) => c.phase === "complete"), path).toHaveLength(done);
        const abandoned = accumulator.abandonOpenCalls();
        expect(abandoned.length, path).toBe(openIsCall ? 1 : 0);
        // Abandoned calls never reach the output that would be written into the conversation.
        expect(accumulator.output().filter((o) => o.type === "function_call"), path).toHaveLength(done);
      }
      expect(at, kind).toBeGreaterThan(15);
    }
  });

  it("after dispatch: resolved calls and no open call read as after_dispatch_before_stop", async () => {
    const { accumulator } = await accumulate(client, "pay acme", { kind: "clean_close", at: { beforeCompleted: true } }, (c) => {
      c.phase = "dispatched";
    });
    expect(accumulator.failurePosition()).toBe("during_dispatch");
    for (const c of accumulator.calls) c.phase = "resolved";
    expect(accumulator.failurePosition()).toBe("after_dispatch_before_stop");
  });

  it("a cut during argument streaming: the call stays open with its partial arguments and is abandoned, never handed out", async () => {
    const handed: string[] = [];
    const { accumulator } = await accumulate(client, "pay acme", { kind: "reset", at: { call: 0, afterFragment: 2 } }, (c) => handed.push(c.callId));
    expect(handed).toEqual([]);
    expect(accumulator.calls[0]).toMatchObject({ phase: "arguments_streaming", partialJson: mock.requests[0]!.calls[0]!.fragments.slice(0, 2).join("") });
    expect(accumulator.failurePosition()).toBe("arguments_streaming");
    expect(accumulator.abandonOpenCalls()).toHaveLength(1);
    expect(accumulator.calls[0]!.phase).toBe("abandoned");
  });

  it("an incomplete function_call item is abandoned, not dispatched; arguments that are not a JSON object are an input error", () => {
    const acc = new ResponsesTurnAccumulator();
    const ev = (e: object) => acc.apply(e as OpenAI.Responses.ResponseStreamEvent);
    ev({ type: "response.created", sequence_number: 0, response: { id: "resp_1" } });
    ev({ type: "response.output_item.added", output_index: 0, sequence_number: 1, item: { type: "function_call", id: "fc_1", call_id: "call_1", name: "send_payment", arguments: "", status: "in_progress" } });
    expect(ev({ type: "response.output_item.done", output_index: 0, sequence_number: 2, item: { type: "function_call", id: "fc_1", call_id: "call_1", name: "send_payment", arguments: '{"payee":', status: "incomplete" } })).toBeUndefined();
    expect(acc.calls[0]!.phase).toBe("abandoned");
    const bad = ev({ type: "response.output_item.done", output_index: 1, sequence_number: 3, item: { type: "function_call", id: "fc_2", call_id: "call_2", name: "send_payment", arguments: "[1]", status: "completed" } });
    expect(bad).toMatchObject({ phase: "complete", inputError: "arguments are not a JSON object" });
    ev({ type: "response.incomplete", sequence_number: 4, response: { id: "resp_1" } });
    expect(acc.terminal).toBe("incomplete");
    expect(acc.completed).toBe(false);
    // Events after a terminal event belong to no turn.
    expect(ev({ type: "response.output_item.done", output_index: 2, sequence_number: 5, item: { type: "function_call", id: "fc_3", call_id: "call_3", name: "x", arguments: "{}", status: "completed" } })).toBeUndefined();
  });
});

describe("ResponsesTurnAccumulator.apply with events that are not Responses stream events (ERR-1)", () => {
  const refusal = (event: unknown) => {
    try {
      new ResponsesTurnAccumulator().apply(event as never);
    } catch (error) {
      return error;
    }
    return "accepted";
  };
  it.each([
    ["undefined", undefined, "event"],
    ["null", null, "event"],
    ["a number", 7, "event"],
    ["an event without type", { output_index: 0 }, "event.type"],
    ["a response.created without its response", { type: "response.created" }, "event.response"],
    ["an output_item.added without its item", { type: "response.output_item.added", output_index: 0 }, "event.item"],
    ["an output_item.done without its item", { type: "response.output_item.done", output_index: 0 }, "event.item"],
    ["a message item done without its content", { type: "response.output_item.done", output_index: 0, item: { type: "message" } }, "event.item.content"],
    ["a response.failed without its response", { type: "response.failed" }, "event.response"],
    ["a response.incomplete without its response", { type: "response.incomplete" }, "event.response"],
    ["a function_call item without its name", { type: "response.output_item.added", output_index: 0, item: { type: "function_call", call_id: "call_1" } }, "event.item.name"],
  ])("%s (%j) is invalid_argument naming %s", (_name, event, field) => {
    expect(refusal(event)).toMatchObject({ code: "invalid_argument", field });
  });

  it("a text delta without its delta is refused, not committed as the text 'undefined'", () => {
    const acc = new ResponsesTurnAccumulator();
    acc.apply({ type: "response.created", response: { id: "resp_1" } } as never);
    acc.apply({ type: "response.output_item.added", output_index: 0, item: { type: "message", id: "msg_1" } } as never);
    const thrown = (() => {
      try {
        acc.apply({ type: "response.output_text.delta", output_index: 0 } as never);
      } catch (error) {
        return error;
      }
      return `accepted; text now ${JSON.stringify(acc.text())}`;
    })();
    expect(thrown).toMatchObject({ code: "invalid_argument", field: "event.delta" });
    expect(acc.text()).toBe("");
  });

  it("an event type it does not know (a newer API's) is ignored, as before", () => {
    const acc = new ResponsesTurnAccumulator();
    expect(acc.apply({ type: "response.in_progress", response: { id: "resp_1" } } as never)).toBeUndefined();
    expect(acc.apply({ type: "response.some_future_event" } as never)).toBeUndefined();
  });
});
