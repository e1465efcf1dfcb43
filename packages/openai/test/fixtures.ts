import { afterEach, beforeEach, expect } from "vitest";
import OpenAI from "openai";
import {
  Dispatcher,
  MemoryConversationStore,
  MemoryLedger,
  ToolError,
  ToolRegistry,
  UnguardedDispatcher,
  defineTool,
  type CallDispatcher,
  type ConversationStore,
} from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { call, reasoning, respond, say, scriptFromPlans, startMockOpenAI, text, type CutKind, type Fault, type MockOpenAI, type RequestInfo } from "@dispatch-once/mock-openai";
import { z } from "zod";
import { ConversationRunner, ResponsesTurnAccumulator, type CallState, type ConversationRunnerOptions, type RunnerEvent } from "../src/index.js";

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };
export const PAY_BOB = { payee: "bob", amount: 4_000, currency: "EUR", reference: "LOAN-3", memo: "Loan repayment" };

export function startProvider(): Promise<MockOpenAI> {
  return startMockOpenAI({
    seed: "openai-tests",
    script: scriptFromPlans(
      {
        "pay acme": respond(call("send_payment", PAY_ACME, { reword: ["memo"] })),
        // A reasoning model reasons before its call: a fresh reasoning item (id, encrypted content) per response.
        "pay acme, thinking": respond(reasoning("The user wants acme paid invoice 1042."), call("send_payment", PAY_ACME, { reword: ["memo"] })),
        "pay acme twice": respond(call("send_payment", PAY_ACME), call("send_payment", PAY_ACME)),
        "pay acme and bob": respond(text("Two payments."), call("send_payment", PAY_ACME), call("send_payment", PAY_BOB)),
        hello: say("Hi."),
      },
      { after: "Payment sent." },
    ),
  });
}

export const sdk = (mock: MockOpenAI) => new OpenAI({ baseURL: mock.baseURL, apiKey: "test-key", maxRetries: 0 });

/** Drive one response through the real SDK into an accumulator; `onComplete` sees each call at its output_item.done. */
export async function accumulate(client: OpenAI, input: string, fault?: Fault, onComplete: (call: CallState) => void = () => {}) {
  const accumulator = new ResponsesTurnAccumulator();
  let error: unknown;
  try {
    const stream = await client.responses.create(
      { model: "gpt-test", input, stream: true },
      fault !== undefined ? { headers: { "x-mock-fault": JSON.stringify(fault) } } : undefined,
    );
    for await (const event of stream) {
      const complete = accumulator.apply(event);
      if (complete !== undefined) onComplete(complete);
    }
  } catch (e) {
    error = e;
  }
  return { accumulator, error };
}

/**
 * send_payment over the mock payments API: the key travels as the Idempotency-Key header, and
 * the API's effect log is the oracle for how many payments were made.
 */
export async function payments(latencyMs: number): Promise<{ tools: ToolRegistry; server: MockPaymentsServer; effects: () => { idempotencyKey: string | null; paymentId: string }[] }> {
  const server = await startMockPayments({ latencyMs });
  const client = createPaymentsClient({ baseURL: server.url, token: "acct_openai_test" });
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      description: "Send a payment to a payee",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string().length(3), reference: z.string(), memo: z.string().optional() }),
      // The memo is re-worded on a retry: it is not part of what the payment is.
      identity: ["payee", "amount", "currency", "reference"],
      async run(args, ctx) {
        try {
          const payment = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal });
          return { paymentId: payment.body.id, status: "accepted" };
        } catch (error) {
          if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
          throw error;
        }
      },
    }),
  ]);
  const effects = () =>
    server
      .effects()
      .filter((e) => e.kind === "payment_created")
      .map((e) => ({ idempotencyKey: e.idempotencyKey, paymentId: e.resourceId }));
  return { tools, server, effects };
}

/** The payment request (its input ends with the user's message), not the follow-up that carries the result. */
export const isPaymentRequest = (request: { input: unknown }) =>
  Array.isArray(request.input) && (request.input.at(-1) as { role?: string } | undefined)?.role === "user";

const servers: { close(): Promise<void> }[] = [];
/** Close every payments server the tests of a file started. */
export async function closeDownstreams(): Promise<void> {
  await Promise.all(servers.splice(0).map((s) => s.close()));
}

/**
 * Call at the top of a test file: each test gets a mock Responses API with the plans of
 * `startProvider`, started before it and closed after it with the payments servers it started.
 * Returns the current one.
 */
export function providerPerTest(): () => MockOpenAI {
  let provider: MockOpenAI | undefined;
  beforeEach(async () => {
    provider = await startProvider();
  });
  afterEach(async () => {
    await provider?.close();
    provider = undefined;
    await closeDownstreams();
    checkCutGates();
  });
  return () => {
    if (provider === undefined) throw new Error("the mock provider runs only within a test");
    return provider;
  };
}

