// A LangGraph.js payments agent whose tool effects go through @dispatch-once/core's Dispatcher.
//
// Graph: START -> agent (ChatAnthropic) -> tools (our node, not prebuilt ToolNode) -> agent ... -> END.
// State is checkpointed in PostgreSQL (PostgresSaver); the ledger is ledger-postgres in the same database.
import pg from "pg";
import { ChatAnthropic } from "@langchain/anthropic";
import { AIMessage, HumanMessage, ToolMessage, type BaseMessage } from "@langchain/core/messages";
import type { RunnableConfig } from "@langchain/core/runnables";
import { Annotation, END, MessagesAnnotation, START, StateGraph, getConfig, getCurrentTaskInput, interrupt } from "@langchain/langgraph";
import { ToolNode } from "@langchain/langgraph/prebuilt";
import { tool } from "@langchain/core/tools";
import { PostgresSaver } from "@langchain/langgraph-checkpoint-postgres";
import {
  Dispatcher,
  ToolRegistry,
  UnguardedDispatcher,
  catalogueEntry,
  effectOf,
  isDispatchOnceError,
  retryableOf,
  type CallDispatcher,
  type DispatchOutcome,
} from "@dispatch-once/core";
import { createPostgresLedger } from "@dispatch-once/ledger-postgres";
import { PostgresThreadLocks } from "@dispatch-once/thread-lock-postgres";
import { commitAssistantMessage, createOnceToolsNode, onceRetryOn, onceTurns, type OnceToolArtifact } from "@dispatch-once/langgraph";
import { paymentTools } from "./tools.js";

/** What the user is told about one effect (a write call). */
export interface Told {
  callId: string;
  tool: string;
  status: "happened" | "did_not_happen" | "may_have_happened";
  paymentId?: string;
  key?: string;
  text: string;
}

export const GraphState = Annotation.Root({
  ...MessagesAnnotation.spec,
  // What each write call's outcome told the user; committed with the tools node's messages.
  told: Annotation<Told[]>({ reducer: (a, b) => [...a, ...b], default: () => [] }),
  // Assistant turns committed on this thread; written only by the agent node, with its message
  // (@dispatch-once/langgraph's counter channel; the app's own `turns` before the package).
  onceTurns,
});
type State = typeof GraphState.State;

/**
 * The oracle's checks: "unguarded" is core's UnguardedDispatcher (keyed by the tool_call id), "random"
 * the same without the id (a fresh key per run), "per-call" core's Dispatcher with a new dispatch
 * context for every call, as core's README example onToolCall made one (identical calls share ordinal 0),
 * "count-ai" the turn index counted from the AIMessages in `messages`, "no-stop-check" the agent node
 * without its check that the model's response ended with a stop reason, "toolnode" LangGraph's prebuilt
 * ToolNode over LangChain tools that each dispatch their call (a context per call, errors as ToolMessages).
 */
export type Plant = "none" | "unguarded" | "random" | "per-call" | "count-ai" | "no-stop-check" | "toolnode" | ThreadPlant;
/**
 * The thread lock's checks: "no-thread-lock" runs a thread's messages as they come (LangGraph's own
 * behaviour); "lock-unfenced" holds the lock on its own session but writes the checkpoints over the
 * shared pool; "lock-no-expiry" never lets a silent holder's lock go (no idle_session_timeout).
 */
export type ThreadPlant = "no-thread-lock" | "lock-unfenced" | "lock-no-expiry";

export interface AppOptions {
  databaseUrl: string;
  schema: string;
  paymentsUrl: string;
  providerUrl: string;
  plant?: Plant;
  owner?: string;
  /** LangGraph's checkpoint durability for send(): "async" (its default), "sync" or "exit". */
  durability?: "async" | "sync" | "exit";
  /** Core's default when absent (30 000); the trial's runs pass 3 000. */
  leaseMs?: number;
  /** Core's default when absent (10 000); the trial's runs pass 8 000. */
  waitMs?: number;
  /** A thread lock's holder silent this long loses the lock (the server ends its session). Default 30 000. */
  threadLeaseMs?: number;
  /** How long a send waits for a thread another send holds before ConversationBusyError. Default 60 000. */
  threadWaitMs?: number;
}

