import { Agent } from "node:http";
import type Anthropic from "@anthropic-ai/sdk";
import {
  Dispatcher,
  ToolError,
  ToolRegistry,
  UnguardedDispatcher,
  defineTool,
  type CallDispatcher,
  type Ledger,
  type ToolRunContext,
} from "@dispatch-once/core";
import { MemoryConversationStore, type RunnerEvent } from "@dispatch-once/anthropic";
import { lastToolResults, lastUserText, say, toolUse, turn, type MockProvider, type Script, type Timing } from "@dispatch-once/mock-provider";
import {
  PaymentsError,
  DISPOSITION_BY_OUTCOME,
  createPaymentsClient,
  startMockPayments,
  type Effect,
  type MockPaymentsServer,
} from "@dispatch-once/mock-payments";
import { z } from "zod";
import type { OpenAIStream } from "./openai.js";
import { startAnthropicStream, type AnthropicStream, type DemoRunner, type RunnerOverrides, type StreamFaultPlan, type StreamSide } from "./streams.js";

export { MODEL } from "./streams.js";
export const PAYMENTS_ACCOUNT_TOKEN = "demo-account";

export interface PaymentArgs {
  payee: string;
  amount: number;
  currency: string;
  reference: string;
  memo: string;
}

/** What the user says: the scripted model answers it with exactly this send_payment call. */
export function paymentMessage(args: PaymentArgs): string {
  return `pay ${JSON.stringify(args)}`;
}

/**
 * The scripted model: a message "pay {...}" gets one send_payment call; the tool result gets a
 * one-line confirmation. A function of the request alone, so a replayed turn gets the same call
 * again. When `rewordsMemo(args)` is true, every response after the first to the same request
 * re-words the memo (the mock provider's `reword`), as a real model does on a retry.
 */
export function createPaymentScript(rewordsMemo: (args: PaymentArgs) => boolean = () => true): Script {
  return (request) => {
    const results = lastToolResults(request);
    if (results.length > 0) {
      return { content: [say(`Done: ${results.map((r) => r.content).join("; ")}`)], stopReason: "end_turn" };
    }
    const text = lastUserText(request);
    if (!text.startsWith("pay ")) return { content: [say("I can only send payments in this demo.")], stopReason: "end_turn" };
    const args = JSON.parse(text.slice(4)) as PaymentArgs;
    return turn(toolUse("send_payment", { ...args }, rewordsMemo(args) ? { reword: ["memo"] } : {}));
  };
}

/** The incident's model: a retried response always re-words the memo. */
export const paymentScript: Script = createPaymentScript();

/** Hooks the demo uses to observe the tool and, in the chaos run, to fix where a fault lands. */
export interface ToolHooks {
  /**
   * Before the POST: whether the payments API should lose this request's response after it
   * accepted it (mock payments `drop_after_accept`): the payment exists, the caller cannot know.
   */
  loseResponse?(args: PaymentArgs, context: ToolRunContext): boolean;
  /**
   * Called when the payments call has ended, answered (`paymentId`) or not (undefined: an error,
   * a lost response), before the tool returns or throws to the dispatcher.
   */
  afterPost?(args: PaymentArgs, context: ToolRunContext, paymentId: string | undefined): Promise<void> | void;
}

export interface SideOptions {
  guarded: boolean;
  /** The stream side: the Anthropic Messages API (default), the OpenAI Responses API or Chat Completions. */
  stream?: StreamSide;
  /** Required when guarded. */
  ledger?: Ledger;
  paymentsLatencyMs: number;
  providerTiming: Partial<Timing>;
  seed: string;
  pollMs?: number;
  hooks?: ToolHooks;
  onEffect?: (effect: Effect) => void;
  /** Whether the model re-words this payment's memo on a retried response (default: always). */
  rewordsMemo?: (args: PaymentArgs) => boolean;
  /**
   * What the tool tells the dispatcher when the payments API's response is lost. The truth, and
   * the default, is "unknown". The tests set "definite" or "not_performed" to build a tool that
   * lies, and check that the misreport oracle catches it.
   */
  lostResponseAs?: LostResponseDisposition;
}

export type LostResponseDisposition = "unknown" | "definite" | "not_performed";

/**
 * One side of the comparison: its own mock payments API (so its effect log counts only its
 * payments), its own mock provider, the send_payment tool, and a dispatcher, naive or guarded.
 */
