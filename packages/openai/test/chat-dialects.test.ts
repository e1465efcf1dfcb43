import { Dispatcher, MemoryConversationStore, MemoryLedger } from "@dispatch-once/core";
import { CHAT_DIALECTS, call, respond, scriptFromPlans, startMockOpenAI, text, type ChatDialect, type MockOpenAI } from "@dispatch-once/mock-openai";
import { afterEach, describe, expect, it } from "vitest";
import { ChatCompletionsRunner, type RunnerEvent } from "../src/index.js";
import { PAY_ACME, PAY_BOB, closeDownstreams, payments, sdk } from "./fixtures.js";

// ChatCompletionsRunner end to end against every Chat Completions dialect apps/mock-openai speaks
// (Azure, Gemini, vLLM, DeepSeek, SGLang, Mistral and OpenAI's own), through the real SDK: the
// payment request's first attempt is held once acme's call is final and cut (a reset) only after
// acme was paid; the retry's response makes both calls again; the follow-up must be one the
// dialect's server takes (DeepSeek's reasoning_content and Gemini's thought signature sent back).
// Judged by the payments API's effect log and by what the store committed.

let mock: MockOpenAI | undefined;
afterEach(async () => {
  await mock?.close();
  mock = undefined;
  await closeDownstreams();
});

type Obj = Record<string, unknown>;

/** A first attempt's fault: `hold` is held inside bob's arguments and cut (a reset) once acme was paid. */
type FirstFault = "hold" | { kind: "clean_close" | "error_event" | "reset"; at: { beforeCompleted: true } | { afterCallDone: number } };

async function runDialect(dialect: ChatDialect, first: FirstFault = "hold") {
  mock = await startMockOpenAI({
    seed: `runner-${dialect}`,
    chatDialect: dialect,
    script: scriptFromPlans({ "pay acme and bob": respond(text("Two payments."), call("send_payment", PAY_ACME, { reword: ["memo"] }), call("send_payment", PAY_BOB)) }, { after: "Both paid." }),
  });
  const m = mock;
  const downstream = await payments(5);
  const store = new MemoryConversationStore();
  const events: RunnerEvent[] = [];
  // The payment request's first attempt pauses inside bob's arguments (acme final, dispatched).
  m.setFaultPlan((request, info) => (info.attempt === 1 && (request.input as Obj[]).at(-1)?.role === "user" ? (first === "hold" ? { kind: "hold", at: { call: 1, afterFragment: 1 } } : first) : undefined));
  const runner = new ChatCompletionsRunner({
    client: sdk(m),
    dispatcher: new Dispatcher({ tools: downstream.tools, ledger: new MemoryLedger(), waitMs: 10_000, pollMs: 5 }),
    store,
    model: "gpt-test",
    tools: downstream.tools.providerSchemas(),
    retry: { backoffMs: () => 1 },
    onEvent: (e) => {
      events.push(e);
      // Cut after the payment: once acme's call resolved (it was paid), the held stream is reset.
      if (e.type === "call_resolved" && e.attempt === 1 && m.held.length > 0) m.cutNow(m.held[0]!.requestNumber, "reset");
    },
  });
  const result = await runner.send(`conv-${dialect}`, { id: "m1", content: "pay acme and bob" });
  const log = (await store.log(`conv-${dialect}`)).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Obj[];
  return { result, log, effects: downstream.effects(), events, requests: m.requests.filter((r) => r.api === "chat.completions") };
}

