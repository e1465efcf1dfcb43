import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool, type JsonValue, type StoredTurn } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  CallPhases,
  TurnFailedError,
  TurnRunner,
  isCall,
  type CallAnswer,
  type CallState,
  type CommitShape,
  type RunnerEvent,
  type StoredTurnView,
  type StreamProvider,
  type StreamStep,
} from "../src/index.js";

/** A toy stream: events are plain objects, so the runner's rules are tested without any SDK. */
type ToyEvent =
  | { t: "call"; index: number; id: string; name: string }
  | { t: "args"; index: number; json: string }
  | { t: "done"; index: number }
  | { t: "text"; index: number; text: string }
  | { t: "oops"; message: string }
  | { t: "end" };

class ToyAccumulator extends CallPhases {
  ended = false;
  oops: string | undefined;
  apply(event: ToyEvent): CallState | undefined {
    this.eventsSeen++;
    switch (event.t) {
      case "call":
        this.openCall({ index: event.index, callId: event.id, name: event.name, phase: "announced", partialJson: "" });
        return undefined;
      case "args": {
        const call = this.callAt(event.index);
        if (call !== undefined) this.appendArguments(call, event.json);
        return undefined;
      }
      case "done": {
        const call = this.callAt(event.index);
        return call === undefined ? undefined : this.completeCall(call, { requireObject: true });
      }
      case "text":
        this.setText(event.index, event.text);
        return undefined;
      case "oops":
        this.oops = event.message;
        return undefined;
      case "end":
        this.ended = true;
        return undefined;
    }
  }
  parts_(): unknown[] {
    return this.orderedParts().map((p) => (isCall(p) ? { call: p.callId } : { text: p.text }));
  }
}

/** Responses scripted per request number; a script entry ending in "cut" throws after its events. */
class ToyProvider implements StreamProvider<ToyAccumulator, ToyEvent, string> {
  readonly finishEvent = "end";
  requests: JsonValue[][] = [];
  constructor(
    private readonly script: (request: number, input: JsonValue[]) => (ToyEvent | "cut")[],
    /** Awaited before a cut: lets a test place the cut after a dispatched call resolved, without timing. */
    private readonly beforeCut: () => Promise<void>,
  ) {}
  createAccumulator() {
    return new ToyAccumulator();
  }
  userMessage(content: string): JsonValue {
    return { role: "user", content };
  }
  async open(input: JsonValue[]): Promise<AsyncIterable<ToyEvent>> {
    this.requests.push(input);
    const events = this.script(this.requests.length, input);
    const beforeCut = this.beforeCut;
    return (async function* () {
      for (const event of events) {
        if (event === "cut") {
          await beforeCut();
          throw new TypeError("terminated");
        }
        // Let dispatched calls run between events, as a network would.
        await new Promise((r) => setTimeout(r, 5));
        yield event;
      }
    })();
  }
  apply(accumulator: ToyAccumulator, event: ToyEvent): StreamStep {
    const complete = accumulator.apply(event);
    return { ...(complete !== undefined ? { complete } : {}), ...(event.t === "text" ? { textDelta: { index: event.index, text: event.text } } : {}) };
  }
  finished(accumulator: ToyAccumulator): boolean {
    return accumulator.ended;
  }
  streamError(accumulator: ToyAccumulator): string | undefined {
    return accumulator.oops;
  }
  commitShape(accumulator: ToyAccumulator, answers: CallAnswer[]): CommitShape {
    const calls = answers.length > 0;
    return {
      assistant: accumulator.parts_() as JsonValue,
      ...(calls ? { toolResults: answers.map(({ call, answer }) => ({ id: call.callId, ...(answer.ok ? { ok: answer.resultJson } : { error: answer.error.message }) })) as JsonValue } : {}),
      stopReason: calls ? "calls" : "end",
      answers: !calls,
      text: accumulator.parts_().flatMap((p) => ("text" in (p as object) ? [(p as { text: string }).text] : [])).join(""),
    };
  }
  readTurn(turn: StoredTurn): StoredTurnView {
    return { text: "", calls: (Array.isArray(turn.toolResults) ? turn.toolResults : []).map((r) => ({ callId: String((r as { id: string }).id), name: "pay" })) };
  }
}

function world(script: (request: number, input: JsonValue[]) => (ToyEvent | "cut")[], cutAfterResolved = false) {
  const performed: unknown[] = [];
  const tools = new ToolRegistry([
    defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string(), memo: z.string() }),
      identity: ["to"],
      run: async (args) => {
        await new Promise((r) => setTimeout(r, 1));
        performed.push(args);
        return { n: performed.length };
      },
    }),
  ]);
  const events: RunnerEvent[] = [];
  const provider = new ToyProvider(script, async () => {
    while (cutAfterResolved && !events.some((e) => e.type === "call_resolved")) await new Promise((r) => setTimeout(r, 1));
  });
  const store = new MemoryConversationStore();
  const runner = new TurnRunner(provider, {
    dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger() }),
    store,
    retry: { backoffMs: () => 1 },
    onEvent: (e) => events.push(e),
  });
  return { runner, provider, performed, events, store };
}

