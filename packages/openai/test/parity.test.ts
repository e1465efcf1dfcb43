import { afterEach, describe, expect, it } from "vitest";
import type { Fault as AnthropicFault, MockProvider } from "@dispatch-once/mock-provider";
import { call, respond, scriptFromPlans, startMockOpenAI, type Fault as OpenAIFault, type MockOpenAI, type RequestInfo } from "@dispatch-once/mock-openai";
import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, defineTool, type ConversationStore, type StoredError } from "@dispatch-once/core";
import type { FailurePosition, RunnerEvent, SendResult } from "@dispatch-once/runner";
import { z } from "zod";
// The Anthropic side's own test fixtures: the same payments tool, plans and runner options.
import {
  RunnerEventLog as AnthropicEventLog,
  checkCutGates as checkAnthropicCutGates,
  closeDownstreams as closeAnthropicDownstreams,
  cutAfterDispatch as cutAnthropicAfterDispatch,
  providerWithPlans,
  setup as setupAnthropic,
} from "../../anthropic/test/fixtures.js";
import { ChatCompletionsRunner, TurnFailedError } from "../src/index.js";
import { PAY_ACME, RunnerEventLog, checkCutGates, closeDownstreams, cutAfterDispatch, isPaymentRequest, payments, setup as setupOpenAI, startProvider, sdk } from "./fixtures.js";

/**
 * The same scenarios through the three stream sides (Anthropic Messages, OpenAI Responses, OpenAI
 * Chat Completions), each over its real SDK and its mock: the runner is shared (STREAM-14), so
 * what a user can observe (payments made, attempts, failure positions, the failed-turn record,
 * what was committed) must be the same. Each scenario names the cut in each stream's words; only
 * the fault plan differs, and where the chat side's structure makes a position differ the
 * scenario says which and why.
 */
type Cut =
  | {
      /** Fault on the payment request. */
      fault: true;
      anthropic: AnthropicFault;
      openai: OpenAIFault;
    }
  | {
      /**
       * The payment request is held where its finish event goes and cut with this kind once its
       * call resolved: after the dispatch by causal order, not by a sleep the payment may outlast.
       */
      cutAfterDispatch: "reset" | "clean_close";
    }
  | {
      /** No stream is cut. */
      noCut: true;
    };

/**
 * The chat side's cut. On Chat Completions a call is final at the next call's first fragment or
 * at `finish_reason` (STREAM-20), and `finish_reason` also finishes the response: a response's
 * last call is dispatched only once the turn is established. So "the payment ran, the stream was
 * cut before the finish event" exists only where the payment is not the last call: the chat
 * mock's "pay acme" response is the payment followed by a read (`get_balance`, no effect), and
 * the user-visible comparison is over the payment calls. With a call still open at the cut, the
 * chat side's position is `arguments_streaming` where the other sides say
 * `after_dispatch_before_stop` (STREAM-2's order: an open call ranks above resolved ones); that
 * the read was abandoned is asserted on its own.
 */
type ChatCut = { position: Position } & ({ fault: OpenAIFault } | { cutAfterPayment: "reset" | "clean_close" } | { noCut: true });

/** Where every cut attempt failed (STREAM-2), or the record's position when no stream failed. */
type Position = FailurePosition | "call_unresolved";

type Scenario = {
  name: string;
  /** `firstOnly` leaves the retries alone. */
  firstOnly: boolean;
  attempts?: number;
  /** Where every cut attempt failed (STREAM-2), on the Anthropic and Responses sides. */
  position: Position;
  /** The payments API performs the payment and its answer is lost on the way back (`drop_after_accept`). */
  answerLost?: number;
  /** The request the fault is on: the payment's (default) or the answer's after its result. */
  on?: "answer";
  /** The user's message (a plan of every mock); default "pay acme". */
  ask?: string;
  /** Payments in the effect log: once per ask, none when the payment never ran. */
  paid: 0 | 1 | 2;
  chat: ChatCut;
} & Cut;

/** The chat side cannot stop between the payment's result and `finish_reason` with no call open: see ChatCut. */
const CHAT_AFTER_PAYMENT: FailurePosition = "arguments_streaming";