export interface Side {
  guarded: boolean;
  payments: MockPaymentsServer;
  /** The stream side the side's runners talk to (its mock provider, SDK and runner). */
  stream: AnthropicStream | OpenAIStream;
  /** The Anthropic mock provider; a side on another stream has none (reading it throws). */
  provider: MockProvider;
  /** The Anthropic client; a side on another stream has none (reading it throws). */
  client: Anthropic;
  tools: ToolRegistry;
  dispatcher: CallDispatcher;
  /** POSTs the tool sent to the payments API, per payment reference. */
  posts: ReferenceCounts;
  /** POSTs whose response the payments API was told to lose after accepting them, per reference. */
  lostResponses: ReferenceCounts;
  /** POSTs the payments API answered from its Idempotency-Key store (`Idempotent-Replayed`), per reference. */
  downstreamReplays: ReferenceCounts;
  /**
   * Dispatches whose arguments differed from the first request outside the identity (a
   * re-worded memo) and were answered with the first request (LEDGER-21), per reference.
   */
  requestDiffers: ReferenceCounts;
  /** Per reference: model responses whose send_payment memo differs from what the script said. */
  rewordedResponses: Map<string, number>;
  /** Lost responses settled by the reconcile probe (the row completed from the payments API's lookup), by reference. */
  reconciled: ReferenceCounts;
  /** Dispatcher warnings that say something is off (a repeated call within one turn, ...). */
  warnings: string[];
  /** A runner over this side; every runner of a side shares its conversation store unless given one. */
  runner(options?: RunnerOverrides): DemoRunner;
  store: MemoryConversationStore;
  setFaultPlan(plan: StreamFaultPlan | undefined): void;
  /** Payments the downstream actually created, per reference: the first oracle. */
  paymentsByReference(): ReferenceCounts;
  /**
   * The payment_created effects of one reference, in log order (what the oracle reads of them).
   * Throws for a reference already settled: its effects are then only counted.
   */
  paymentsOf(reference: string): LoggedEffect[];
  /** The oracle has read this reference's effects (its message was audited): keep only their count (EffectIndex). */
  settle(reference: string): void;
  close(): Promise<void>;
}

const paymentInput = z.object({
  payee: z.string().min(1),
  amount: z.number().int().positive(),
  currency: z.string().regex(/^[A-Z]{3}$/),
  reference: z.string().min(1),
  memo: z.string().optional(),
});

/** The read-only tool the Chat Completions side's model calls after each payment (see openai.ts). */
export const CHECK_BALANCE = "check_balance";

/**
 * A read: no ledger row, run again by every attempt that dispatches it. The balance is a fixed
 * figure: the demo judges payments, and a read has no effect to count.
 */
const checkBalance = defineTool({
  name: CHECK_BALANCE,
  description: "The account's available balance in a currency, in minor units.",
  effect: "read",
  input: z.object({ currency: z.string().regex(/^[A-Z]{3}$/) }),
  run: async (args) => ({ currency: args.currency, available: 25_000_000 }),
});

/**
 * Payments, effects and fault decisions the mock payments API keeps in memory (the newest); the
 * demo indexes every effect itself as it happens (onEffect), so none of the oracle's input is lost.
 */
const PAYMENTS_MEMORY_LIMIT = 1_024;
/**
 * How long the mock payments API keeps a completed response replayable under its key. A key is
 * re-sent only while its message runs (retries, a reconcile lookup; at most seconds, 30 s in the
 * slowest anomaly path); the default 24 h kept every key of the run.
 */
const PAYMENTS_KEY_RETENTION_MS = 60_000;

/** The payments server's keep-alive timeout, far above the client agent's idle timeout. */
const PAYMENTS_KEEP_ALIVE_MS = 65_000;
const PAYMENTS_AGENT_IDLE_MS = 30_000;

/** What the oracle reads of a payment_created effect. */
export type LoggedEffect = Pick<Effect, "resourceId" | "idempotencyKey">;