describe("ChatCompletionsRunner against each Chat Completions dialect: a cut after the payment, retried", () => {
  for (const dialect of CHAT_DIALECTS) {
    it(`STREAM-20 ${dialect}: acme and bob paid once each, the retry's calls committed with their results, the follow-up taken`, async () => {
      const { result, log, effects, events, requests } = await runDialect(dialect);
      // The cut fired after acme was paid, and the first attempt never reached bob.
      expect(requests.map((r) => [r.attempt, r.outcome])).toEqual([
        [1, "reset"],
        [2, "complete"],
        [1, "complete"],
      ]);
      expect(events.filter((e) => e.type === "stream_failed")).toHaveLength(1);
      // The oracle: one payment each.
      expect(effects).toHaveLength(2);
      expect(new Set(effects.map((e) => e.idempotencyKey)).size).toBe(2);
      const calls = result.turns[0]!.calls;
      expect(calls.map((c) => [c.name, c.replayed])).toEqual([
        ["send_payment", true],
        ["send_payment", false],
      ]);
      expect(new Set(effects.map((e) => e.idempotencyKey))).toEqual(new Set(calls.map((c) => c.key)));
      // Committed: the retry's assistant message (its call ids), each call's result, the answer.
      const assistant = log.find((m) => m.role === "assistant" && m.tool_calls !== undefined)!;
      const ids = (assistant.tool_calls as Obj[]).map((c) => c.id);
      expect(ids).toEqual(requests[1]!.calls.map((c) => c.callId));
      const results = log.filter((m) => m.role === "tool");
      expect(results.map((m) => m.tool_call_id)).toEqual(ids);
      expect(results.map((m) => JSON.parse(m.content as string).paymentId).sort()).toEqual(effects.map((e) => e.paymentId).sort());
      expect(result.turns.at(-1)!.text).toBe("Both paid.");
      expect(log.at(-1)).toMatchObject({ role: "assistant", content: "Both paid." });
      // What the dialect's server needs sent back, committed with the calls.
      if (dialect === "deepseek") expect(assistant.reasoning_content).toEqual(expect.any(String));
      if (dialect === "gemini") expect((assistant.tool_calls as Obj[])[0]!.extra_content).toEqual({ google: { thought_signature: expect.stringMatching(/^sig_/) } });
    });
  }
});

describe("ChatCompletionsRunner against each Chat Completions dialect: other cuts of the first attempt", () => {
  const faults: Exclude<FirstFault, "hold">[] = [
    { kind: "clean_close", at: { beforeCompleted: true } },
    { kind: "error_event", at: { afterCallDone: 0 } },
    { kind: "reset", at: { afterCallDone: 1 } },
  ];
  for (const dialect of CHAT_DIALECTS) {
    it(`STREAM-20 STREAM-1 ${dialect}: a clean close before the finish, an error chunk after call 0 (each retried), a reset after the finish (committed as the finish left it): each paid once, the calls of the response that finished committed`, async () => {
      for (const fault of faults) {
        const { result, log, effects, requests } = await runDialect(dialect, fault);
        const label = `${dialect} ${JSON.stringify(fault)}`;
        // After the finish (afterCallDone 1: the last call is final at finish_reason) the turn stands: no retry.
        const afterFinish = "afterCallDone" in fault.at && fault.at.afterCallDone === 1;
        expect(requests.map((r) => r.outcome), label).toEqual(afterFinish ? [fault.kind, "complete"] : [fault.kind, "complete", "complete"]);
        const finished = afterFinish ? requests[0]! : requests[1]!;
        expect(effects, label).toHaveLength(2);
        expect(new Set(effects.map((e) => e.idempotencyKey)), label).toEqual(new Set(result.turns[0]!.calls.map((c) => c.key)));
        const assistant = log.find((m) => m.role === "assistant" && m.tool_calls !== undefined)!;
        expect((assistant.tool_calls as Obj[]).map((c) => c.id), label).toEqual(finished.calls.map((c) => c.callId));
        expect(log.filter((m) => m.role === "tool").map((m) => JSON.parse(m.content as string).paymentId).sort(), label).toEqual(effects.map((e) => e.paymentId).sort());
        expect(log.at(-1), label).toMatchObject({ role: "assistant", content: "Both paid." });
        await mock?.close();
        mock = undefined;
        await closeDownstreams();
      }
    });
  }
});