const SCENARIOS: Scenario[] = [
  {
    name: "STREAM-5 a reset after the payment ran, before the finish event",
    cutAfterDispatch: "reset",
    paid: 1,
    firstOnly: true,
    position: "after_dispatch_before_stop",
    chat: { cutAfterPayment: "reset", position: CHAT_AFTER_PAYMENT },
  },
  {
    name: "STREAM-5 a reset while the payment runs",
    fault: true,
    anthropic: { kind: "reset", at: { afterToolUseStop: 0 } },
    openai: { kind: "reset", at: { afterCallDone: 0 } },
    paid: 1,
    firstOnly: true,
    position: "during_dispatch",
    // Call 0 is final at call 1's first fragment: the payment runs, the read is named. (With a
    // lone call this position is after finish_reason: the turn would be established, no cut.)
    chat: { fault: { kind: "reset", at: { afterCallDone: 0 } }, position: "during_dispatch" },
  },
  {
    name: "STREAM-1 a clean close before the finish event",
    cutAfterDispatch: "clean_close",
    paid: 1,
    firstOnly: true,
    position: "after_dispatch_before_stop",
    chat: { cutAfterPayment: "clean_close", position: CHAT_AFTER_PAYMENT },
  },
  {
    name: "STREAM-1 a clean close while the payment runs",
    fault: true,
    anthropic: { kind: "clean_close", at: { afterToolUseStop: 0 } },
    openai: { kind: "clean_close", at: { afterCallDone: 0 } },
    paid: 1,
    firstOnly: true,
    position: "during_dispatch",
    chat: { fault: { kind: "clean_close", at: { afterCallDone: 0 } }, position: "during_dispatch" },
  },
  {
    name: "TURN-3 a reset in the answer after the payment's turn committed: only that turn is retried, the payment is not run again",
    on: "answer",
    fault: true,
    anthropic: { kind: "reset", at: { beforeMessageStop: true } },
    openai: { kind: "reset", at: { beforeCompleted: true } },
    paid: 1,
    firstOnly: true,
    position: "before_any_call",
    chat: { fault: { kind: "reset", at: { beforeCompleted: true } }, position: "before_any_call" },
  },
  {
    name: "STREAM-3 a reset while the arguments stream, every attempt",
    fault: true,
    anthropic: { kind: "reset", at: { toolUse: 0, afterFragment: 2 } },
    openai: { kind: "reset", at: { call: 0, afterFragment: 2 } },
    paid: 0,
    firstOnly: false,
    position: "arguments_streaming",
    chat: { fault: { kind: "reset", at: { call: 0, afterFragment: 2 } }, position: "arguments_streaming" },
  },
  {
    name: "RECORD-2 a reset after the payment ran, every attempt",
    cutAfterDispatch: "reset",
    paid: 1,
    firstOnly: false,
    attempts: 2,
    position: "after_dispatch_before_stop",
    chat: { cutAfterPayment: "reset", position: CHAT_AFTER_PAYMENT },
  },
  {
    name: "STREAM-12 an error the provider sends in the stream while the payment runs",
    fault: true,
    anthropic: { kind: "error_event", at: { afterToolUseStop: 0 } },
    openai: { kind: "error_event", at: { afterCallDone: 0 } },
    paid: 1,
    firstOnly: true,
    position: "during_dispatch",
    // A chunk carrying `error` (the SDK throws it as an APIError).
    chat: { fault: { kind: "error_event", at: { afterCallDone: 0 } }, position: "during_dispatch" },
  },
  {
    name: "STREAM-12 an error the provider sends in the stream while the arguments stream, every attempt",
    fault: true,
    anthropic: { kind: "error_event", at: { toolUse: 0, afterFragment: 2 } },
    openai: { kind: "error_event", at: { call: 0, afterFragment: 2 } },
    paid: 0,
    firstOnly: false,
    position: "arguments_streaming",
    chat: { fault: { kind: "error_event", at: { call: 0, afterFragment: 2 } }, position: "arguments_streaming" },
  },
  {
    name: "STREAM-2 a 503 before the stream, every attempt",
    fault: true,
    anthropic: { kind: "status", status: 503 },
    openai: { kind: "status", status: 503 },
    paid: 0,
    firstOnly: false,
    position: "before_any_call",
    chat: { fault: { kind: "status", status: 503 }, position: "before_any_call" },
  },
  {
    name: "TURN-4 two identical payments, a reset while the second's arguments stream",
    ask: "pay acme twice",
    fault: true,
    anthropic: { kind: "reset", at: { toolUse: 1, afterFragment: 1 } },
    openai: { kind: "reset", at: { call: 1, afterFragment: 1 } },
    paid: 2,
    firstOnly: true,
    // The first payment is final (the second call began) and runs; the second is cut.
    position: "during_dispatch",
    chat: { fault: { kind: "reset", at: { call: 1, afterFragment: 1 } }, position: "during_dispatch" },
  },
  {
    // The payments API performed it; its answer was lost on the way back: the claim is released
    // (a keyed write, LEDGER-8), the retried attempt runs it again under the same key, and the
    // API's stored answer settles it.
    name: "LEDGER-8 the payment's answer is lost once: the retried attempt's same key gets the API's stored answer",
    noCut: true,
    answerLost: 1,
    paid: 1,
    firstOnly: true,
    position: "call_unresolved",
    chat: { noCut: true, position: "call_unresolved" },
  },
  {
    name: "RECORD-2 the payment's answer is lost in every attempt: the turn fails, the user is told it may have happened",
    noCut: true,
    answerLost: 2,
    paid: 1,
    firstOnly: false,
    attempts: 2,
    position: "call_unresolved",
    chat: { noCut: true, position: "call_unresolved" },
  },
];

