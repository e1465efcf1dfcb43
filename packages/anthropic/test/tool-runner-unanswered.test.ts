import Anthropic from "@anthropic-ai/sdk";
import { Dispatcher, MemoryLedger, defineTool, type Ledger } from "@dispatch-once/core";
import { markRecordTool } from "@dispatch-once/core/internal";
import { say, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import type { AssistantTurn } from "@dispatch-once/mock-provider";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceToolRunner, rerunMessagesOf, type OnceToolRunner } from "../src/index.js";
import { PAY_ACME } from "./fixtures.js";
import { paymentsApp } from "./tool-runner-fixtures.js";

/*
 * ATR-12: the app re-runs a failed loop for the same user message (ATR-1), as the README's example
 * does, from the user's message. The payment an earlier runner made is in that runner's messages
 * only; when the re-run's model does not make the call again (it asks a question instead), the
 * kept answer holds no trace of it. `once.unansweredCallsOf(runner)` lists the turn's ledger rows
 * that neither the runner's calls nor its messages answer, with what each says of its effect.
 */

type Message = Anthropic.Beta.Messages.BetaMessageParam;
let provider: MockProvider | undefined;
afterEach(async () => {
  await provider?.close();
  provider = undefined;
});

/** A provider whose n-th request (from 1) is answered by `answers[n - 1]`; a tool result is answered "Done.". */
async function scripted(answers: AssistantTurn[], cut: readonly number[]) {
  let n = 0;
  provider = await startMockProvider({
    script: (request) => {
      const last = request.messages.at(-1);
      n++;
      if (last !== undefined && typeof last.content !== "string" && last.content.some((b) => b.type === "tool_result")) return turn(say("Done."));
      const answer = answers.shift();
      if (answer === undefined) throw new Error(`no answer scripted for request ${n}`);
      return answer;
    },
    faultPlan: (_request, info) => (cut.includes(info.requestNumber) ? { kind: "reset", at: { event: 2 } } : undefined),
  });
  return provider;
}

async function app(p: MockProvider, ledger: Ledger = new MemoryLedger()) {
  const payments = await paymentsApp(p, { latencyMs: 0 });
  const once = createOnceToolRunner({ tools: [payments.sendPayment], effects: { send_payment: "keyed_write" }, ledger, dispatcher: { waitMs: 5_000, pollMs: 5 } });
  return { ...payments, once };
}

/** The README's loop: every failed run is run again with `start(failed messages)`. */
async function answer(once: OnceToolRunner, client: Anthropic, start: (failed: Message[] | undefined) => Message[], turnIndex?: number) {
  let failed: Message[] | undefined;
  for (let attempt = 0; attempt < 3; attempt++) {
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, stream: true, thread: false, messages: start(failed) } as never, { conversationId: "conv-u", ...(turnIndex !== undefined ? { turnIndex } : {}) });
    try {
      await runner.runUntilDone();
      return { runner }; // boxed: the runner is a thenable, which an async function's return would unwrap
    } catch {
      failed = runner.params.messages;
    }
  }
  throw new Error("the loop never finished");
}
const fromUser = () => [{ role: "user" as const, content: "pay acme" }];

