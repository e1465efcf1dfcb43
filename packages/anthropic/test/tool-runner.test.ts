import type Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { Dispatcher, InvalidArgumentError, InvalidKeyInputError, LedgerCorruptError, MemoryLedger, StaleClaimError, ToolError, defineTool } from "@dispatch-once/core";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { OnceToolCallError, createOnceToolRunner, dispatchOnceOf, rerunMessagesOf, toolRunnerTurnIndexOf, type OnceToolCall, type OnceToolRunner } from "../src/index.js";
import { PAY_ACME } from "./fixtures.js";
import { THREAD_MODES, cutRequests, expectRequestsOfMode, paymentSchema, paymentsApp, providerPerTest, toolResultsOf, type ThreadMode } from "./tool-runner-fixtures.js";

const provider = providerPerTest();

/**
 * Every case that sends requests runs in both of the SDK runner's modes: `thread: false` (the full
 * history on each request) and the default, message threads (create, then continue with only the
 * new messages; the mock provider rebuilds the conversation, and replays/new threads are the SDK's).
 */
const MODES = THREAD_MODES;

type Message = Anthropic.Beta.Messages.BetaMessageParam;
const IDENTITY = { send_payment: ["payee", "amount", "currency", "reference"] };

/**
 * The app's retry around the SDK's runner: a request of the loop that fails (a cut stream) makes
 * the app run the loop again from `start(previous)` (the user's message, or what the failed
 * runner had accumulated), as an app does with `runUntilDone()`.
 */
async function runLoopIn(
  once: OnceToolRunner,
  client: Anthropic,
  start: (failed: Message[] | undefined) => Message[],
  options: { conversationId?: string; attempts?: number; turnIndex?: number; stream?: boolean; mode?: ThreadMode } = {},
) {
  const errors: unknown[] = [];
  const runners = [];
  let failed: Message[] | undefined;
  for (let attempt = 0; attempt < (options.attempts ?? 4); attempt++) {
    const runner = once.toolRunner(
      client,
      { model: "claude-test", max_tokens: 1024, stream: options.stream ?? true, ...(options.mode ?? THREAD_MODES[0]!)[1], messages: start(failed) },
      { conversationId: options.conversationId ?? "conv-1", ...(options.turnIndex !== undefined ? { turnIndex: options.turnIndex } : {}) },
    );
    runners.push(runner);
    try {
      await runner.runUntilDone();
      return { runner, runners, errors, messages: runner.params.messages, calls: once.callsOf(runner) };
    } catch (error) {
      errors.push(error);
      failed = runner.params.messages;
    }
  }
  throw new Error(`the loop never finished: ${errors.map(String).join("; ")}`);
}

const fromUser = (text: string) => () => [{ role: "user" as const, content: text }];

async function app(options: { identity?: boolean; latencyMs?: number } = {}) {
  const payments = await paymentsApp(provider(), options.latencyMs !== undefined ? { latencyMs: options.latencyMs } : {});
  const ledger = new MemoryLedger();
  const once = createOnceToolRunner({
    tools: [payments.sendPayment, payments.getBalance],
    effects: { send_payment: "keyed_write", get_balance: "read" },
    ledger,
    ...(options.identity === false ? {} : { identity: IDENTITY }),
    dispatcher: { waitMs: 5_000, pollMs: 5 },
  });
  return { ...payments, ledger, once };
}

/** What the app was told (the kept run's tool results) agrees with the effect log: each payment once. */
function expectToldAgreesWithEffects(messages: readonly Message[], effects: readonly { resourceId?: string | null; idempotencyKey: string | null }[]) {
  const told = toolResultsOf(messages).filter((r) => !r.isError).map((r) => (JSON.parse(r.text) as { paymentId: string }).paymentId);
  expect(told.sort()).toEqual(effects.map((e) => e.resourceId).sort());
}

