import {
  Dispatcher,
  MemoryConversationStore,
  MemoryLedger,
  ToolRegistry,
  defineTool,
  type ConversationStore,
  type DispatcherOptions,
  type JsonValue,
  type Ledger,
  type StoredTurn,
} from "@dispatch-once/core";
import { z } from "zod";
import {
  CallPhases,
  TurnRunner,
  isCall,
  type CallAnswer,
  type CallState,
  type CommitShape,
  type RunnerEvent,
  type StoredTurnView,
  type StreamProvider,
  type StreamStep,
  type TurnRunnerOptions,
} from "../src/index.js";

/** A toy stream: events are plain objects, so the runner's rules are tested without any SDK. */
export type ToyEvent =
  | { t: "call"; index: number; id: string; name: string }
  | { t: "args"; index: number; json: string }
  | { t: "done"; index: number }
  | { t: "text"; index: number; text: string }
  | { t: "oops"; message: string }
  | { t: "end" };

export class ToyAccumulator extends CallPhases {
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
export class ToyProvider implements StreamProvider<ToyAccumulator, ToyEvent, string> {
  readonly finishEvent = "end";
  requests: JsonValue[][] = [];
  /** What the runner told `open` of each request: a later turn of its message (STREAM-18). */
  followUps: (boolean | undefined)[] = [];
  /** Set by a test that checks the runner asks the provider about a message's content first. */
  checkContent?: (content: string) => void;
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
  async open(input: JsonValue[], options: { headers?: Record<string, string>; signal?: AbortSignal; followUp?: boolean } = {}): Promise<AsyncIterable<ToyEvent>> {
    this.requests.push(input);
    this.followUps.push(options.followUp);
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

/** A toy runner over one pay tool; `options` lets a test share the store and ledger between workers. */
export function world(
  script: (request: number, input: JsonValue[]) => (ToyEvent | "cut")[],
  cutAfterResolved = false,
  options: {
    store?: ConversationStore;
    ledger?: Ledger;
    performed?: unknown[];
    runner?: Partial<TurnRunnerOptions>;
    /** Called with each payment's arguments before it is performed; throwing refuses it (a downstream's answer), a promise holds it. */
    beforePay?: (args: unknown) => void | Promise<void>;
    /** The dispatcher's options beyond its tools and ledger (runTimeoutMs, leaseMs, ...). */
    dispatcher?: Partial<Omit<DispatcherOptions, "tools" | "ledger">>;
    /** Another definition of the pay tool's schema and identity (a deploy that changes them, IDENT-4), or its name (IDENT-11). */
    pay?: { input?: z.ZodObject; identity?: string[]; name?: string; formerNames?: string[] };
    /** What the pay tool returns for its n-th payment (a value no ledger can keep, say); `{ n }` by default. */
    payResult?: (n: number) => unknown;
  } = {},
) {
  const performed: unknown[] = options.performed ?? [];
  const tools = new ToolRegistry([
    defineTool({
      name: options.pay?.name ?? "pay",
      ...(options.pay?.formerNames !== undefined ? { formerNames: options.pay.formerNames } : {}),
      effect: "keyed_write",
      input: options.pay?.input ?? (z.object({ to: z.string(), memo: z.string() }) as z.ZodObject),
      identity: options.pay?.identity ?? ["to"],
      run: async (args) => {
        await new Promise((r) => setTimeout(r, 1));
        await options.beforePay?.(args);
        performed.push(args);
        return options.payResult !== undefined ? options.payResult(performed.length) : { n: performed.length };
      },
    }),
  ]);
  const events: RunnerEvent[] = [];
  const provider = new ToyProvider(script, async () => {
    while (cutAfterResolved && !events.some((e) => e.type === "call_resolved")) await new Promise((r) => setTimeout(r, 1));
  });
  const store = options.store ?? new MemoryConversationStore();
  const dispatcher = new Dispatcher({ tools, ledger: options.ledger ?? new MemoryLedger(), ...options.dispatcher });
  const runner = new TurnRunner(provider, {
    dispatcher,
    store,
    allowVolatileConversationStore: true,
    retry: { backoffMs: () => 1 },
    onEvent: (e) => events.push(e),
    ...options.runner,
  });
  return { runner, provider, performed, events, store, dispatcher };
}

export const payCall = (id: string, memo: string): ToyEvent[] => [
  { t: "call", index: 0, id, name: "pay" },
  { t: "args", index: 0, json: `{"to":"acme",` },
  { t: "args", index: 0, json: `"memo":"${memo}"}` },
  { t: "done", index: 0 },
];