export async function startSide(options: SideOptions): Promise<Side> {
  // Indexed as the effects happen: the oracle reads one reference at a time, thousands of times.
  // Only what it reads is kept (the effect's payload was most of an entry).
  const byReference = new EffectIndex();
  const payments = await startMockPayments({
    latencyMs: Math.round(options.paymentsLatencyMs),
    memoryLimit: PAYMENTS_MEMORY_LIMIT,
    retentionMs: PAYMENTS_KEY_RETENTION_MS,
    keepAliveTimeoutMs: PAYMENTS_KEEP_ALIVE_MS,
    onEffect: (effect) => {
      if (effect.kind === "payment_created") {
        const reference = String(effect.payload["reference"]);
        byReference.add(reference, { resourceId: effect.resourceId, idempotencyKey: effect.idempotencyKey });
      }
      options.onEffect?.(effect);
    },
  });
  // The tool's HTTP client is the tool author's choice: node:http over a keep-alive agent costs
  // about a third of fetch's CPU per request, with the same outcomes (a lost response is still
  // connection_lost, "unknown"). The model's streams keep the SDK over fetch: that is what the demo shows.
  // An idle socket must be dropped here before the server drops it: a request written on a
  // socket the server is closing is lost before it arrives, which the tool can only report as
  // "unknown"; the probe then finds nothing under the key, so the call is released and run again
  // (an extra POST, and on the client_resend route a turn told "may have happened"). With a
  // timeout set, the agent closes idle sockets at min(timeout, hint - 1 s); Node's default 5 s
  // server left a 1 s margin, which a stalled process overruns (its timers run before its I/O).
  // So the server keeps idle sockets 65 s and the agent drops them at 30 s.
  const paymentsAgent = new Agent({ keepAlive: true, timeout: PAYMENTS_AGENT_IDLE_MS });
  const paymentsClient = createPaymentsClient({ baseURL: payments.url, token: PAYMENTS_ACCOUNT_TOKEN, agent: paymentsAgent });
  const posts = new ReferenceCounts();
  const lostResponses = new ReferenceCounts();
  const downstreamReplays = new ReferenceCounts();
  const requestDiffers = new ReferenceCounts();
  /** Lost responses the reconcile probe settled from the payments API's key lookup, by reference. */
  const reconciled = new ReferenceCounts();
  const referenceOfKey = new Map<string, string>();
  const warnings: { message: string; key?: unknown }[] = [];
  const hooks = options.hooks;

  const sendPayment = defineTool({
    name: "send_payment",
    description: "Send a payment to a payee. Amount in minor units (cents).",
    effect: "keyed_write",
    input: paymentInput,
    // The memo is free text a retried response may re-word: it does not identify the payment.
    identity: ["payee", "amount", "currency", "reference"],
    async run(args, context) {
      posts.bump(args.reference);
      const lose = hooks?.loseResponse?.(args as PaymentArgs, context) ?? false;
      if (lose) lostResponses.bump(args.reference);
      let paymentId: string;
      try {
        // The key goes downstream as Idempotency-Key: the naive handler's is the toolu_ id.
        const response = await paymentsClient.createPayment(args, {
          idempotencyKey: context.idempotencyKey,
          ...(lose ? { fault: "drop_after_accept" as const } : {}),
        });
        paymentId = response.body.id;
        if (response.replayed) downstreamReplays.bump(args.reference);
      } catch (error) {
        await hooks?.afterPost?.(args as PaymentArgs, context, undefined);
        if (error instanceof PaymentsError) {
          // A lost response is "unknown"; a 422 "key reused with a different request" is
          // request_mismatch: never "did not happen".
          const disposition =
            error.outcome === "unknown" && options.lostResponseAs !== undefined ? options.lostResponseAs : DISPOSITION_BY_OUTCOME[error.outcome];
          throw new ToolError(error.message, { disposition, code: error.code, cause: error });
        }
        throw error; // not a payments answer at all: unknown outcome
      }
      await hooks?.afterPost?.(args as PaymentArgs, context, paymentId);
      return { paymentId, status: "accepted", amount: args.amount, currency: args.currency, payee: args.payee };
    },
    // After a lost response, ask the payments API what it holds under the key (RECON-1): a
    // stored 2xx is the payment, told as run would have told it; nothing stored is "not
    // performed" (the dispatcher trusts that only because the key guards the re-run).
    async reconcile(args, context) {
      // Named here, where the dispatcher reconciles, for its "reconciled" event (kept per key
      // until that event: only lost responses are ever reconciled).
      referenceOfKey.set(context.idempotencyKey, args.reference);
      const found = (await paymentsClient.lookupIdempotencyKey(context.idempotencyKey, { signal: context.signal })).body;
      if (found.state === "absent") return { outcome: "not_performed" };
      if (found.state === "in_flight") return { outcome: "unknown", reason: "the payments API is still processing the key" };
      const { status, body } = found.response;
      if (status < 200 || status >= 300 || typeof (body as { id?: unknown } | null)?.id !== "string") {
        return { outcome: "unknown", reason: `the key holds a ${status} response` };
      }
      const paymentId = (body as { id: string }).id;
      return { outcome: "performed", result: { paymentId, status: "accepted", amount: args.amount, currency: args.currency, payee: args.payee } };
    },
  });
  // The Chat Completions side's model checks the balance beside each payment (openai.ts says why).
  const tools = new ToolRegistry(options.stream === "openai-chat" ? [sendPayment, checkBalance] : [sendPayment]);

  let dispatcher: CallDispatcher;
  if (options.guarded) {
    if (options.ledger === undefined) throw new Error("a guarded side needs a ledger");
    dispatcher = new Dispatcher({
      tools,
      ledger: options.ledger,
      leaseMs: 30_000,
      waitMs: 30_000,
      pollMs: options.pollMs ?? 5,
      logger: { warn: (message, fields) => warnings.push({ message, key: fields?.["key"] }) },
      onEvent: (event) => {
        if (event.type === "reconciled") {
          const reference = referenceOfKey.get(event.key);
          referenceOfKey.delete(event.key);
          if (event.settled === "completed" && reference !== undefined) reconciled.bump(reference);
          return;
        }
        if (event.type !== "request_differs") return;
        // Expected whenever a retried response re-worded the memo: counted, not an anomaly. The
        // dispatcher warns right before it emits this event; that warning is taken back here.
        const last = warnings.at(-1);
        if (last !== undefined && last.key === event.key && last.message.includes("differ")) warnings.pop();
        const reference = (JSON.parse(event.stored) as { reference?: unknown }).reference;
        requestDiffers.bump(String(reference));
      },
    });
  } else {
    dispatcher = new UnguardedDispatcher(tools);
  }

  const store = new MemoryConversationStore();
  const world = { dispatcher, tools, store, seed: options.seed, timing: options.providerTiming, rewordsMemo: options.rewordsMemo ?? (() => true) };
  const stream: AnthropicStream | OpenAIStream =
    options.stream === "openai" || options.stream === "openai-chat"
      ? // Loaded only when used, as in incident.ts.
        await (await import("./openai.js")).startOpenAIChaosStream(world, options.stream === "openai-chat" ? "chat" : "responses")
      : await startAnthropicStream(world, options.rewordsMemo === undefined ? paymentScript : createPaymentScript(options.rewordsMemo));
  const anthropicOnly = <T>(what: string, value: (s: AnthropicStream) => T): T => {
    if (stream.kind !== "anthropic") throw new Error(`this demo side runs on the ${stream.kind} stream: it has no Anthropic ${what}`);
    return value(stream);
  };
  return {
    guarded: options.guarded,
    payments,
    stream,
    get provider() {
      return anthropicOnly("mock provider", (s) => s.mock);
    },
    get client() {
      return anthropicOnly("client", (s) => s.client);
    },
    tools,
    dispatcher,
    posts,
    lostResponses,
    downstreamReplays,
    requestDiffers,
    reconciled,
    rewordedResponses: stream.rewordedResponses,
    get warnings() {
      return warnings.map((w) => w.message);
    },
    store,
    runner: (overrides = {}) => stream.runner(overrides),
    setFaultPlan: (plan) => stream.setFaultPlan(plan),
    paymentsByReference: () => byReference.counts(),
    paymentsOf: (reference) => byReference.effectsOf(reference),
    settle: (reference) => byReference.settle(reference),
    async close() {
      await stream.close();
      await payments.close();
      paymentsAgent.destroy();
    },
  };
}