describe.each(MODES)("ATR: the SDK's toolRunner through Dispatch-Once (createOnceToolRunner), %s", (_name, params) => {
  const mode: ThreadMode = [_name, params];
  const runLoop: typeof runLoopIn = (once, client, start, options = {}) => runLoopIn(once, client, start, { mode, ...options });
  afterEach(() => expectRequestsOfMode(provider(), mode));


  it("ATR-1 a stream cut in iteration 2, after the payment ran: the re-run from the user's message is answered from the ledger; one payment, and the app is told that one", async () => {
    const { once, client, effects } = await app();
    cutRequests(provider(), [2]);
    const { messages, calls, errors } = await runLoop(once, client, fromUser("pay acme"));
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/terminated/); // the SDK's AnthropicError for a cut stream
    const made = effects();
    expect(made).toHaveLength(1);
    const [call] = [...calls.values()];
    expect(call!.outcome!.replayed).toBe(true);
    // The Idempotency-Key reached the tool's run and went downstream (ATR-4).
    expect(made[0]!.idempotencyKey).toBe(call!.outcome!.key);
    expectToldAgreesWithEffects(messages, made);
  });

  it("ATR-1 a stream cut in iteration 2, and the loop re-run from the failed runner's messages (the paid call and its result): nothing runs again; one payment, and the app is told that one", async () => {
    const { once, client, effects } = await app();
    cutRequests(provider(), [2]);
    const { messages, calls, errors, runners } = await runLoop(once, client, (failed) => failed ?? fromUser("pay acme")());
    expect(errors).toHaveLength(1);
    expect(String(errors[0])).toMatch(/terminated/);
    // The failed runner kept iteration 1's call and its result (the cut reply had no complete block).
    expect(toolResultsOf(runners[0]!.params.messages)).toHaveLength(1);
    expect(calls.size).toBe(0); // the re-run's model closed the loop: no call
    const made = effects();
    expect(made).toHaveLength(1);
    expect(made[0]!.idempotencyKey).toBe([...once.callsOf(runners[0]!).values()][0]!.outcome!.key);
    expectToldAgreesWithEffects(messages, made);
  });

  it("ATR-1 a stream cut in iteration 2 right after alice's tool_use block stopped: the failed runner's messages end with that call and no result; the re-run from rerunMessagesOf(runner) pays alice once, and each payment is told once", async () => {
    const { once, client, effects } = await app();
    provider().setFaultPlan((_request, info) => (info.stream && info.requestNumber === 2 ? { kind: "reset", at: { afterToolUseStop: 0 } } : undefined));
    const seen: Message[][] = [];
    const { messages, errors } = await runLoop(once, client, (failed) => {
      if (failed === undefined) return fromUser("pay acme then alice")();
      seen.push(failed);
      return rerunMessagesOf(failed);
    });
    expect(errors.map(String)).toEqual([expect.stringMatching(/terminated/)]); // the SDK's AnthropicError for a cut stream
    // What the SDK's runner kept: whatever it kept of the cut reply, no result for it.
    const kept = seen[0]!;
    const rerun = rerunMessagesOf(kept);
    expect(rerun.at(-1)!.role).toBe("user");
    expect(toolResultsOf(rerun)).toHaveLength(1);
    const made = effects();
    expect(made.map((e) => e.resourceId)).toHaveLength(2);
    expectToldAgreesWithEffects(messages, made);
  });

  it("ATR-1 without streaming, a 529 on iteration 2's request: the re-run is answered from the ledger; one payment", async () => {
    const { once, client, effects } = await app();
    provider().setFaultPlan((_request, info) => (info.requestNumber === 2 ? { kind: "status", status: 529 } : undefined));
    const { messages, calls, errors } = await runLoop(once, client, fromUser("pay acme"), { stream: false });
    expect(errors).toHaveLength(1);
    expect((errors[0] as { status?: number }).status).toBe(529);
    const made = effects();
    expect(made).toHaveLength(1);
    expect([...calls.values()][0]!.outcome!.replayed).toBe(true);
    expectToldAgreesWithEffects(messages, made);
  });

  it("ATR-1 a cut on a later iteration (3): both payments of the loop once, whether the loop re-runs from the user's message or from the failed runner's accumulated messages", async () => {
    const { once, client, effects } = await app();
    cutRequests(provider(), [3, 6]);
    // Run 1: requests 1-3, cut at 3. Run 2 from the user's message: requests 4-6, cut at 6.
    // Run 3 resumes from the messages of run 2 up to iteration 1's results (what an app that
    // saved them after each iteration holds): the alice call of iteration 2 comes again.
    let runs = 0;
    const { messages, calls, errors } = await runLoop(once, client, (failed) => {
      runs++;
      return runs < 3 ? fromUser("pay acme then alice")() : failed!.slice(0, 3);
    });
    expect(errors).toHaveLength(2);
    const made = effects();
    expect(made.map((e) => e.resourceId)).toHaveLength(2);
    expect(new Set(made.map((e) => e.idempotencyKey)).size).toBe(2);
    // The resumed run made one call (alice, iteration 2): answered from the ledger.
    expect([...calls.values()].map((c) => [c.outcome?.replayed, c.ordinal])).toEqual([[true, 0]]);
    expectToldAgreesWithEffects(messages, made);
  });

  it("ATR-3 an identical payment in a later iteration is a new call (ordinal 1) and runs; a re-run of the loop gives both the same keys", async () => {
    const { once, client, effects } = await app();
    cutRequests(provider(), [3]);
    const { calls, errors, messages } = await runLoop(once, client, fromUser("pay acme in two steps"));
    expect(errors).toHaveLength(1);
    const made = effects();
    expect(made).toHaveLength(2);
    expect([...calls.values()].map((c) => [c.ordinal, c.outcome?.replayed])).toEqual([
      [0, true],
      [1, true],
    ]);
    expectToldAgreesWithEffects(messages, made);
  });

  it("ATR-3 two identical calls in one response get ordinals 0 and 1, both run, and a re-run replays both", async () => {
    const { once, client, effects } = await app();
    cutRequests(provider(), [2]);
    const { calls } = await runLoop(once, client, fromUser("pay acme twice"));
    expect(effects()).toHaveLength(2);
    expect([...calls.values()].map((c) => [c.ordinal, c.outcome?.replayed]).sort()).toEqual([
      [0, true],
      [1, true],
    ]);
  });

  it("ATR-2 the turn index counts genuine user messages, never the loop's tool_result messages, and the toolu_ id never enters the key (KEY-9)", async () => {
    const { once, client, effects } = await app();
    const earlier: Message[] = [
      { role: "user", content: "hello" },
      { role: "assistant", content: "Hi." },
      { role: "user", content: [{ type: "text", text: "pay acme" }] },
    ];
    const { calls, messages } = await runLoop(once, client, () => earlier);
    const [toolUseId, call] = [...calls.entries()][0] as [string, OnceToolCall];
    expect(call.turnIndex).toBe(2);
    expect(toolRunnerTurnIndexOf(messages)).toBe(2); // the loop's tool_result message is not a turn
    expect(toolRunnerTurnIndexOf(earlier)).toBe(2);
    const expected = once.dispatcher.keyFor({ name: "send_payment", input: { ...PAY_ACME, memo: "anything" } }, { conversationId: "conv-1", turnIndex: 2, ordinal: 0 });
    expect(call.outcome!.key).toBe(expected);
    expect(call.outcome!.key).not.toContain(toolUseId);
    expect(effects()).toHaveLength(1);
    // An app that keeps its own turn count passes it: it, not the count, is the turn index.
    const own = await runLoop(once, client, () => earlier, { turnIndex: 9, conversationId: "conv-2" });
    expect([...own.calls.values()][0]!.turnIndex).toBe(9);
  });

  it("ATR-4 without an identity declaration the re-worded memo of the re-run is a new key: the identity is what makes the re-run an answer", async () => {
    const { once, client, effects } = await app({ identity: false });
    cutRequests(provider(), [2]);
    await runLoop(once, client, fromUser("pay acme"));
    // Not a double payment in the money sense the test cares about: it shows the memo entered the key.
    const keys = new Set(effects().map((e) => e.idempotencyKey));
    expect(keys.size).toBe(2);
  });

  it("ATR-5 a Dispatch-Once error reaches the model as the tool's error with its code and that the effect may have happened, and the app reads the same", async () => {
    const { client, effects } = await app();
    let runs = 0;
    const createInvoice = betaZodTool({
      name: "send_payment",
      description: "Send a payment (the downstream loses the response)",
      inputSchema: z.object({ payee: z.string(), amount: z.number(), currency: z.string(), reference: z.string(), memo: z.string().optional() }),
      run: async () => {
        runs++;
        throw new ToolError("connection reset after the request was sent", { disposition: "unknown" });
      },
    });
    const once = createOnceToolRunner({
      tools: [createInvoice],
      effects: { send_payment: "unkeyed_write" },
      ledger: new MemoryLedger(),
      identity: IDENTITY,
      dispatcher: { allowVolatileLedgerForUnkeyedWrites: true },
    });
    const first = await runLoop(once, client, fromUser("pay acme"));
    const [result] = toolResultsOf(first.messages);
    expect(result!.isError).toBe(true);
    expect(result!.text).toContain("outcome_unknown");
    expect(result!.text).toContain("it may have happened");
    expect(result!.text).not.toMatch(/\bfailed\b/);
    const [call] = [...first.calls.values()];
    expect(call!.error).toMatchObject({ code: "outcome_unknown", effect: "possibly", retryable: "no" });
    // The loop's re-run never runs an unknown unkeyed write again (LEDGER-7).
    const second = await runLoop(once, client, fromUser("pay acme"));
    expect([...second.calls.values()][0]!.error!.code).toBe("outcome_unknown");
    expect(runs).toBe(1);
    expect(effects()).toHaveLength(0);
  });

  it("ATR-5 a call in flight elsewhere past the wait bound is answered in_flight_elsewhere (may have happened, re-send helps), not run", async () => {
    const { client, sendPayment, effects } = await app();
    const ledger = new MemoryLedger();
    const once = createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger, identity: IDENTITY, dispatcher: { waitMs: 20, pollMs: 5 } });
    const at = { conversationId: "conv-1", turnIndex: 1, ordinal: 0 };
    // Another process runs the same call (same key: same turn, tool and identity) and holds its claim.
    let release!: () => void;
    const held = new Promise<string>((resolve) => (release = () => resolve("done elsewhere")));
    const other = new Dispatcher({
      ledger,
      tools: [defineTool({ name: "send_payment", effect: "keyed_write", input: paymentSchema, identity: IDENTITY.send_payment as never, run: () => held })],
    });
    const holding = other.dispatch({ name: "send_payment", input: PAY_ACME }, at);
    await expect.poll(async () => (await ledger.lookup(once.dispatcher.keyFor({ name: "send_payment", input: PAY_ACME }, at)))?.state).toBe("in_flight");
    const { messages, calls } = await runLoop(once, client, fromUser("pay acme"));
    release();
    await holding;
    const [result] = toolResultsOf(messages);
    expect(result!.isError).toBe(true);
    expect(result!.text).toContain("in_flight_elsewhere");
    expect(result!.text).toContain("it may have happened");
    expect([...calls.values()][0]!.error).toMatchObject({ code: "in_flight_elsewhere", effect: "possibly", retryable: "same_message" });
    expect(effects()).toHaveLength(0); // this loop did not run it
  });

  it("ATR-6 the runner's request signal does not abort a claimed write: the payment completes and the re-run replays it", async () => {
    const { client, payments, effects } = await app();
    const controller = new AbortController();
    const seen: { aborted: boolean; same: boolean }[] = [];
    const sendPayment = betaZodTool({
      name: "send_payment",
      description: "Send a payment",
      inputSchema: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string().optional() }),
      run: async (args, context) => {
        controller.abort(new Error("the app gave up on the request"));
        const payment = await payments.createPayment(args, { idempotencyKey: dispatchOnceOf(context)!.idempotencyKey, signal: context!.signal! });
        seen.push({ aborted: context!.signal!.aborted, same: context!.signal === controller.signal });
        return JSON.stringify({ paymentId: payment.body.id, status: "accepted" });
      },
    });
    const ledger = new MemoryLedger();
    const once = createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, ledger, identity: IDENTITY });
    const runner = once.toolRunner(
      client,
      { model: "claude-test", max_tokens: 1024, stream: true, ...params, messages: fromUser("pay acme")() },
      { conversationId: "conv-1" },
      { signal: controller.signal },
    );
    await runner.runUntilDone().catch(() => {});
    expect(seen).toEqual([{ aborted: false, same: false }]);
    const [call] = [...once.callsOf(runner).values()];
    expect(call!.outcome!.replayed).toBe(false);
    expect(effects()).toHaveLength(1);
    const again = await runLoop(once, client, fromUser("pay acme"));
    expect([...again.calls.values()][0]!.outcome!.replayed).toBe(true);
    expect(effects()).toHaveLength(1);
  });
});

