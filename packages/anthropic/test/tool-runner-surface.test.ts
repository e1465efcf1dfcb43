import type Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { InvalidArgumentError, MemoryLedger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceToolRunner, isGenuineUserMessage, toolRunnerTurnIndexOf, type OnceToolRunner } from "../src/index.js";
import { scriptFromPlans, startMockProvider } from "@dispatch-once/mock-provider";
import { PLANS, cutRequests, paymentsApp, providerPerTest, toolResultsOf } from "./tool-runner-fixtures.js";

/**
 * The rest of the SDK runner's surface (§13.3, ATR-8 …): the ways an adopter of
 * `client.beta.messages.toolRunner` can reach a tool run besides the loop the wrapper builds.
 * Each case is an attack: the loop is cut and re-run as an app does, and the payments API's
 * effect log counts the payments.
 */
const provider = providerPerTest();

type Message = Anthropic.Beta.Messages.BetaMessageParam;
type Runner = ReturnType<OnceToolRunner["toolRunner"]>;
const IDENTITY = { send_payment: ["payee", "amount", "currency", "reference"] };

async function app() {
  const payments = await paymentsApp(provider());
  const once = createOnceToolRunner({
    tools: [payments.sendPayment, payments.getBalance],
    effects: { send_payment: "keyed_write", get_balance: "read" },
    ledger: new MemoryLedger(),
    identity: IDENTITY,
    dispatcher: { waitMs: 5_000, pollMs: 5 },
  });
  return { ...payments, once };
}

/**
 * The app's retry: each attempt builds a new runner for the same user message, `body` is the
 * app's loop body (run for every item the runner yields), a failed attempt is re-run.
 */
async function retryLoop(
  once: OnceToolRunner,
  client: Anthropic,
  text: string,
  body: (runner: Runner, item: unknown) => unknown,
  options: { stream?: boolean; thread?: false; attempts?: number; setup?: (runner: Runner) => void } = {},
) {
  const errors: unknown[] = [];
  for (let attempt = 0; attempt < (options.attempts ?? 3); attempt++) {
    const runner = once.toolRunner(
      client,
      { model: "claude-test", max_tokens: 1024, stream: options.stream ?? true, ...(options.thread === false ? { thread: false as const } : {}), messages: [{ role: "user", content: text }] as Message[] },
      { conversationId: "conv-surface" },
    );
    try {
      options.setup?.(runner);
      for await (const item of runner as AsyncIterable<unknown>) await body(runner, item);
      await runner.done();
      return { runner, errors };
    } catch (error) {
      errors.push(error);
    }
  }
  throw new Error(`the loop never finished: ${errors.map(String).join("; ")}`);
}

const refusal = (build: () => unknown): InvalidArgumentError => {
  try {
    build();
  } catch (error) {
    return error as InvalidArgumentError;
  }
  throw new Error("not refused");
};

describe("ATR-8 the runner's other ways to a tool run go through the dispatcher", () => {
  it("ATR-8 addTools(the app's own unwrapped tool) in the loop body: the call runs through the dispatcher under the loop's keys; a cut and re-run pays once", async () => {
    const { once, client, effects, sendPayment } = await app();
    cutRequests(provider(), [2]);
    const { errors } = await retryLoop(once, client, "pay acme", (runner) => runner.addTools(sendPayment), { thread: false });
    expect(errors.map(String)).toEqual([expect.stringMatching(/terminated/)]);
    expect(effects()).toHaveLength(1);
  });

  it("ATR-8 setMessagesParams with the app's own unwrapped tool in tools: the call runs through the dispatcher; a cut and re-run pays once", async () => {
    const { once, client, effects, sendPayment, getBalance } = await app();
    cutRequests(provider(), [2]);
    const { errors } = await retryLoop(once, client, "pay acme", () => {}, { thread: false, setup: (runner) => runner.setMessagesParams((params) => ({ ...params, tools: [sendPayment, getBalance] })) });
    expect(errors.map(String)).toEqual([expect.stringMatching(/terminated/)]);
    expect(effects()).toHaveLength(1);
  });
});