/** The OpenAI runner over the mock, a guarded (or naive) dispatcher and the mock payments API. */
export async function setup(provider: MockOpenAI, options: { guarded: boolean; latencyMs?: number; runner?: Partial<ConversationRunnerOptions>; store?: ConversationStore }) {
  const downstream = await payments(options.latencyMs ?? 50);
  servers.push(downstream.server);
  const ledger = new MemoryLedger();
  const dispatcher: CallDispatcher = options.guarded
    ? new Dispatcher({ tools: downstream.tools, ledger, waitMs: 10_000, pollMs: 5 })
    : new UnguardedDispatcher(downstream.tools);
  const store = options.store ?? new MemoryConversationStore();
  const client = sdk(provider);
  /** The options `runner` was built with. */
  const runnerOptions: ConversationRunnerOptions = {
    client,
    dispatcher,
    store,
    model: "gpt-test",
    tools: downstream.tools.providerSchemas(),
    retry: { backoffMs: () => 10 },
    ...options.runner,
  };
  const runner = new ConversationRunner(runnerOptions);
  return { ...downstream, ledger, store, runner, runnerOptions, client, dispatcher };
}

/** Long enough for any dispatch of these tests on a loaded host, well inside the test timeout (60 s). */
const GATE_TIMEOUT_MS = 20_000;
const gateFailures: string[] = [];
/**
 * The gates still waiting, with the test that set each. A gate outlives its test when its stream
 * never reached the hold (the client left first): it is reported in that test's checkCutGates,
 * never 20 s later in whichever test then runs (files share one module graph per worker).
 */
const pendingGates = new Set<{ requestNumber: number; test: string; reported: boolean }>();

/**
 * The runner's events (pass `onEvent` as the runner's) and the calls resolved so far, by call id,
 * for a cut gate to wait on. Call ids are fresh per response, so a held response's own calls name
 * exactly the dispatch its cut means. A test's own loop marks its calls with `markResolved`.
 */
export class RunnerEventLog {
  readonly events: RunnerEvent[] = [];
  private readonly resolved = new Set<string>();
  private readonly waiters = new Set<() => void>();

  readonly onEvent = (event: RunnerEvent): void => {
    this.events.push(event);
    if (event.type === "call_resolved") this.markResolved(event.callId);
  };

  markResolved(callId: string): void {
    this.resolved.add(callId);
    for (const wake of [...this.waiters]) wake();
  }

  /** Resolves once every call id is resolved; rejects after `timeoutMs` naming the ones still not. */
  waitForResolved(callIds: readonly string[], timeoutMs = GATE_TIMEOUT_MS): Promise<void> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(check);
        reject(new Error(`timed out after ${timeoutMs} ms waiting for calls ${callIds.filter((id) => !this.resolved.has(id)).join(", ")} to resolve`));
      }, timeoutMs);
      const check = () => {
        if (!callIds.every((id) => this.resolved.has(id))) return;
        clearTimeout(timer);
        this.waiters.delete(check);
        resolve();
      };
      this.waiters.add(check);
      check();
    });
  }
}

/**
 * A cut at after_dispatch_before_stop placed by causal order, not by a sleep: a sleep before
 * response.completed only guessed that the payment had finished, and lost the guess on a loaded
 * host (the position read during_dispatch). `hold(info)` is the fault a plan returns for a
 * request: the stream pauses where response.completed goes, and once every call the held response
 * made has resolved (as `log` saw it) it is cut with `kind`. A gate that cannot finish still cuts,
 * so the send ends, and `checkCutGates()` (after each test) fails the test with why.
 */
export function cutAfterDispatch(provider: MockOpenAI, log: RunnerEventLog, kind: CutKind = "reset") {
  const gate = async (requestNumber: number) => {
    const pending = { requestNumber, test: expect.getState().currentTestName ?? "(no test)", reported: false };
    pendingGates.add(pending);
    const fail = (error: unknown) => {
      if (!pending.reported) gateFailures.push(`${pending.test}: request ${requestNumber}: ${String(error)}`);
    };
    try {
      await provider.waitForHold(requestNumber, { timeoutMs: GATE_TIMEOUT_MS });
      const calls = provider.requests.find((r) => r.requestNumber === requestNumber)?.calls.map((c) => c.callId) ?? [];
      // A response without calls (a plan's follow-up) has no dispatch to wait for: cut at once.
      await log.waitForResolved(calls);
    } catch (error) {
      fail(error);
    }
    try {
      provider.cutNow(requestNumber, kind);
    } catch (error) {
      fail(error);
    }
    pendingGates.delete(pending);
  };
  return {
    hold(info: RequestInfo): Fault {
      void gate(info.requestNumber);
      return { kind: "hold", at: { beforeCompleted: true } };
    },
  };
}

/** Throws (and forgets them) if a cut gate of the test could not wait for its dispatch, or is waiting still. */
export function checkCutGates(): void {
  for (const pending of pendingGates) {
    pending.reported = true;
    gateFailures.push(`${pending.test}: request ${pending.requestNumber} was still waiting when its test ended (its stream never reached the hold, or its calls never resolved)`);
  }
  pendingGates.clear();
  const failures = gateFailures.splice(0);
  if (failures.length > 0) throw new Error(`a cut gate did not see its dispatch resolve: ${failures.join("; ")}`);
}