/**
 * Why the last stream died, in provider-neutral words: the runner's `stream_incomplete` (its
 * message names each provider's own finish event), an HTTP status (the error is the SDK's own: the
 * Anthropic SDK names a 503 ServiceUnavailableError, the openai SDK's is an Error carrying the
 * API's code; both messages open with the status), or a transport error (undici's "terminated").
 */
function why(error: StoredError): string {
  if (error.code === "stream_incomplete") return "stream_incomplete";
  const status = /^(\d{3}) /.exec(error.message)?.[1];
  return status !== undefined ? `status ${status}` : `${error.name}: ${error.message}`;
}

/** What a user can observe of one send, in provider-neutral terms, over the calls of `tool`. */
async function observe(
  send: () => Promise<SendResult>,
  events: RunnerEvent[],
  effects: () => unknown[],
  committed: { store: ConversationStore; conversationId: string; responses: () => { complete: boolean; callIds: string[] }[] },
  tool = "send_payment",
) {
  const outcome = await send().then(
    (result) => ({
      answered: true as const,
      turns: result.turns.map((t) => ({
        attempts: t.attempts,
        calls: t.calls.filter((c) => c.name === tool).map((c) => ({ name: c.name, replayed: c.replayed, ordinal: c.ordinal, paid: c.result !== undefined })),
      })),
    }),
    (error: unknown) => {
      if (!(error instanceof TurnFailedError)) throw error;
      const { record } = error;
      return {
        answered: false as const,
        record: {
          position: record.position,
          attempts: record.attempts,
          retryable: record.retryable,
          error: why(record.error),
          calls: record.calls.filter((c) => c.name === tool).map((c) => ({ attempt: c.attempt, status: c.status, effect: c.effect, replayed: c.replayed, summary: c.summary })),
          // What the user is told: per key, happened / may_have_happened / not_happened, and which
          // payment (the request that ran under the key: the first attempt's memo, IDENT-3).
          effects: record.effects.map((e) => ({ name: e.name, effect: e.effect, input: e.input })),
        },
      };
    },
  );
  const log = JSON.stringify(await committed.store.log(committed.conversationId));
  return {
    payments: effects().length,
    outcome,
    failures: events.filter((e) => e.type === "stream_failed").map((e) => ({ attempt: e.attempt, position: (e as { position: string }).position })),
    abandoned: events.filter((e) => e.type === "call_abandoned" && e.name === tool).length,
    discarded: events.filter((e) => e.type === "attempt_discarded").map((e) => (e as { reason: string }).reason),
    // The mock's responses that carried calls, in order: whether each finished, and whether its
    // calls are in the committed log (nothing the stream did not establish is committed).
    responses: committed.responses().map((r) => ({ complete: r.complete, committed: r.callIds.some((id) => log.includes(id)) })),
  };
}