describe("ATR-12: the turn's effects that the re-run's answer does not answer", () => {
  it("a cut after the payment, the re-run from the user's message asks a question instead: the payment is listed as happened", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(say("Which account should I pay from?"))], [2]);
    const { once, client, effects } = await app(p);
    const { runner } = await answer(once, client, fromUser);
    expect(once.callsOf(runner).size).toBe(0);
    expect(effects()).toHaveLength(1);
    const found = await once.unansweredCallsOf(runner);
    expect(found.listed).toBe(true);
    expect(found.calls).toEqual([expect.objectContaining({ name: "send_payment", state: "completed", effect: "happened", result: expect.stringContaining(effects()[0]!.resourceId!) })]);
  });

  it("a listed call carries the arguments its claim stored (`input`): the app can tell the user which payment it was, not only that a send_payment happened", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(say("Which account should I pay from?"))], [2]);
    const { once, client, effects } = await app(p);
    const { runner } = await answer(once, client, fromUser);
    expect(effects()).toHaveLength(1);
    const found = await once.unansweredCallsOf(runner);
    expect(found.calls).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened", input: PAY_ACME })]);
  });

  it("control: the re-run's model pays again and is answered from the ledger: nothing is unanswered", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(toolUse("send_payment", PAY_ACME))], [2]);
    const { once, client, effects } = await app(p);
    const { runner } = await answer(once, client, fromUser);
    expect(effects()).toHaveLength(1);
    expect([...once.callsOf(runner).values()][0]!.outcome!.replayed).toBe(true);
    expect(await once.unansweredCallsOf(runner)).toEqual({ listed: true, calls: [] });
  });

  it("the re-run from rerunMessagesOf(runner) carries the call and its result: answered there, not listed", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME))], [2]);
    const { once, client, effects } = await app(p);
    const { runner } = await answer(once, client, (failed) => (failed === undefined ? fromUser() : rerunMessagesOf(failed)));
    expect(effects()).toHaveLength(1);
    expect(once.callsOf(runner).size).toBe(0);
    expect(await once.unansweredCallsOf(runner)).toEqual({ listed: true, calls: [] });
  });

  it("a call the messages show with an error result, whose row completed, is listed as happened (the messages are not the ledger)", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(say("Sorry, that failed."))], []);
    const { once, client, effects } = await app(p);
    const { runner: first } = await answer(once, client, fromUser);
    expect(effects()).toHaveLength(1);
    // The app's own history says the payment failed (an error result kept in place of the one the runner had).
    const told = first.params.messages.map((m) =>
      m.role === "user" && typeof m.content !== "string" ? { ...m, content: m.content.map((b) => (b.type === "tool_result" ? { ...b, content: "outcome_unknown", is_error: true } : b)) } : m,
    ) as Message[];
    const { runner: rerun } = await answer(once, client, () => told.slice(0, -1));
    const found = await once.unansweredCallsOf(rerun);
    expect(found.calls.map((c) => [c.name, c.state, c.effect])).toEqual([["send_payment", "completed", "happened"]]);
  });

  it("the runner's own call that failed (accepted, then a 500: its claim released) is answered by its error, which the model and callsOf carry: not listed", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME))], []);
    const { once, client, server } = await app(p);
    server.injectFault({ outcome: "crash_after_accept" }, { times: 1 });
    const { runner } = await answer(once, client, fromUser);
    const [call] = [...once.callsOf(runner).values()];
    expect(call!.error?.cause).toMatchObject({ code: "claim_released" });
    expect(await once.unansweredCallsOf(runner)).toEqual({ listed: true, calls: [] });
  });

  it("only the runner's turn: the next user message's loop does not list the payment of the turn before", async () => {
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(say("You're welcome."))], []);
    const { once, client, effects } = await app(p);
    const { runner: first } = await answer(once, client, fromUser);
    expect(effects()).toHaveLength(1);
    const { runner: next } = await answer(once, client, () => [...first.params.messages, { role: "user", content: "thanks" }]);
    expect(await once.unansweredCallsOf(next)).toEqual({ listed: true, calls: [] });
  });

  it("with turnIndex from the app's store, an identical call of an earlier turn in the history does not tell this turn's payment", async () => {
    // Turn 1 paid acme and told it; turn 2 asks for the same payment, pays, is cut, and its re-run asks a question.
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(toolUse("send_payment", PAY_ACME)), turn(say("Which account should I pay from?"))], [4]);
    const { once, client, effects } = await app(p);
    const { runner: first } = await answer(once, client, fromUser, 1);
    expect(effects()).toHaveLength(1);
    const history = [...first.params.messages, { role: "user" as const, content: "pay acme again" }];
    const { runner } = await answer(once, client, () => history, 2);
    expect(effects()).toHaveLength(2);
    const found = await once.unansweredCallsOf(runner);
    expect(found.calls.map((c) => [c.name, c.effect])).toEqual([["send_payment", "happened"]]);
  });

  it("a ledger that does not list rows: listed false with the reason", async () => {
    const p = await scripted([turn(say("Which payee?"))], []);
    const memory = new MemoryLedger();
    const ledger = new Proxy(memory, {
      get(target, name, receiver) {
        if (name === "capabilities") return { ...target.capabilities, supports: { ...target.capabilities.supports, listRows: false } };
        const value = Reflect.get(target, name, receiver) as unknown;
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const { once, client } = await app(p, ledger);
    const { runner } = await answer(once, client, fromUser);
    expect(await once.unansweredCallsOf(runner)).toEqual({ listed: false, calls: [], reason: expect.stringMatching(/listRows/) });
  });

  it("a runner this wrapper did not build is refused with invalid_argument", async () => {
    const p = await scripted([], []);
    const { once } = await app(p);
    await expect(once.unansweredCallsOf({})).rejects.toMatchObject({ code: "invalid_argument" });
  });
});

describe("EFFECT-8 with ATR-12: a bookkeeping row is no effect of the turn", () => {
  it("EFFECT-8: the app shares its ledger and conversation id with the AI SDK wrapper, whose dispatch-once-turn row is at the turn's index; the cut payment is listed, the bookkeeping row never", async () => {
    const ledger = new MemoryLedger();
    // The AI SDK wrapper's record of a turn's user message (AISDK-17), claimed as it claims it.
    const record = defineTool(markRecordTool({ name: "dispatch-once-turn", effect: "keyed_write", input: z.object({}), run: async () => ({ messageId: "m-ai" }) }));
    await new Dispatcher({ ledger, tools: [record] }).dispatch({ name: "dispatch-once-turn", input: {} }, { conversationId: "conv-u", turnIndex: 5, ordinal: 0 });
    const p = await scripted([turn(toolUse("send_payment", PAY_ACME)), turn(say("Which account should I pay from?"))], [2]);
    const { once, client, effects } = await app(p, ledger);
    const { runner } = await answer(once, client, fromUser, 5);
    // The effect log and the ledger read directly: one payment; its row and the bookkeeping row at turn 5.
    expect(effects()).toHaveLength(1);
    expect((await ledger.listRows({ conversationId: "conv-u" })).rows.map((r) => [r.toolName, r.turnIndex]).sort()).toEqual([["dispatch-once-turn", 5], ["send_payment", 5]]);
    // What is reported: the payment alone.
    const found = await once.unansweredCallsOf(runner);
    expect(found.calls.map((c) => [c.name, c.effect])).toEqual([["send_payment", "happened"]]);
  });
});
