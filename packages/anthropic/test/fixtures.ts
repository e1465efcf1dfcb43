import { afterEach, beforeEach, expect } from "vitest";
import Anthropic from "@anthropic-ai/sdk";
import { AnthropicBedrock } from "@anthropic-ai/bedrock-sdk";
import { AnthropicVertex } from "@anthropic-ai/vertex-sdk";
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
  type Ledger,
} from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, startMockPayments } from "@dispatch-once/mock-payments";
import { scriptFromPlans, startMockProvider, toolUse, turn, type CutKind, type Fault, type MockProvider, type RequestInfo } from "@dispatch-once/mock-provider";
import { z } from "zod";
import { ConversationRunner, type ConversationRunnerOptions, type RunnerEvent } from "../src/index.js";

export const PAY_ACME = { payee: "acme", amount: 125_000, currency: "EUR", reference: "INV-1042", memo: "Invoice 1042" };
export const PAY_ALICE = { payee: "alice", amount: 2_500, currency: "EUR", reference: "RENT-11", memo: "November rent" };
export const PAY_BOB = { payee: "bob", amount: 4_000, currency: "EUR", reference: "LOAN-3", memo: "Loan repayment" };

/**
 * The send_payment tool over the mock payments API: the key travels as the Idempotency-Key
 * header, and the API's effect log is the oracle for how many payments were made.
 */
export async function paymentsDownstream(latencyMs: number, options: { result?: (paymentId: string) => unknown } = {}) {
  const server = await startMockPayments({ latencyMs });
  const client = createPaymentsClient({ baseURL: server.url, token: "acct_test" });
  const tools = new ToolRegistry([
    defineTool({
      name: "send_payment",
      description: "Send a payment to a payee",
      effect: "keyed_write",
      input: z.object({
        payee: z.string(),
        amount: z.number().int().positive(),
        currency: z.string().length(3),
        reference: z.string(),
        memo: z.string().optional(),
      }),
      identity: ["payee", "amount", "currency", "reference"],
      async run(args, ctx) {
        let payment;
        try {
          payment = await client.createPayment(args, { idempotencyKey: ctx.idempotencyKey, signal: ctx.signal });
        } catch (error) {
          // The truth about the effect, as the payments API's answer tells it (LEDGER-8, EFFECT-6).
          if (error instanceof PaymentsError) {
            throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
          }
          throw error;
        }
        return options.result?.(payment.body.id) ?? { paymentId: payment.body.id, status: "accepted" };
      },
    }),
  ]);
  const effects = () =>
    server.effects().filter((e) => e.kind === "payment_created").map((e) => ({ idempotencyKey: e.idempotencyKey, paymentId: e.resourceId, at: Date.parse(e.at) }));
  return { tools, effects, server };
}

export async function providerWithPlans(): Promise<MockProvider> {
  const payAcme = turn(toolUse("send_payment", PAY_ACME, { reword: ["memo"] }));
  return startMockProvider({
    script: scriptFromPlans({
      "pay acme": payAcme,
      "pay acme twice": turn(toolUse("send_payment", PAY_ACME), toolUse("send_payment", PAY_ACME)),
      "pay alice": turn(toolUse("send_payment", PAY_ALICE, { reword: ["memo"] })),
      "pay bob": turn(toolUse("send_payment", PAY_BOB, { reword: ["memo"] })),
      "hello": { content: [{ type: "text", text: "Hi." }], stopReason: "end_turn" },
    }),
  });
}

const servers: { close(): Promise<void> }[] = [];
/** Close every payments server the tests of a file started. */
export async function closeDownstreams(): Promise<void> {
  await Promise.all(servers.splice(0).map((s) => s.close()));
}

/**
 * Call at the top of a test file: each test gets a mock provider with the plans above, started
 * before it and closed after it with the payments servers it started. Returns the current one.
 */