describe("ATR: the SDK's toolRunner through Dispatch-Once, threaded only", () => {
  it("ATR-1 the server loses the thread between iterations (404 thread_not_found): the SDK replays the conversation under a new thread within the loop; each payment ran once, never replayed, and the app is told those", async () => {
    const { once, client, effects } = await app();
    // Once the first reply is stored (the end of request 1), the server loses it.
    void provider().waitForEnd(1).then(() => provider().forgetThreads());
    const { messages, calls, errors } = await runLoopIn(once, client, fromUser("pay acme then alice"), { mode: THREAD_MODES[1]! });
    expect(errors).toHaveLength(0);
    // Iteration 2's continue is refused, the SDK replays under a new create (which pays alice), and
    // iteration 3 continues that new thread.
    expect(provider().requests.map((r) => [(r.body as { thread: { type: string } }).thread.type, r.status])).toEqual([
      ["create", 200],
      ["continue", 404],
      ["create", 200],
      ["continue", 200],
    ]);
    // The replay is the whole conversation: the user's message, the paid call, its result.
    expect((provider().requests[2]!.body as { messages: unknown[] }).messages).toHaveLength(3);
    const made = effects();
    expect(made).toHaveLength(2);
    expect([...calls.values()].map((c) => [c.ordinal, c.outcome?.replayed])).toEqual([
      [0, false],
      [0, false],
    ]);
    expectToldAgreesWithEffects(messages, made);
  });
});

