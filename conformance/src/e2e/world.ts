import Anthropic from "@anthropic-ai/sdk";
import {
  ConversationRunner,
  MemoryConversationStore,
  type RunnerEvent,
  type SendResult,
} from "@dispatch-once/anthropic";
import {
  Dispatcher,
  ToolError,
  ToolRegistry,
  defineTool,
  type CallDispatcher,
  type Ledger,
  type ToolDefinition,
} from "@dispatch-once/core";
import {
  PaymentsError,
  DISPOSITION_BY_OUTCOME,
  startMockPayments,
  type FaultSpec,
  type MockPaymentsServer,
  type PaymentsClient,
} from "@dispatch-once/mock-payments";
import {
  startMockProvider,
  toolUse,
  turn,
  scriptFromPlans,
  type Fault,
  type FaultPosition,
  type MockProvider,
} from "@dispatch-once/mock-provider";
import { z } from "zod";
import type { MessagePlan, Scenario, StreamCut } from "./scenario.js";

/** The servers one property run shares across its cases; each case gets its own account and ledger namespace. */
export interface World {
  provider: MockProvider;
  payments: MockPaymentsServer;
  close(): Promise<void>;
}

export async function startWorld(): Promise<World> {
  const provider = await startMockProvider({});
  const payments = await startMockPayments({});
  return {
    provider,
    payments,
    close: async () => {
      await provider.close();
      await payments.close();
    },
  };
}

/** One line of the readable timeline a counterexample prints. */
export interface TimelineEntry {
  at: number;
  who: string;
  what: string;
}

/** A worker "process": its own SDK client, dispatcher and ledger instance; it can die mid-dispatch. */
export interface Worker {
  name: string;
  runner: ConversationRunner;
  dead: boolean;
  /** Rejects with DIED when the worker dies, so whoever waits on it stops waiting. */
  died: Promise<never>;
  kill(): void;
}

export const DIED = Symbol("died");

function mortalWorker(name: string): Worker {
  let kill!: () => void;
  const died = new Promise<never>((_, reject) => {
    kill = () => reject(DIED);
  });
  died.catch(() => {});
  const worker: Worker = {
    name,
    runner: undefined as never,
    dead: false,
    died,
    kill: () => {
      worker.dead = true;
      kill();
    },
  };
  return worker;
}

export interface CaseContext {
  scenario: Scenario;
  account: string;
  client: PaymentsClient;
  store: MemoryConversationStore;
  timeline: TimelineEntry[];
  /** Every SendResult and TurnFailedError, per conversation and message. */
  outcomes: { conversation: string; message: string; worker: string; result?: SendResult; error?: unknown }[];
  /** Runner events of every worker. */
  events: (RunnerEvent & { worker: string })[];
  /** Downstream faults still to apply, by a signature of the call's arguments. */
  pendingDownstream: Map<string, FaultSpec["outcome"]>;
  /** Deaths still to happen, by the same signature. */
  pendingDeaths: Map<string, MessagePlan["death"] & {}>;
  started: number;
}

const NEVER = new Promise<never>(() => {});

export function argsSignature(tool: string, args: Record<string, unknown>): string {
  return `${tool}:${JSON.stringify(Object.keys(args).sort().map((k) => [k, args[k]]))}`;
}

/** Maps the payments client's classification onto the dispatcher's failure dispositions (LEDGER-8). */
function classify(error: unknown): never {
  if (error instanceof PaymentsError) {
    throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code });
  }
  throw error; // unknown outcome
}