const payCall = (id: string, memo: string): ToyEvent[] => [
  { t: "call", index: 0, id, name: "pay" },
  { t: "args", index: 0, json: `{"to":"acme",` },
  { t: "args", index: 0, json: `"memo":"${memo}"}` },
  { t: "done", index: 0 },
];

describe("TurnRunner over a provider-free StreamProvider", () => {
  it("STREAM-5 a cut after the call ran and before the finish event: retried with a new call id and memo, the effect happens once", async () => {
    const { runner, performed, events, store } = world((n, input) => {
      if ((input.at(-1) as { role?: string }).role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
      return n === 1 ? [...payCall("c1", "first"), "cut"] : [...payCall(`c${n}`, "reworded"), { t: "end" }];
    }, true);
    const result = await runner.send("conv-toy", { id: "m1", content: "pay acme" });
    expect(performed).toHaveLength(1);
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position: "after_dispatch_before_stop" });
    expect(result.turns.map((t) => [t.attempts, t.stopReason, t.text])).toEqual([
      [2, "calls", ""],
      [1, "end", "Paid."],
    ]);
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ callId: "c2", replayed: true, result: { n: 1 } })]);
    // The commit shape is the provider's: one result, under the retried response's call id.
    expect(await store.log("conv-toy")).toEqual([{ role: "user", content: "pay acme" }, [{ call: "c2" }], [{ id: "c2", ok: '{"n":1}' }], [{ text: "Paid." }]]);
  });

  it("STREAM-1 a stream that ends without its finish event fails with the provider's finish event and in-band error named", async () => {
    const { runner, performed } = world(() => [{ t: "oops", message: "overloaded" }]);
    const error = (await runner.send("conv-toy", { id: "m1", content: "x" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record).toMatchObject({ position: "before_any_call", attempts: 3, error: { name: "StreamIncompleteError", code: "stream_incomplete" } });
    expect(error.record.error.message).toBe("the stream ended after 1 events without end (overloaded)");
    expect(performed).toEqual([]);
  });

  it("STREAM-3 a call whose arguments are cut is abandoned, never dispatched, and reported with its partial arguments", async () => {
    const { runner, performed, events } = world(() => [...payCall("c", "m").slice(0, 2), "cut"]);
    const error = (await runner.send("conv-toy", { id: "m1", content: "x" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record.calls.map((c) => [c.status, c.partialArguments])).toEqual(Array(3).fill(["not_run", `{"to":"acme",`]));
    expect(events.filter((e) => e.type === "call_abandoned")).toHaveLength(3);
    expect(events.filter((e) => e.type === "call_complete")).toHaveLength(0);
    expect(performed).toEqual([]);
  });
});

describe("CallPhases", () => {
  it("STREAM-2 the position is read from the phases, a running call first", () => {
    const acc = new ToyAccumulator();
    expect(acc.failurePosition()).toBe("before_any_call");
    acc.apply({ t: "call", index: 0, id: "a", name: "pay" });
    expect(acc.failurePosition()).toBe("arguments_streaming");
    acc.apply({ t: "args", index: 0, json: "{}" });
    const done = acc.apply({ t: "done", index: 0 })!;
    acc.apply({ t: "call", index: 1, id: "b", name: "pay" });
    expect(acc.failurePosition()).toBe("during_dispatch");
    done.phase = "resolved";
    expect(acc.failurePosition()).toBe("arguments_streaming");
    expect(acc.abandonOpenCalls().map((c) => c.callId)).toEqual(["b"]);
    expect(acc.failurePosition()).toBe("arguments_streaming");
  });

  it("a repeated completion does not hand the call out twice; late fragments are ignored; non-object arguments are refused when asked", () => {
    const acc = new ToyAccumulator();
    acc.apply({ t: "call", index: 0, id: "a", name: "pay" });
    acc.apply({ t: "args", index: 0, json: "[1]" });
    const first = acc.apply({ t: "done", index: 0 });
    expect(first).toMatchObject({ phase: "complete", inputError: "arguments are not a JSON object" });
    expect(acc.apply({ t: "done", index: 0 })).toBeUndefined();
    acc.apply({ t: "args", index: 0, json: "junk" });
    expect(first!.partialJson).toBe("[1]");
  });
});