describe("ATR: the SDK's toolRunner through Dispatch-Once, without a request", () => {
  it("ATR-2 a supplied turn index names the runner's first user message: a call answering a user message pushed into the loop is refused, not run under its keys", async () => {
    const { once, client, effects } = await app();
    const first = { type: "tool_use" as const, id: "toolu_first", name: "send_payment", input: PAY_ACME };
    const second = { type: "tool_use" as const, id: "toolu_second", name: "send_payment", input: PAY_ACME };
    const history: Message[] = [
      { role: "user", content: "pay acme" },
      { role: "assistant", content: [first] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: first.id, content: "{}" }] },
      { role: "user", content: "pay acme again" }, // pushed by the app while the loop ran
      { role: "assistant", content: [second] },
    ];
    const runWith = (turn: { conversationId: string; turnIndex?: number }) => {
      const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, messages: history.slice(0, 1) }, turn);
      runner.setMessagesParams((params) => ({ ...params, messages: history }));
      const tool = runner.params.tools.find((t) => "run" in t && "name" in t && t.name === "send_payment") as { run: (args: unknown, context: unknown) => Promise<unknown> };
      return { runner, run: () => tool.run(PAY_ACME, { toolUse: second, toolUseBlock: second }) };
    };
    const supplied = runWith({ conversationId: "conv-push", turnIndex: 4 });
    await expect(supplied.run()).rejects.toMatchObject({ code: "invalid_argument", effect: "no" });
    expect(once.callsOf(supplied.runner).get("toolu_second")!.error).toMatchObject({ code: "invalid_argument", effect: "no", retryable: "no" });
    expect(effects()).toHaveLength(0);
    // A call whose response is not in the runner's messages (runToolsEagerly, generateToolResponse()
    // inside the loop body) has no place in the turn: refused, not run (ATR-3).
    const stray = { type: "tool_use" as const, id: "toolu_stray", name: "send_payment", input: PAY_ACME };
    const tool = supplied.runner.params.tools.find((t) => "run" in t && "name" in t && t.name === "send_payment") as { run: (args: unknown, context: unknown) => Promise<unknown> };
    await expect(tool.run(PAY_ACME, { toolUse: stray, toolUseBlock: stray })).rejects.toMatchObject({ code: "invalid_argument", effect: "no" });
    expect(once.callsOf(supplied.runner).get("toolu_stray")).toMatchObject({ ordinal: undefined, error: { code: "invalid_argument" } });
    expect(effects()).toHaveLength(0);
    // Counted, the pushed message is the next turn: its call runs under that turn's key.
    const counted = runWith({ conversationId: "conv-push" });
    await counted.run();
    expect([...once.callsOf(counted.runner).values()].map((c) => [c.turnIndex, c.ordinal, c.outcome?.replayed])).toEqual([[2, 0, false]]);
    expect(effects()).toHaveLength(1);
  });

  it("ATR-7 options are checked: unknown names, identity fields the schema lacks, tools without an effect, runToolsEagerly", async () => {
    const { client, sendPayment, getBalance } = await app();
    const base = { tools: [sendPayment, getBalance], effects: { send_payment: "keyed_write", get_balance: "read" } as const, ledger: new MemoryLedger() };
    const refused = (build: () => unknown) => {
      try {
        build();
      } catch (error) {
        return error as InvalidArgumentError;
      }
      throw new Error("not refused");
    };
    const cases: [string, () => unknown, RegExp?][] = [
      ["options.identites", () => createOnceToolRunner({ ...base, identites: IDENTITY } as never), /did you mean identity/],
      ["options.identity.send_payment", () => createOnceToolRunner({ ...base, identity: { send_payment: ["payee", "payee_id"] } }), /"payee_id"/],
      ["options.identity.send_paymnt", () => createOnceToolRunner({ ...base, identity: { send_paymnt: ["payee"] } })],
      ["options.effects.get_balance", () => createOnceToolRunner({ ...base, effects: { send_payment: "keyed_write" } })],
      ["options.effects.void_payment", () => createOnceToolRunner({ ...base, effects: { ...base.effects, void_payment: "keyed_write" } })],
      ["options.tools[0]", () => createOnceToolRunner({ ...base, tools: [{ name: "x" } as never] })],
    ];
    for (const [field, build, message] of cases) {
      const error = refused(build);
      expect(error, field).toBeInstanceOf(InvalidArgumentError);
      expect(error.field).toBe(field);
      if (message) expect(error.message).toMatch(message);
    }
    const once = createOnceToolRunner(base);
    const params = { model: "claude-test", max_tokens: 1024, messages: fromUser("pay acme")() };
    const turnError = refused(() => once.toolRunner(client, params, { conversationId: "c", turnIndx: 1 } as never));
    expect(turnError).toBeInstanceOf(InvalidArgumentError);
    expect(turnError.field).toBe("turn.turnIndx");
    expect(refused(() => once.toolRunner(client, { ...params, runToolsEagerly: true, stream: true }, { conversationId: "c" })).field).toBe("params.runToolsEagerly");
    const stray = betaZodTool({ name: "stray", description: "not wrapped", inputSchema: z.object({}), run: () => "x" });
    expect(refused(() => once.toolRunner(client, { ...params, tools: [stray] }, { conversationId: "c" })).field).toBe("params.tools[0]");
    expect(refused(() => once.toolRunner(client, params, { conversationId: "no spaces" }))).toBeInstanceOf(InvalidKeyInputError);
  });
});