describe("ATR-8 refusals, without a request", () => {
  it("ATR-8 a runnable tool that is not wrapped, added with addTools or setMessagesParams, and runToolsEagerly set later, are refused with invalid_argument naming the method; a wrapped tool of another runner is rebound to this one", async () => {
    const { once, client, sendPayment, getBalance } = await app();
    const params = { model: "claude-test", max_tokens: 1024, stream: true as const, messages: [{ role: "user" as const, content: "pay acme" }] };
    const runner = once.toolRunner(client, params, { conversationId: "conv-refuse" });
    const stray = betaZodTool({ name: "stray", description: "not wrapped", inputSchema: z.object({}), run: () => "x" });
    const cases: [string, () => unknown][] = [
      ["runner.addTools(tools)[1]", () => runner.addTools(sendPayment, stray)],
      ["runner.setMessagesParams(params.tools)[0]", () => runner.setMessagesParams({ ...runner.params, tools: [stray] })],
      ["runner.setMessagesParams(params).runToolsEagerly", () => runner.setMessagesParams((p) => ({ ...p, runToolsEagerly: true }))],
    ];
    for (const [field, build] of cases) {
      const error = refusal(build);
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect(error.field).toBe(field);
    }
    // Nothing of a refused call was applied: the runner's tools are still the wrapped ones.
    const runnable = () => runner.params.tools.filter((t) => "run" in t) as { name: string; run: unknown }[];
    expect(runnable().map((t) => t.name)).toEqual(["send_payment", "get_balance"]);
    expect(runnable().some((t) => t === (sendPayment as unknown) || t === (getBalance as unknown))).toBe(false);
    // Another runner's params (its wrapped tools) given to this one: rebound to this runner's wrapped forms.
    const other = once.toolRunner(client, params, { conversationId: "conv-refuse" });
    runner.setMessagesParams({ ...other.params });
    const mine = runnable();
    expect(mine.some((t) => other.params.tools.includes(t as never))).toBe(false);
    expect(mine.map((t) => t.name)).toEqual(["send_payment", "get_balance"]);
  });
});

describe("ERR-1 bad input to the tool runner's entry points: a typed error naming the argument (adoption trial)", () => {
  it("refuses a client that is not one (was: TypeError 'reading beta'), a dispatcher option that is not an object (was: ignored), and messages that are not messages (was: TypeError 'reading role')", async () => {
    const { once, sendPayment } = await app();
    const params = { model: "claude-test", max_tokens: 1024, messages: [{ role: "user" as const, content: "pay acme" }] };
    const cases: [string, () => unknown][] = [
      ["client", () => once.toolRunner(undefined as never, params, { conversationId: "conv-bad" })],
      ["client", () => once.toolRunner({} as never, params, { conversationId: "conv-bad" })],
      ["options.dispatcher", () => createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger: new MemoryLedger(), dispatcher: 5 as never })],
      ["messages[0]", () => toolRunnerTurnIndexOf([null as never])],
      ["message", () => isGenuineUserMessage(undefined as never)],
    ];
    for (const [field, call] of cases) {
      const error = refusal(call);
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect(error.field, field).toBe(field);
    }
  });
});

describe.each([
  ["streamed", true],
  ["not streamed", false],
] as const)("ATR-3 generateToolResponse() inside the loop body (%s)", (_name, stream) => {
  it("ATR-3 the app reads the tool results in the loop body: the call runs once, through the dispatcher, under the key the loop's re-run derives (turn 1, ordinal 0); the re-run replays it", async () => {
    const { once, client, effects } = await app();
    cutRequests(provider(), [2]);
    const seen: unknown[] = [];
    let attempt = 0;
    // The first attempt reads the results in the body (as the SDK's docs show); the re-run does not.
    const { runner, errors } = await retryLoop(once, client, "pay acme", async (runner) => {
      if (attempt === 1) seen.push(await runner.generateToolResponse());
    }, { stream, setup: () => attempt++, thread: false });
    if (stream) expect(errors.map(String)).toEqual([expect.stringMatching(/terminated/)]);
    const results = seen.filter((r) => r !== null) as { content: { content: string; is_error?: boolean }[] }[];
    expect(results).toHaveLength(1);
    expect(results[0]!.content[0]!.is_error).toBeUndefined();
    expect(effects()).toHaveLength(1);
    const [call] = [...once.callsOf(runner).values()];
    expect(call).toMatchObject({ turnIndex: 1, ordinal: 0 });
    if (stream) expect(call!.outcome!.replayed).toBe(true);
    expect(toolResultsOf(runner.params.messages as Message[]).map((r) => r.isError)).toEqual([false]);
  });
});