/**
 * Turn index (spec TURN-1: the number of assistant turns committed before this one). The agent node
 * commits `onceTurns + 1` in the same step as its AIMessage (`commitAssistantMessage`), so the tools
 * node reads `onceTurns - 1` (the package's default): stable across every re-run of the tools node
 * (interrupt, retry, restart) and of the agent node (a cut stream, a regenerate forked from the
 * checkpoint before it), and never lowered by trimming `messages`. PLANT=count-ai counts the
 * AIMessages in `messages` instead, which trimming lowers.
 */
export function turnIndexOf(state: State, plant: Plant): number {
  if (plant === "count-ai") return state.messages.filter((m) => AIMessage.isInstance(m)).length - 1;
  return state.onceTurns - 1;
}

/**
 * The oracle's dispatcher plants, as wrappers the package's tools node is given: "random" dispatches
 * without the call id (UnguardedDispatcher then makes a fresh key per run); "per-call" makes a new
 * dispatch context for every call (identical calls share ordinal 0).
 */
function plantedDispatcher(dispatcher: CallDispatcher, plant: Plant): CallDispatcher {
  if (plant === "random") return { turn: (context) => { const turn = dispatcher.turn(context); return { dispatch: (call) => turn.dispatch({ name: call.name, input: call.input }) }; } };
  if (plant === "per-call") return { turn: (context) => ({ dispatch: (call, options) => dispatcher.turn(context).dispatch(call, options) }) };
  return dispatcher;
}