describe("ATR-1 rerunMessagesOf: the messages to re-run a failed loop from", () => {
  const user: Message = { role: "user", content: "pay acme" };
  const reply: Message = { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "send_payment", input: PAY_ACME }] };
  const results: Message = { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "{}" }] };
  const cut: Message = { role: "assistant", content: [{ type: "tool_use", id: "toolu_2", name: "send_payment", input: PAY_ACME }] };

  it("drops the trailing reply the failure cut and keeps every answered one, from the messages or from the runner", () => {
    expect(rerunMessagesOf([user, reply, results, cut])).toEqual([user, reply, results]);
    expect(rerunMessagesOf({ params: { messages: [user, reply, results, cut] } })).toEqual([user, reply, results]);
    expect(rerunMessagesOf([user, reply, results])).toEqual([user, reply, results]);
    expect(rerunMessagesOf([user])).toEqual([user]);
  });

  it("never changes the runner's own messages", () => {
    const messages = [user, reply, results, cut];
    rerunMessagesOf(messages);
    expect(messages).toHaveLength(4);
  });

  it("refuses what is not a runner or its messages (InvalidArgumentError naming `from`)", () => {
    for (const bad of [undefined, null, 42, {}, { params: {} }, { params: { messages: "x" } }]) {
      expect(() => rerunMessagesOf(bad as never)).toThrow(InvalidArgumentError);
      expect(() => rerunMessagesOf(bad as never)).toThrow(/from/);
    }
  });
});