function tools(ctx: CaseContext, worker: () => Worker): ToolDefinition<any, any>[] {
  const { client } = ctx;
  // Applies the planned death or downstream fault of this call, once, on its first execution.
  const hooks = (signature: string) => {
    const death = ctx.pendingDeaths.get(signature);
    const fault = ctx.pendingDownstream.get(signature);
    ctx.pendingDownstream.delete(signature);
    if (death) ctx.pendingDeaths.delete(signature);
    return { death: death?.when, fault };
  };
  // A death stops the worker where it stands: its later ledger calls never return, its claim stays
  // in flight until the lease lapses. Throwing (rather than hanging) ends the renewal timer, as a real
  // death would.
  const die = async (w: Worker, what: string): Promise<never> => {
    w.kill();
    ctx.timeline.push({ at: Date.now() - ctx.started, who: w.name, what: `DIES ${what}` });
    throw new Error(`worker ${w.name} died`);
  };
  return [
    defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), reference: z.string(), memo: z.string() }),
      identity: ["payee", "amount", "currency", "reference"],
      async run(args, { idempotencyKey }) {
        const w = worker();
        const { death, fault } = hooks(argsSignature("send_payment", args));
        if (death === "before_downstream") return die(w, "before calling the payments API");
        let payment;
        try {
          payment = await client.createPayment(args, { idempotencyKey, ...(fault ? { fault: { outcome: fault } } : {}) });
        } catch (error) {
          classify(error);
        }
        if (death === "after_response_before_complete") return die(w, "after the payment was accepted, before the ledger completed");
        return { paymentId: payment.body.id, status: payment.body.status };
      },
    }),
    defineTool({
      name: "void_payment",
      effect: "keyed_write",
      input: z.object({ reference: z.string() }),
      async run(args, { idempotencyKey }) {
        const w = worker();
        const { death, fault } = hooks(argsSignature("void_payment", args));
        if (death === "before_downstream") return die(w, "before voiding");
        let voided;
        try {
          const list = await client.listPayments();
          const target = list.body.data.find((p) => p.reference === args.reference && p.status !== "voided");
          if (target === undefined) throw new ToolError(`no open payment with reference ${args.reference}`, { disposition: "definite", code: "no_such_payment" });
          voided = await client.voidPayment(target.id, { idempotencyKey, ...(fault ? { fault: { outcome: fault } } : {}) });
        } catch (error) {
          if (error instanceof ToolError) throw error;
          classify(error);
        }
        if (death === "after_response_before_complete") return die(w, "after the void was accepted, before the ledger completed");
        return { paymentId: voided.body.id, status: voided.body.status };
      },
    }),
    defineTool({
      name: "create_invoice",
      // The internal API that deduplicates nothing: the ledger is the only guard (EFFECT-4).
      effect: "unkeyed_write",
      input: z.object({ customer: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string() }),
      async run(args) {
        const w = worker();
        const { death, fault } = hooks(argsSignature("create_invoice", args));
        if (death === "before_downstream") return die(w, "before creating the invoice");
        let invoice;
        try {
          invoice = await client.createInvoice(args, fault ? { fault: { outcome: fault } } : {});
        } catch (error) {
          classify(error);
        }
        if (death === "after_response_before_complete") return die(w, "after the invoice was created, before the ledger completed");
        return { invoiceId: invoice.body.id };
      },
    }),
    defineTool({
      name: "search_payments",
      effect: "read",
      input: z.object({}),
      async run() {
        const list = await client.listPayments();
        return { count: list.body.data.length };
      },
    }),
  ];
}

/** A ledger as seen by a worker that may die: once dead, none of its calls ever return (LEDGER-6/7 territory). */
function mortal(ledger: Ledger, isDead: () => boolean): Ledger {
  const guard =
    <A extends unknown[], R>(f: (...args: A) => Promise<R>) =>
    (...args: A): Promise<R> =>
      isDead() ? NEVER : f(...args).then((r) => (isDead() ? NEVER : r));
  return {
    capabilities: ledger.capabilities,
    claim: guard((r) => ledger.claim(r)),
    renew: guard((k, f, l) => ledger.renew(k, f, l)),
    complete: guard((k, f, r) => ledger.complete(k, f, r)),
    fail: guard((k, f, e) => ledger.fail(k, f, e)),
    markUnknown: guard((k, f, r) => ledger.markUnknown(k, f, r)),
    release: guard((k, f) => ledger.release(k, f)),
    lookup: (k) => ledger.lookup(k),
    sweep: () => ledger.sweep(),
    close: () => ledger.close(),
  };
}

export interface WorkerFactoryOptions {
  /** Make a ledger instance for a new worker (a second view of the same namespace). */
  ledger: () => Promise<Ledger>;
  /** Build the dispatcher; the default is the real one. Tests of the kit pass broken ones. */
  dispatcher?: (tools: ToolDefinition<any, any>[], ledger: Ledger) => CallDispatcher;
  leaseMs: number;
}