export async function openApp(options: AppOptions) {
  const pool = new pg.Pool({ connectionString: options.databaseUrl, max: 8 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const ledger = createPostgresLedger({ pool, schema: options.schema, table: "ledger" });
  await ledger.migrate();
  const checkpointer = new PostgresSaver(pool, undefined, { schema: `${options.schema}_cp` });
  await checkpointer.setup();

  const registry = new ToolRegistry([...paymentTools(options.paymentsUrl)]);
  const plant = options.plant ?? "none";
  const dispatcher: CallDispatcher =
    plant !== "unguarded" && plant !== "random"
      ? new Dispatcher({
          tools: registry,
          ledger,
          owner: options.owner ?? `langgraph-${process.pid}`,
          // A short lease: a process killed while paying holds the claim until it expires, and the
          // thread's next run waits that long (or is told in_flight_elsewhere). Core's defaults: 30 s / 10 s.
          ...(options.leaseMs === undefined ? {} : { leaseMs: options.leaseMs }),
          ...(options.waitMs === undefined ? {} : { waitMs: options.waitMs }),
          // Warnings (a call twice in one turn, a re-worded memo) kept out of the verdict; what the
          // user is told comes from the outcomes. Give a real app's logger here.
          logger: { warn: () => {} },
        })
      : new UnguardedDispatcher(registry);

  const model = new ChatAnthropic({
    model: "claude-sonnet-4-5",
    apiKey: "test",
    anthropicApiUrl: options.providerUrl,
    streaming: true,
    maxRetries: 0, // the graph's retry policy retries the model node instead
  }).bindTools(registry.providerSchemas() as never);

  async function agent(state: State) {
    const response = await model.invoke(state.messages);
    // A stream cut before message_stop must not become a committed assistant turn whose calls run (STREAM-1).
    // ChatAnthropic (1.5.11, streaming) returns a cut stream as a normal AIMessage, its calls' arguments
    // parsed from whatever JSON arrived; only the missing stop_reason tells (FRICTION 2). The package's
    // commitAssistantMessage throws stream_incomplete then, and commits onceTurns + 1 with the message.
    if (plant === "no-stop-check") return { messages: [response], onceTurns: state.onceTurns + 1 };
    return commitAssistantMessage(state, response);
  }

  // The package's tools node (FRICTION 3, 4: what this app wrote by hand, packaged). The plants swap
  // its dispatcher or its turn index; "no-stop-check" also removes its own check of the stop reason.
  const onceTools = createOnceToolsNode({
    dispatcher: plantedDispatcher(dispatcher, plant),
    ...(plant === "count-ai" ? { turnIndexOf: (state) => turnIndexOf(state as State, plant) } : {}),
    ...(plant === "no-stop-check" ? { stopReasonOf: () => "not checked (PLANT=no-stop-check)" } : {}),
  });

  async function tools(state: State, config: RunnableConfig) {
    const threadId = String(config.configurable?.thread_id);
    const approval = config.configurable?.approval as "before" | "after" | undefined;
    const last = state.messages.at(-1);
    if (last === undefined || !AIMessage.isInstance(last)) throw new Error("tools node without an assistant message");
    const calls = last.tool_calls ?? [];
    if (approval === "before") {
      const answer = interrupt({ question: "approve these payments?", calls: calls.map((c) => c.args) });
      if (answer !== "yes") {
        return {
          messages: calls.map((c) => new ToolMessage({ tool_call_id: c.id ?? "", content: "not approved", status: "error" })),
          told: calls.filter((c) => c.name !== "check_balance").map((c) => ({ callId: c.id ?? "", tool: c.name, status: "did_not_happen" as const, text: "not approved: not paid" })),
        };
      }
    }
    // One dispatch context per run, the calls in order; re-sendable errors thrown to the retry policy,
    // an effect that may have happened thrown for a person; a refusal (effect "no") an error ToolMessage.
    const { messages } = await onceTools(state, config);
    const told: Told[] = messages.flatMap((m) => {
      const answer = (m.artifact as OnceToolArtifact).dispatchOnce;
      if (answer.effect === "read") return [];
      if ("refused" in answer) return [{ callId: m.tool_call_id, tool: answer.toolName, status: "did_not_happen" as const, text: `${answer.toolName} did not happen (${answer.refused})` }];
      return [tellOutcome(m.tool_call_id, answer, JSON.parse(String(m.content)) as { id?: string })];
    });
    if (approval === "after") {
      // The trap the LangGraph docs warn of: everything above runs again on resume.
      // Tell the user now what the payments did: if they never answer, the node's return is never committed.
      interrupt({ question: "send the receipt by e-mail?", told });
    }
    return { messages, told };
  }

  // PLANT=toolnode: what a team reaching for the prebuilt ToolNode writes. Each tool dispatches its own
  // call; ToolNode runs them in parallel and turns a thrown error into a ToolMessage (handleToolErrors).
  const lcTools = registry.providerSchemas().map((schema) =>
    tool(
      async (input: unknown, runtime: { toolCall?: { id?: string } }) => {
        const state = getCurrentTaskInput<State>();
        const outcome = await dispatcher
          .turn({ conversationId: String(getConfig()?.configurable?.thread_id), turnIndex: turnIndexOf(state, plant) })
          .dispatch({ name: schema.name, input, callId: runtime.toolCall?.id ?? "" });
        return outcome.resultJson;
      },
      { name: schema.name, description: schema.description ?? schema.name, schema: schema.input_schema as never },
    ),
  );
  const toolNode = new ToolNode(lcTools);
  async function prebuiltTools(state: State, config: RunnableConfig) {
    const result = (await toolNode.invoke(state, config)) as { messages: ToolMessage[] };
    // What the user reads: the model's answer quotes each result or error (a recorded failure: not done;
    // any other error: may have happened). This variant has no approval step (1a, 1b).
    const told: Told[] = result.messages
      .filter((m) => m.name === "send_payment")
      .map((m) => {
        const id = /"id":"(pay_[0-9a-f]+)"/.exec(String(m.content))?.[1];
        return id
          ? { callId: m.tool_call_id, tool: "send_payment", status: "happened" as const, paymentId: id, text: `send_payment: ${id}` }
          : { callId: m.tool_call_id, tool: "send_payment", status: /^Error: tool failed/.test(String(m.content)) ? ("did_not_happen" as const) : ("may_have_happened" as const), text: `send_payment: ${String(m.content).slice(0, 120)}` };
      });
    return { messages: result.messages, told };
  }

  // onceRetryOn: re-sendable errors and a cut stream are retried; a final stop or an effect that
  // needs a person is not (the ledger would answer it the same way on every attempt).
  const retryPolicy = { maxAttempts: 3, initialInterval: 50, jitter: false, logWarning: false, retryOn: onceRetryOn };
  const builder = new StateGraph(GraphState)
    .addNode("agent", agent, { retryPolicy })
    .addNode("tools", plant === "toolnode" ? prebuiltTools : tools, { retryPolicy })
    .addEdge(START, "agent")
    .addConditionalEdges("agent", (s: State) => ((s.messages.at(-1) as AIMessage | undefined)?.tool_calls?.length ? "tools" : END), ["tools", END])
    .addEdge("tools", "agent");
  const graph = builder.compile({ checkpointer });
  type Graph = typeof graph;

  if (plant === "lock-no-expiry") {
    // The package always sets idle_session_timeout and sends a heartbeat (THREAD-2): an app cannot build
    // a lock that a stopped holder keeps for ever through its API.
    throw new Error("PLANT=lock-no-expiry cannot be built with @dispatch-once/thread-lock-postgres: its lock always expires (THREAD-2)");
  }
  /**
   * Runs `work` holding the thread's lock: a thread answers its messages one at a time (TURN-9, TURN-10).
   * LangGraph has no turn lease: two different messages run at once both read `turns` from the same
   * checkpoint, both pay under one turn index, and both commit, as two branches of which getState shows one.
   * The lock is @dispatch-once/thread-lock-postgres (FRICTION 11: what this app built by hand, packaged):
   * a session advisory lock on a connection of its own, which a stopped holder loses after threadLeaseMs;
   * the graph `work` is given writes its checkpoints over that same session (`held.pool`), so the lock
   * fences them. A sender that finds the lock held waits up to threadWaitMs, then ConversationBusyError;
   * a server that cannot be reached is StoreUnavailableError; both say "send the same message again".
   * The namespace is the checkpoint schema: two threads whose ids collide only wait for each other.
   */
  const threadLocks = new PostgresThreadLocks({
    connectionString: options.databaseUrl,
    namespace: `${options.schema}_cp`,
    leaseMs: options.threadLeaseMs ?? 30_000,
    waitMs: options.threadWaitMs ?? 60_000,
  });
  async function withThread<T>(threadId: string, work: (graph: Graph) => Promise<T>, messageId?: string): Promise<T> {
    if (plant === "no-thread-lock") return work(graph);
    return threadLocks.withThread(
      threadId,
      async (held) => {
        const saver = plant === "lock-unfenced" ? checkpointer : new PostgresSaver(held.pool as never, undefined, { schema: `${options.schema}_cp` });
        return work(builder.compile({ checkpointer: saver }));
      },
      messageId === undefined ? {} : { messageId },
    );
  }

  /**
   * Send a user message, idempotent on its id (minted by the client, sent again unchanged on a retry):
   * LangGraph appends every input, so without this a client's retry of a message that was answered
   * (its reply lost) is a new human message, a new turn index, and a second payment.
   */
  type Sent = { told: Told[]; answeredBefore: boolean; interrupted: unknown[] | undefined };
  async function send(threadId: string, messageId: string, text: string, extra: Record<string, unknown> = {}): Promise<Sent> {
    return withThread(threadId, (graph) => sendHolding(graph, threadId, messageId, text, extra), messageId);
  }
  async function sendHolding(graph: Graph, threadId: string, messageId: string, text: string, extra: Record<string, unknown>): Promise<Sent> {
    const config = { configurable: { thread_id: threadId, ...extra } };
    const current = await graph.getState(config);
    const messages = (current.values.messages ?? []) as BaseMessage[];
    const at = messages.findIndex((m) => m.id === messageId);
    // Unfinished: a step is due, or (durability "async", a process that died before the next checkpoint)
    // the last committed message is not a final answer. getState().next is then [] although the thread
    // is not done: the dead step's writes were saved as pending writes, so LangGraph lists no task.
    const last = messages.at(-1);
    const answered = last !== undefined && AIMessage.isInstance(last) && (last.tool_calls ?? []).length === 0;
    const pending = current.next.length > 0 || (messages.length > 0 && !answered);
    if (at >= 0 && !pending) return { told: toldAfter(current.values as State, at), answeredBefore: true, interrupted: undefined };
    // A step still to run (a process died, an interrupt waits) is resumed, never sent a second human
    // message: one after an assistant message whose calls have no results is refused by the Messages API.
    const input = pending ? null : { messages: [new HumanMessage({ id: messageId, content: text })] };
    const state = await graph.invoke(input, { ...config, ...(options.durability ? { durability: options.durability } : {}) });
    if (pending && at < 0 && state.messages.every((m) => m.id !== messageId) && !(state as { __interrupt__?: unknown[] }).__interrupt__) {
      return sendHolding(graph, threadId, messageId, text, extra); // the earlier message is answered now; this one next
    }
    const after = state.messages.findIndex((m) => m.id === messageId);
    return { told: toldAfter(state, after), answeredBefore: false, interrupted: (state as { __interrupt__?: unknown[] }).__interrupt__ };
  }

  return {
    graph,
    send,
    withThread,
    checkpointer,
    ledger,
    pool,
    async close() {
      await ledger.close();
      await pool.end();
    },
  };
}

/**
 * What the committed state tells of the write calls that answer the message at index `at`: those after it,
 * up to the thread's next user message (a re-send of an earlier message is not told a later one's payments).
 */
function toldAfter(state: State, at: number): Told[] {
  const rest = state.messages.slice(at + 1);
  const next = rest.findIndex((m) => HumanMessage.isInstance(m));
  const calls = new Set((next < 0 ? rest : rest.slice(0, next)).flatMap((m) => (AIMessage.isInstance(m) ? (m.tool_calls ?? []).map((c) => c.id) : [])));
  return state.told.filter((t) => calls.has(t.callId));
}

function tellOutcome(callId: string, outcome: Pick<DispatchOutcome, "toolName" | "key" | "replayed" | "storedRequest">, result: { id?: string }): Told {
  const request = (outcome.storedRequest ?? null) as { payee?: string; amount?: number } | null;
  const what = request ? ` (as first requested: ${request.payee} ${request.amount})` : "";
  return {
    callId,
    tool: outcome.toolName,
    status: "happened",
    ...(result.id ? { paymentId: result.id } : {}),
    key: outcome.key,
    text: `${outcome.toolName} happened: ${result.id ?? "?"}${what}${outcome.replayed ? " (answered from the ledger)" : ""}`,
  };
}

/** What the user is told when an invoke itself fails (the error escaped the graph). */
export function tellError(error: unknown): { status: Told["status"] | "unknown"; text: string } {
  const entry = catalogueEntry(error);
  if (entry === undefined) {
    const name = (error as Error)?.constructor?.name ?? "Error";
    return { status: "unknown", text: `not completed (${name}: ${(error as Error)?.message ?? String(error)}); send again to retry` };
  }
  const effect = effectOf(error);
  return {
    status: effect === "no" ? "did_not_happen" : "may_have_happened",
    text: `${entry.code}: ${effect === "no" ? "nothing happened" : "it may have happened"}; ${retryableOf(error) === "same_message" ? "send again to retry" : "a person must check"}`,
  };
}