/** What the counts by reference are read through: a `Map<string, number>` is one too. */
export interface ReferenceCountsLike {
  get(reference: string): number | undefined;
}

/**
 * Counts by payment reference, in a few bytes each. The run's references are `<ROUTE>-<n>`
 * (T-0 .. T-<turns-1>, RS-<n>, RD-<n>): their counts live in one growable array per route,
 * indexed by n. A `Map` entry (key string, hash slot, boxed value) cost about 100 bytes a
 * reference, kept to the end of the run: a side's live heap grew with the run, and every full
 * collection marked all of it. Any other reference is counted in a Map.
 */
export class ReferenceCounts implements ReferenceCountsLike {
  private readonly dense = new Map<string, Uint16Array>();
  private readonly other = new Map<string, number>();

  get(reference: string): number | undefined {
    const slot = denseSlot(reference);
    if (slot === undefined) return this.other.get(reference);
    const n = this.dense.get(slot.route)?.[slot.index] ?? 0;
    // 0 is "never counted", as Map.get says undefined.
    return n === 0 ? this.other.get(reference) : n;
  }

  /** Adds one to a reference's count. */
  bump(reference: string): void {
    this.set(reference, (this.get(reference) ?? 0) + 1);
  }

  set(reference: string, count: number): void {
    const slot = denseSlot(reference);
    if (slot === undefined || count > 0xffff || count < 1) {
      this.other.set(reference, count);
      if (slot !== undefined) this.arrayFor(slot.route, slot.index)[slot.index] = 0;
      return;
    }
    this.arrayFor(slot.route, slot.index)[slot.index] = count;
    this.other.delete(reference);
  }