describe("ATR-1 a server that cannot thread the runner's requests (400 thread_unsupported_request)", () => {
  it("ATR-1 the SDK's runner continues without a thread within the loop; a cut on a later iteration and the re-run (threaded again, refused again) pay each payment once, and the app is told those", async () => {
    const hipaa = await startMockProvider({ script: scriptFromPlans(PLANS), threads: { unsupported: ["hipaa"] } });
    try {
      const payments = await paymentsApp(hipaa);
      const once = createOnceToolRunner({
        tools: [payments.sendPayment],
        effects: { send_payment: "keyed_write" },
        ledger: new MemoryLedger(),
        identity: { send_payment: IDENTITY.send_payment },
      });
      // Request 1 is the refused create, 2 its unthreaded re-send (alice's payment is iteration 2, request 3).
      cutRequests(hipaa, [4]);
      const { runner, errors } = await retryLoop(once, payments.client, "pay acme then alice", () => {});
      expect(errors.map(String)).toEqual([expect.stringMatching(/terminated/)]);
      const log = hipaa.requests.map((r) => [r.status, (r.body as { thread?: { type: string } }).thread?.type ?? "none"]);
      expect(log[0]).toEqual([400, "create"]);
      expect(hipaa.requests[0]!.error).toMatch(/hipaa/);
      expect(log.slice(1, 4).map(([, type]) => type)).toEqual(["none", "none", "none"]);
      const made = payments.effects();
      expect(made).toHaveLength(2);
      const told = toolResultsOf(runner.params.messages as Message[]).filter((r) => !r.isError).map((r) => (JSON.parse(r.text) as { paymentId: string }).paymentId);
      expect(told.sort()).toEqual(made.map((e) => e.resourceId).sort());
    } finally {
      await hipaa.close();
    }
  });
});

describe("ATR-2 a history windowed mid-run, the turn index counted", () => {
  it("ATR-2 the app trims the runner's history with setMessagesParams (windowing) without supplying the turn index: refused with invalid_argument, not run as an earlier turn's call (which would answer the user's second payment with the first one's result)", async () => {
    const { once, client, effects } = await app();
    // Turn 1: the user pays acme.
    const first = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, thread: false, messages: [{ role: "user", content: "pay acme" }] }, { conversationId: "conv-window" });
    await first.runUntilDone();
    expect(effects()).toHaveLength(1);
    // Turn 2: the user asks to pay acme again (meant); the app keeps only the last user message.
    const history = [...(first.params.messages as Message[]), { role: "user" as const, content: "pay acme" }];
    const second = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, thread: false, messages: history }, { conversationId: "conv-window" });
    const error = refusal(() => second.setMessagesParams((params) => ({ ...params, messages: params.messages.slice(-1) })));
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error.field).toBe("runner.setMessagesParams(params.messages)");
    // Untrimmed, the second payment is turn 2's own call: it runs.
    await second.runUntilDone();
    expect(effects()).toHaveLength(2);
    expect([...once.callsOf(second).values()].map((c) => [c.turnIndex, c.ordinal, c.outcome?.replayed])).toEqual([[2, 0, false]]);
  });

  it("ATR-2 a history that lost user messages by another route (the SDK's own compaction replaces it): the call is refused when it runs, not run as an earlier turn's", async () => {
    const { once, client, effects } = await app();
    const call = { type: "tool_use" as const, id: "toolu_after_compaction", name: "send_payment", input: { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "again" } };
    const history: Message[] = [
      { role: "user", content: "pay acme" },
      { role: "assistant", content: "Paid." },
      { role: "user", content: "pay acme again" },
    ];
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, thread: false, messages: history }, { conversationId: "conv-compacted" });
    // The SDK's own method, as its compaction does, past the wrapper's guard: the summary stands for the first turns.
    Object.getPrototypeOf(runner).setMessagesParams.call(runner, { ...runner.params, messages: [{ role: "user", content: "pay acme again" }, { role: "assistant", content: [call] }] });
    const tool = runner.params.tools.find((t) => "run" in t && "name" in t && t.name === "send_payment") as { run: (args: unknown, context: unknown) => Promise<unknown> };
    await expect(tool.run(call.input, { toolUse: call, toolUseBlock: call })).rejects.toMatchObject({ code: "invalid_argument", effect: "no" });
    expect(once.callsOf(runner).get(call.id)!.error!.message).toMatch(/fewer user messages \(1\) than when the runner started \(2\)/);
    expect(effects()).toHaveLength(0);
  });
});