/** The chat side's plans: the payment, then a read (see ChatCut), so the payment is never the response's last call. */
function startChatProvider(): Promise<MockOpenAI> {
  return startMockOpenAI({
    seed: "openai-chat-parity",
    script: scriptFromPlans(
      {
        "pay acme": respond(call("send_payment", PAY_ACME, { reword: ["memo"] }), call("get_balance", { currency: "EUR" })),
        "pay acme twice": respond(call("send_payment", PAY_ACME), call("send_payment", PAY_ACME)),
        "pay acme alone": respond(call("send_payment", PAY_ACME, { reword: ["memo"] })),
      },
      { after: "Payment sent." },
    ),
  });
}

/** ChatCompletionsRunner over the chat mock, a guarded Dispatcher and the payments API (plus the read). */
async function setupChat(mock: MockOpenAI, options: { latencyMs: number; runner: { retry: object; onEvent: (e: RunnerEvent) => void } }) {
  const downstream = await payments(options.latencyMs);
  const tools = new ToolRegistry([
    ...downstream.tools.list(),
    defineTool({
      name: "get_balance",
      description: "The account's balance in a currency",
      effect: "read",
      input: z.object({ currency: z.string().length(3) }),
      run: async () => ({ balance: 1_000_000 }),
    }),
  ]);
  const store = new MemoryConversationStore();
  const runner = new ChatCompletionsRunner({
    client: sdk(mock),
    dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger(), waitMs: 10_000, pollMs: 5 }),
    store,
    model: "gpt-test",
    tools: tools.providerSchemas(),
    ...options.runner,
  });
  return { ...downstream, store, runner };
}

/**
 * The chat side's cut after the payment: held at `finish_reason` (the read's arguments whole but
 * not final), cut with `kind` once the payment calls of the held response resolved. Failures are
 * collected for the test to throw.
 */
function cutChatAfterPayment(mock: MockOpenAI, log: RunnerEventLog, kind: "reset" | "clean_close", failures: string[]) {
  return (info: RequestInfo): OpenAIFault => {
    void (async () => {
      try {
        await mock.waitForHold(info.requestNumber, { timeoutMs: 20_000 });
        const paying = mock.requests.find((r) => r.requestNumber === info.requestNumber)!.calls.filter((c) => c.name === "send_payment");
        if (paying.length === 0) throw new Error("the held response has no payment call");
        await log.waitForResolved(paying.map((c) => c.callId));
      } catch (error) {
        failures.push(`request ${info.requestNumber}: ${String(error)}`);
      }
      try {
        mock.cutNow(info.requestNumber, kind);
      } catch (error) {
        failures.push(`request ${info.requestNumber}: ${String(error)}`);
      }
    })();
    return { kind: "hold", at: { beforeCompleted: true } };
  };
}

let anthropicMock: MockProvider | undefined;
let openaiMock: MockOpenAI | undefined;
let chatMock: MockOpenAI | undefined;
const chatServers: { close(): Promise<void> }[] = [];
afterEach(async () => {
  await anthropicMock?.close();
  await openaiMock?.close();
  await chatMock?.close();
  anthropicMock = openaiMock = chatMock = undefined;
  await Promise.all(chatServers.splice(0).map((s) => s.close()));
  await closeAnthropicDownstreams();
  await closeDownstreams();
  checkAnthropicCutGates();
  checkCutGates();
});