export function providerPerTest(): () => MockProvider {
  let provider: MockProvider | undefined;
  beforeEach(async () => {
    provider = await providerWithPlans();
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

/** The cloud platforms whose SDK clients the tests drive against the mock provider's routes. */
export type Platform = "bedrock" | "vertex";
type VertexAuthClient = NonNullable<NonNullable<ConstructorParameters<typeof AnthropicVertex>[0]>["authClient"]>;

/**
 * The platform's client at the mock, with static credentials: no network call for a token.
 * Vertex: an `authClient` whose headers carry a fixed bearer token (the `accessToken` option is
 * kept by the 1.1.5 client but never sent: without `authClient` or `googleAuth` it asks Google's
 * default credentials). Bedrock: static AWS keys, which the client signs every request with (SigV4).
 * `maxRetries` is the SDK's default (2) unless given. Typed as the platform's own class, so a
 * test that passes it on checks, at the type-check, that no cast is needed.
 */
export function cloudClient(platform: "bedrock", mock: MockProvider, maxRetries?: number, defaultHeaders?: Record<string, string>): AnthropicBedrock;
export function cloudClient(platform: "vertex", mock: MockProvider, maxRetries?: number, defaultHeaders?: Record<string, string>): AnthropicVertex;
export function cloudClient(platform: Platform, mock: MockProvider, maxRetries?: number, defaultHeaders?: Record<string, string>): AnthropicBedrock | AnthropicVertex;
export function cloudClient(platform: Platform, mock: MockProvider, maxRetries = 2, defaultHeaders?: Record<string, string>): AnthropicBedrock | AnthropicVertex {
  const headers = defaultHeaders !== undefined ? { defaultHeaders } : {};
  if (platform === "bedrock") {
    return new AnthropicBedrock({ baseURL: mock.bedrockBaseURL, awsRegion: "us-east-1", awsAccessKey: "AKIDEXAMPLE", awsSecretKey: "test-secret", maxRetries, ...headers });
  }
  const authClient = { projectId: "test-project", getRequestHeaders: async () => new Headers({ authorization: "Bearer test-token" }) } as unknown as VertexAuthClient;
  return new AnthropicVertex({ baseURL: mock.vertexBaseURL, region: "us-east5", projectId: "test-project", authClient, maxRetries, ...headers });
}

/**
 * A fetch for AnthropicBedrock that passes the event stream of the `nth` streamed response (default
 * the first) through up to its `message_stop` message, lets half of that message's bytes through,
 * and ends the body cleanly: an event stream truncated inside a message (other responses pass whole).
 */
export function truncatingFetch(nth = 1): typeof fetch {
  let responses = 0;
  return async (input, init) => {
    const response = await fetch(input, init);
    if (!response.body || !response.headers.get("content-type")?.includes("application/vnd.amazon.eventstream") || ++responses !== nth) return response;
    const reader = response.body.getReader();
    let buffered = new Uint8Array(0);
    const eventType = (message: Uint8Array): string => {
      const view = new DataView(message.buffer, message.byteOffset, message.byteLength);
      const payload = Buffer.from(message.subarray(12 + view.getUint32(4), message.length - 4)).toString("utf8");
      const { bytes } = JSON.parse(payload) as { bytes?: string };
      return bytes === undefined ? "" : (JSON.parse(Buffer.from(bytes, "base64").toString("utf8")) as { type: string }).type;
    };
    const body = new ReadableStream<Uint8Array>({
      async pull(controller) {
        for (;;) {
          while (buffered.length >= 4) {
            const total = new DataView(buffered.buffer, buffered.byteOffset, buffered.byteLength).getUint32(0);
            if (buffered.length < total) break;
            const message = buffered.slice(0, total);
            buffered = buffered.slice(total);
            if (eventType(message) === "message_stop") {
              controller.enqueue(message.slice(0, Math.floor(total / 2)));
              controller.close();
              await reader.cancel();
              return;
            }
            controller.enqueue(message);
          }
          const { done, value } = await reader.read();
          if (done) return controller.close();
          const joined = new Uint8Array(buffered.length + value.length);
          joined.set(buffered);
          joined.set(value, buffered.length);
          buffered = joined;
        }
      },
    });
    return new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
}

export async function setup(
  provider: MockProvider,
  options: {
    guarded: boolean;
    latencyMs?: number;
    runner?: Partial<ConversationRunnerOptions>;
    result?: (paymentId: string) => unknown;
    ledger?: Ledger;
    store?: ConversationStore;
  },
) {
  const downstream = await paymentsDownstream(options.latencyMs ?? 50, options.result ? { result: options.result } : {});
  servers.push(downstream.server);
  const ledger: Ledger & { size?: number } = options.ledger ?? new MemoryLedger();
  const dispatcher: CallDispatcher = options.guarded
    ? new Dispatcher({ tools: downstream.tools, ledger, waitMs: 10_000, pollMs: 5 })
    : new UnguardedDispatcher(downstream.tools);
  const store = options.store ?? new MemoryConversationStore();
  const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test-key", maxRetries: 0 });
  /** The options `runner` was built with. */
  const runnerOptions: ConversationRunnerOptions = {
    client,
    dispatcher,
    store,
    model: "claude-test",
    tools: downstream.tools.providerSchemas(),
    retry: { backoffMs: () => 10 },
    ...options.runner,
  };
  const runner = new ConversationRunner(runnerOptions);
  /** Another worker process over the same ledger and conversation store (its own runner). */
  const worker = (extra: Partial<ConversationRunnerOptions> = {}) => new ConversationRunner({ ...runnerOptions, ...extra });
  return { ...downstream, ledger, store, runner, runnerOptions, client, dispatcher, worker };
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
 * The runner's events (pass `onEvent` as the runner's) and the calls resolved so far, by id, for
 * a cut gate to wait on. toolu_ ids are fresh per response, so a held response's own calls name
 * exactly the dispatch its cut means.
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
 * message_stop only guessed that the payment had finished, and loses the guess on a loaded host
 * (the position reads during_dispatch). `hold(info)` is the fault a plan returns for a request:
 * the stream pauses where message_stop goes, and once every tool_use the held response made has
 * resolved (as `log` saw it) it is cut with `kind`. A gate that cannot finish still cuts, so the
 * send ends, and `checkCutGates()` (after each test) fails the test with why.
 */
export function cutAfterDispatch(provider: MockProvider, log: RunnerEventLog, kind: CutKind = "reset") {
  const gate = async (requestNumber: number) => {
    const pending = { requestNumber, test: expect.getState().currentTestName ?? "(no test)", reported: false };
    pendingGates.add(pending);
    const fail = (error: unknown) => {
      if (!pending.reported) gateFailures.push(`${pending.test}: request ${requestNumber}: ${String(error)}`);
    };
    try {
      await provider.waitForHold(requestNumber, { timeoutMs: GATE_TIMEOUT_MS });
      const calls = provider.requests.find((r) => r.requestNumber === requestNumber)?.toolUses.map((t) => t.id) ?? [];
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
      return { kind: "hold", at: { beforeMessageStop: true } };
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