describe("ATR-5 what the model is told of an error whose effect is known", () => {
  it("ATR-5 a claim lost after the run performed the effect (stale_claim, DISPATCH-8) tells the model it happened and not to re-run: its row may be an operator's release, which a re-run would perform again", () => {
    const error = new OnceToolCallError(new StaleClaimError("k", 1, "claim is no longer held", { effectHappened: true }));
    expect(error).toMatchObject({ code: "stale_claim", effect: "yes", retryable: "no" });
    expect(error.message).toContain("it happened; do not retry it");
    // Without the effect known, a lost claim is a re-send's to settle, as §11 says.
    expect(new OnceToolCallError(new StaleClaimError("k", 1))).toMatchObject({ effect: "possibly", retryable: "same_message" });
  });

  it("ATR-5 a record lost after the run performed the effect to an unreadable row (ledger_corrupt with effectHappened, DISPATCH-10) tells the model it happened and not to re-run", () => {
    const error = new OnceToolCallError(new LedgerCorruptError("k", "unknown row format version 2", { effectHappened: true }));
    expect(error).toMatchObject({ code: "ledger_corrupt", effect: "yes", retryable: "no", key: "k" });
    expect(error.message).toContain("it happened; do not retry it");
    expect(new OnceToolCallError(new LedgerCorruptError("k", "unknown row format version 2"))).toMatchObject({ effect: "possibly", retryable: "no" });
  });
});