describe("parity: the Anthropic, OpenAI Responses and Chat Completions stream sides behave the same under the shared runner (STREAM-14)", () => {
  for (const scenario of SCENARIOS) {
    it(scenario.name, async () => {
      const retry = { backoffMs: () => 1, ...(scenario.attempts !== undefined ? { attempts: scenario.attempts } : {}) };
      const ask = { id: "m1", content: scenario.ask ?? "pay acme" };

      anthropicMock = await providerWithPlans();
      const anthropicLog = new AnthropicEventLog();
      const anthropicGate = "cutAfterDispatch" in scenario ? cutAnthropicAfterDispatch(anthropicMock, anthropicLog, scenario.cutAfterDispatch) : undefined;
      anthropicMock.setFaultPlan((request, info) => {
        // The payment request ends with the user's text, not with tool results.
        const payment = typeof request.messages.at(-1)?.content === "string";
        if (payment === (scenario.on === "answer") || (scenario.firstOnly && info.attempt !== 1)) return undefined;
        if ("noCut" in scenario) return undefined;
        return "fault" in scenario ? scenario.anthropic : anthropicGate!.hold(info);
      });
      const a = await setupAnthropic(anthropicMock, { guarded: true, latencyMs: 100, runner: { retry, onEvent: anthropicLog.onEvent } });
      if (scenario.answerLost !== undefined) a.server.injectFault({ outcome: "drop_after_accept" }, { times: scenario.answerLost });
      const am = anthropicMock;
      const anthropic = await observe(() => a.runner.send("conv-parity", ask), anthropicLog.events, a.effects, {
        store: a.store,
        conversationId: "conv-parity",
        responses: () => am.requests.filter((r) => r.toolUses.length > 0).map((r) => ({ complete: r.outcome === "complete", callIds: r.toolUses.map((t) => t.id) })),
      });

      openaiMock = await startProvider();
      const openaiLog = new RunnerEventLog();
      const openaiGate = "cutAfterDispatch" in scenario ? cutAfterDispatch(openaiMock, openaiLog, scenario.cutAfterDispatch) : undefined;
      openaiMock.setFaultPlan((request, info) => {
        if (isPaymentRequest(request) === (scenario.on === "answer") || (scenario.firstOnly && info.attempt !== 1)) return undefined;
        if ("noCut" in scenario) return undefined;
        return "fault" in scenario ? scenario.openai : openaiGate!.hold(info);
      });
      const o = await setupOpenAI(openaiMock, { guarded: true, latencyMs: 100, runner: { retry, onEvent: openaiLog.onEvent } });
      if (scenario.answerLost !== undefined) o.server.injectFault({ outcome: "drop_after_accept" }, { times: scenario.answerLost });
      const om = openaiMock;
      const responsesOf = (mock: MockOpenAI) => () =>
        mock.requests.filter((r) => r.calls.length > 0).map((r) => ({ complete: r.outcome === "complete", callIds: r.calls.map((c) => c.callId) }));
      const openai = await observe(() => o.runner.send("conv-parity", ask), openaiLog.events, o.effects, {
        store: o.store,
        conversationId: "conv-parity",
        responses: responsesOf(om),
      });

      chatMock = await startChatProvider();
      const chatLog = new RunnerEventLog();
      const gateFailures: string[] = [];
      const chatCut = scenario.chat;
      const chatGate = "cutAfterPayment" in chatCut ? cutChatAfterPayment(chatMock, chatLog, chatCut.cutAfterPayment, gateFailures) : undefined;
      chatMock.setFaultPlan((request, info) => {
        if (isPaymentRequest(request) === (scenario.on === "answer") || (scenario.firstOnly && info.attempt !== 1)) return undefined;
        if ("noCut" in chatCut) return undefined;
        return "fault" in chatCut ? chatCut.fault : chatGate!(info);
      });
      const c = await setupChat(chatMock, { latencyMs: 100, runner: { retry, onEvent: chatLog.onEvent } });
      chatServers.push(c.server);
      if (scenario.answerLost !== undefined) c.server.injectFault({ outcome: "drop_after_accept" }, { times: scenario.answerLost });
      const chat = await observe(() => c.runner.send("conv-parity", ask), chatLog.events, c.effects, {
        store: c.store,
        conversationId: "conv-parity",
        responses: responsesOf(chatMock),
      });
      if (gateFailures.length > 0) throw new Error(`the chat side's cut gate did not see the payment resolve: ${gateFailures.join("; ")}`);

      expect(openai, "the Responses side against the Anthropic side").toEqual(anthropic);
      // The chat side: the same, but for the positions its structure moves (ChatCut).
      const chatPositionsAsOthers = <T>(o: T): T => JSON.parse(JSON.stringify(o).replaceAll(`"position":"${scenario.chat.position}"`, `"position":"${scenario.position}"`));
      expect(chatPositionsAsOthers(chat), "the Chat Completions side against the Anthropic side (positions mapped per ChatCut)").toEqual(anthropic);
      for (const failure of chat.failures) expect(failure.position).toBe(scenario.chat.position);
      if (!chat.outcome.answered) expect(chat.outcome.record.position).toBe(scenario.chat.position);
      // The read after the payment, still open at every cut: abandoned once per failed attempt, never run.
      if ("cutAfterPayment" in chatCut) {
        expect(chatLog.events.filter((e) => e.type === "call_abandoned").map((e) => (e as { name: string }).name)).toEqual(chat.failures.map(() => "get_balance"));
      }

      if (!("noCut" in scenario)) expect(anthropic.failures[0]).toMatchObject({ attempt: 1 });
      for (const failure of anthropic.failures) expect(failure.position).toBe(scenario.position);
      // And all are what the rules say, not merely equal to each other.
      expect(anthropic.payments).toBe(scenario.paid);
      // Only a finished response is committed (RECORD-3), and an answered turn commits one: the last.
      expect(anthropic.responses.filter((r) => r.committed && !r.complete)).toEqual([]);
      if (anthropic.outcome.answered) expect(anthropic.responses.map((r) => r.committed)).toEqual(anthropic.responses.map((_, i, all) => i === all.length - 1));
      else expect(anthropic.responses.filter((r) => r.committed)).toEqual([]);
      if (scenario.firstOnly) expect(anthropic.outcome).toMatchObject({ answered: true, turns: scenario.on === "answer" ? [{ attempts: 1 }, { attempts: 2 }] : [{ attempts: 2 }, { attempts: 1 }] });
      else {
        const told = scenario.paid === 0 ? [] : [{ name: "send_payment", effect: scenario.answerLost !== undefined ? "may_have_happened" : "happened", input: PAY_ACME }];
        expect(anthropic.outcome).toMatchObject({ answered: false, record: { position: scenario.position, effects: told } });
      }
    });
  }
});