describe("ATR-4 an identity declared, a call without an optional field", () => {
  it("ATR-4 the model leaves out the optional memo (the tool's own schema allows it): the payment runs under the identity's key, not refused as tool_input_invalid", async () => {
    const { once, client, effects } = await app();
    const call = { type: "tool_use" as const, id: "toolu_no_memo", name: "send_payment", input: { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042" } };
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, thread: false, messages: [{ role: "user", content: "pay acme" }, { role: "assistant", content: [call] }] }, { conversationId: "conv-no-memo" });
    const tool = runner.params.tools.find((t) => "run" in t && "name" in t && t.name === "send_payment") as { run: (args: unknown, context: unknown) => Promise<unknown> };
    await tool.run(call.input, { toolUse: call, toolUseBlock: call });
    expect(once.callsOf(runner).get(call.id)).toMatchObject({ turnIndex: 1, ordinal: 0, outcome: { replayed: false } });
    expect(effects()).toHaveLength(1);
    // The same call with a memo is the same effect (identity): answered from the ledger.
    expect(once.dispatcher.keyFor({ name: "send_payment", input: { ...call.input, memo: "Invoice 1042" } }, { conversationId: "conv-no-memo", turnIndex: 1, ordinal: 0 })).toBe(once.callsOf(runner).get(call.id)!.outcome!.key);
  });
});

describe("ATR-1 two runners for one user message at once (a double submit), and max_iterations", () => {
  it("ATR-1 two runners of the same message run concurrently: each payment is made once, and both runners are told the same payments", async () => {
    const payments = await paymentsApp(provider(), { latencyMs: 150 });
    const once = createOnceToolRunner({
      tools: [payments.sendPayment],
      effects: { send_payment: "keyed_write" },
      ledger: new MemoryLedger(),
      identity: { send_payment: IDENTITY.send_payment },
      dispatcher: { waitMs: 5_000, pollMs: 5 },
    });
    const start = () => once.toolRunner(payments.client, { model: "claude-test", max_tokens: 1024, thread: false, messages: [{ role: "user", content: "pay acme then alice" }] }, { conversationId: "conv-double" });
    const runners = [start(), start()];
    await Promise.all(runners.map((r) => r.runUntilDone()));
    const made = payments.effects();
    expect(made).toHaveLength(2);
    const told = runners.map((r) => toolResultsOf(r.params.messages as Message[]).map((t) => (JSON.parse(t.text) as { paymentId: string }).paymentId).sort());
    expect(told[0]).toEqual(made.map((e) => e.resourceId).sort());
    expect(told[1]).toEqual(told[0]);
    // Each payment ran in one runner and was answered from the ledger in the other.
    const replayed = runners.flatMap((r) => [...once.callsOf(r).values()].map((c) => c.outcome!.replayed));
    expect(replayed.filter(Boolean)).toHaveLength(2);
  });

  it("ATR-1 a loop stopped by max_iterations after iteration 1 paid, continued by a new runner from its messages, then re-run from the user's message: each payment once", async () => {
    const { once, client, effects } = await app();
    const params = { model: "claude-test", max_tokens: 1024, thread: false as const };
    const stopped = once.toolRunner(client, { ...params, max_iterations: 1, messages: [{ role: "user", content: "pay acme then alice" }] }, { conversationId: "conv-max" });
    await stopped.runUntilDone();
    expect(effects()).toHaveLength(1);
    // The runner stopped with iteration 1's call answered: its messages end with the tool result.
    expect(toolResultsOf(stopped.params.messages as Message[])).toHaveLength(1);
    const continued = once.toolRunner(client, { ...params, messages: stopped.params.messages as Message[] }, { conversationId: "conv-max" });
    await continued.runUntilDone();
    expect(effects()).toHaveLength(2);
    expect([...once.callsOf(continued).values()].map((c) => [c.turnIndex, c.ordinal])).toEqual([[1, 0]]);
    const again = once.toolRunner(client, { ...params, messages: [{ role: "user", content: "pay acme then alice" }] }, { conversationId: "conv-max" });
    await again.runUntilDone();
    expect(effects()).toHaveLength(2);
    expect([...once.callsOf(again).values()].map((c) => c.outcome!.replayed)).toEqual([true, true]);
  });
});