  /** Every counted reference and its count (for a caller that does not know the references). */
  *entries(): IterableIterator<[string, number]> {
    for (const [route, counts] of this.dense) {
      for (let i = 0; i < counts.length; i++) if (counts[i]! > 0) yield [`${route}-${i}`, counts[i]!];
    }
    yield* this.other;
  }

  private arrayFor(route: string, index: number): Uint16Array {
    let counts = this.dense.get(route);
    if (counts === undefined || counts.length <= index) {
      const grown = new Uint16Array(Math.max(1024, index + 1, (counts?.length ?? 0) * 2));
      if (counts !== undefined) grown.set(counts);
      this.dense.set(route, (counts = grown));
    }
    return counts;
  }
}

/** Largest n of `<ROUTE>-<n>` kept in an array: beyond it (not a run's message number) a Map. */
const DENSE_INDEX_LIMIT = 1 << 24;

function denseSlot(reference: string): { route: string; index: number } | undefined {
  const match = /^([A-Z]{1,4})-(0|[1-9]\d{0,7})$/.exec(reference);
  if (match === null) return undefined;
  const index = Number(match[2]);
  return index < DENSE_INDEX_LIMIT ? { route: match[1]!, index } : undefined;
}

/**
 * The payment_created effects of a side, by reference, as they happen: each one's payment id and
 * key until the oracle has read them (`settle`, once its message is audited), then only their
 * count, which the duplicate counts read at the end. A later effect on a settled reference is
 * still counted. Keeping every effect to the end cost about 200 bytes a turn and side; a Map
 * entry per reference for its count, about 100 more (ReferenceCounts).
 */
export class EffectIndex {
  private readonly unsettled = new Map<string, LoggedEffect[]>();
  private readonly counted = new ReferenceCounts();
  private readonly settled = new ReferenceCounts();

  add(reference: string, effect: LoggedEffect): void {
    this.counted.bump(reference);
    if (this.settled.get(reference) !== undefined) return;
    const kept = this.unsettled.get(reference);
    if (kept === undefined) this.unsettled.set(reference, [effect]);
    else kept.push(effect);
  }

  /** The effects of one reference, in log order; throws once it is settled (only its count is kept). */
  effectsOf(reference: string): LoggedEffect[] {
    if (this.settled.get(reference) !== undefined) throw new Error(`the effects of ${reference} were settled: only their count is kept`);
    return [...(this.unsettled.get(reference) ?? [])];
  }

  settle(reference: string): void {
    this.settled.set(reference, 1);
    this.unsettled.delete(reference);
  }

  /** Payments per reference, settled or not. */
  counts(): ReferenceCounts {
    return this.counted;
  }
}

/** Duplicates = payments beyond the first, summed over references (all counted ones if none are named). */
export function countDuplicates(
  counts: ReferenceCountsLike & { entries(): Iterable<[string, number]> },
  references?: Iterable<string>,
): { payments: number; duplicates: number; duplicatedReferences: string[] } {
  let payments = 0;
  let duplicates = 0;
  const duplicatedReferences: string[] = [];
  const keys = references ?? Array.from(counts.entries(), ([reference]) => reference);
  for (const reference of keys) {
    const n = counts.get(reference) ?? 0;
    payments += n;
    if (n > 1) {
      duplicates += n - 1;
      duplicatedReferences.push(reference);
    }
  }
  return { payments, duplicates, duplicatedReferences };
}

export type { RunnerEvent };