describe("parity: why the chat side needs a call after the payment (STREAM-20)", () => {
  // The other sides' cut "after the payment ran, before the finish event" and "while the payment
  // runs", placed on a chat response whose payment is its only call: the first falls before the
  // payment is dispatched, the second after the response finished. Both are told the truth.
  const lone = async (fault: OpenAIFault) => {
    chatMock = await startChatProvider();
    chatMock.setFaultPlan((request, info) => (isPaymentRequest(request) && info.attempt === 1 ? fault : undefined));
    const log = new RunnerEventLog();
    const c = await setupChat(chatMock, { latencyMs: 100, runner: { retry: { backoffMs: () => 1 }, onEvent: log.onEvent } });
    chatServers.push(c.server);
    const result = await c.runner.send("conv-parity-lone", { id: "m1", content: "pay acme alone" });
    const of = (type: RunnerEvent["type"]) => log.events.filter((e) => e.type === type) as (RunnerEvent & { attempt: number; position?: string; replayed?: boolean })[];
    return { result, effects: c.effects(), of };
  };

  it("STREAM-20 a cut where finish_reason goes finds the lone payment still open: not run in that attempt, paid once by the retry", async () => {
    const { result, effects, of } = await lone({ kind: "reset", at: { beforeCompleted: true } });
    expect(of("stream_failed").map((e) => [e.attempt, e.position])).toEqual([[1, "arguments_streaming"]]);
    expect(of("call_abandoned").map((e) => e.attempt)).toEqual([1]);
    // Resolved in attempt 2 only, not a replay: attempt 1 never ran it.
    expect(of("call_resolved").map((e) => [e.attempt, e.replayed])).toEqual([[2, false]]);
    expect(effects).toHaveLength(1);
    expect(result.turns.map((t) => t.attempts)).toEqual([2, 1]);
  });

  it("STREAM-1 a cut right after the chunk that makes the lone payment final is after finish_reason: the turn stands, one attempt", async () => {
    const { result, effects, of } = await lone({ kind: "reset", at: { afterCallDone: 0 } });
    expect(of("stream_failed")).toEqual([]);
    expect(effects).toHaveLength(1);
    expect(result.turns.map((t) => [t.attempts, t.calls.length])).toEqual([
      [1, 1],
      [1, 0],
    ]);
  });
});