export async function newWorker(
  world: World,
  ctx: CaseContext,
  name: string,
  options: WorkerFactoryOptions,
  attempts = 3,
): Promise<Worker> {
  const self = mortalWorker(name);
  const ledger = mortal(await options.ledger(), () => self.dead);
  const toolList = tools(ctx, () => self);
  const dispatcher =
    options.dispatcher?.(toolList, ledger) ??
    new Dispatcher({
      tools: new ToolRegistry(toolList),
      ledger,
      leaseMs: options.leaseMs,
      // Long enough to outlive a dead worker's lease, so waiters see it expire (LEDGER-7).
      waitMs: options.leaseMs * 6,
      pollMs: 2,
      maxPollMs: 20,
      // The kit never loses acknowledged rows, so a volatile ledger is fine for unkeyed writes here.
      allowVolatileLedgerForUnkeyedWrites: true,
      logger: { warn: () => {} },
    });
  self.runner = new ConversationRunner({
    client: new Anthropic({ baseURL: world.provider.baseURL, apiKey: "conformance", maxRetries: 0 }),
    dispatcher,
    store: ctx.store,
    model: "claude-conformance",
    tools: new ToolRegistry(toolList.map((t) => ({ ...t, run: () => null }))).providerSchemas(),
    retry: { attempts, backoffMs: () => 2 },
    onEvent: (event) => {
      ctx.events.push({ ...event, worker: name });
      const detail =
        event.type === "attempt_started"
          ? `turn ${event.turnIndex} attempt ${event.attempt} requested`
          : event.type === "call_complete"
            ? `${event.name} arguments complete (${event.callId}): dispatching`
            : event.type === "stream_failed"
          ? `stream failed (${event.position}): ${event.error}`
          : event.type === "call_resolved"
            ? `${event.name} ${event.ok ? (event.replayed ? "replayed from the ledger" : "ran") : `failed: ${event.error}`}`
            : event.type === "call_abandoned"
              ? `${event.name} abandoned (arguments: ${JSON.stringify(event.partialArguments)})`
              : event.type === "turn_committed"
                ? `turn ${event.turnIndex} ${event.committed ? "committed" : "lost the commit race"}`
                : event.type === "turn_failed"
                  ? `turn ${event.turnIndex} failed (${event.record.position})`
                  : undefined;

      if (detail !== undefined) ctx.timeline.push({ at: event.at - ctx.started, who: name, what: `${event.conversationId} ${detail}` });
    },
  });
  return self;
}

function toPosition(cut: StreamCut): FaultPosition {
  switch (cut.at) {
    case "event":
      return { event: cut.event };
    case "arguments":
      return { toolUse: cut.toolUse, afterFragment: cut.afterFragment };
    case "after_call":
      return { afterToolUseStop: cut.toolUse };
    case "before_message_stop":
      return { beforeMessageStop: true };
  }
}

/** Program the provider for this case: one plan per message text, cuts by request attempt. */
export function programProvider(world: World, scenario: Scenario, account: string): void {
  const plans: Record<string, ReturnType<typeof turn>> = {};
  const cuts = new Map<string, StreamCut[]>();
  for (const conversation of scenario.conversations) {
    for (const message of conversation.messages) {
      const text = `${account} ${message.text}`;
      plans[text] = turn(...message.calls.map((c) => toolUse(c.tool, c.args, c.tool === "send_payment" ? { reword: ["memo"] } : {})));
      cuts.set(text, message.cuts);
    }
  }
  world.provider.setScript(scriptFromPlans(plans));
  world.provider.setFaultPlan((request, info) => {
    // Faults apply to the request whose last message is the user's text: the tool turn.
    const last = request.messages[request.messages.length - 1];
    const text = typeof last?.content === "string" ? last.content : undefined;
    const planned = text === undefined ? undefined : cuts.get(text)?.[info.attempt - 1];
    if (planned === undefined) return undefined;
    const fault: Fault =
      planned.kind === "error_event"
        ? { kind: "error_event", at: toPosition(planned) }
        : { kind: planned.kind, at: toPosition(planned) };
    return fault;
  });
}

/** Runs one message by its replay route; never throws (outcomes are recorded for the oracle). */
export async function runMessage(
  ctx: CaseContext,
  conversationId: string,
  message: MessagePlan,
  spawn: (name: string, attempts?: number) => Promise<Worker>,
  primary: Worker,
): Promise<void> {
  const content = `${ctx.account} ${message.text}`;
  const id = `${conversationId}:${message.text}`;
  const send = async (w: Worker) => {
    try {
      const result = await Promise.race([w.runner.send(conversationId, { id, content }), w.died]);
      ctx.outcomes.push({ conversation: conversationId, message: message.text, worker: w.name, result });
    } catch (error) {
      if (error === DIED) return;
      ctx.outcomes.push({ conversation: conversationId, message: message.text, worker: w.name, error });
    }
  };
  switch (message.route) {
    case "automatic_retry":
      await send(primary);
      break;
    case "client_resend":
      // No automatic retry: the client's own re-send below is the replay route.
      await send(await spawn(`${primary.name}/no-retry`, 1));
      break;
    case "queue_redelivery":
      await Promise.all([send(primary), spawn(`${primary.name}'`).then(send)]);
      break;
    case "double_send":
      await Promise.all([send(primary), new Promise((r) => setTimeout(r, 1)).then(() => send(primary))]);
      break;
  }
  // The client (or the queue) tries again while the message is unanswered: a dead worker's
  // message is redelivered to a fresh one, a failed turn is re-sent (TURN-2).
  for (let resend = 0; resend < 3; resend++) {
    const snapshot = await ctx.store.load(conversationId);
    if (snapshot.pendingMessageId !== id) return;
    const alive = primary.dead ? await spawn(`${primary.name}+${resend}`) : primary;
    ctx.timeline.push({ at: Date.now() - ctx.started, who: alive.name, what: `${conversationId} re-sends ${JSON.stringify(message.text)}` });
    await send(alive);
  }
}

