/**
 * A worker process of the fault suite: the real dispatcher over a real ledger, calling mock
 * payments. The parent sends it calls over IPC and may SIGKILL it at any moment; it answers each
 * call with what the dispatcher reported. Nothing here is trusted by the oracle except as "what
 * the worker reported": the effect log and the ledger rows are read by the parent.
 *
 * argv[2]: JSON WorkerConfig.
 */
import { Dispatcher, ToolError, catalogueEntry, defineTool, isDispatchOnceError, type Ledger } from "@dispatch-once/core";
import { appendFileSync } from "node:fs";
import { z } from "zod";
import type { Call, Report, WorkerConfig } from "./protocol.js";

const config = JSON.parse(process.argv[2]!) as WorkerConfig;
/** The store client's state, added to a failed report's message where the adapter exposes one. */
let poolState: (() => string) | undefined;

// Only the ledger this run needs is loaded: a worker's start-up is what a SIGKILL costs the run.
async function openLedger(): Promise<Ledger> {
  switch (config.store.kind) {
    case "sqlite": {
      const { SqliteLedger } = await import("@dispatch-once/ledger-sqlite");
      return new SqliteLedger({ path: config.store.path, busyTimeoutMs: config.store.busyTimeoutMs });
    }
    case "postgres": {
      const { PostgresLedger } = await import("@dispatch-once/ledger-postgres");
      const ledger = new PostgresLedger({ connectionString: config.store.url, schema: config.store.schema, timeoutMs: config.store.timeoutMs, durability: "durable" });
      // The ledger's own pool, read only to say its state in a failed report: a worker that cannot
      // reach the store after the faults says whether its pool was full, idle or waiting.
      const pool = (ledger as unknown as { ownedPool?: { totalCount: number; idleCount: number; waitingCount: number } }).ownedPool;
      if (pool !== undefined) poolState = () => `pool: ${pool.totalCount} clients, ${pool.idleCount} idle, ${pool.waitingCount} waiting`;
      return ledger;
    }
    case "redis": {
      const { RedisLedger } = await import("@dispatch-once/ledger-redis");
      return new RedisLedger({ url: config.store.url, prefix: config.store.prefix, commandTimeoutMs: config.store.timeoutMs, durability: "durable" });
    }
  }
}

/**
 * POST to mock payments with the call's Idempotency-Key (the unkeyed invoice API ignores it, but
 * its effect log records it: the oracle's join). A plain fetch rather than the package's client,
 * whose index also loads the server: a worker must start fast. Its answers, told as the client maps
 * them (DISPOSITION_BY_OUTCOME): 409 another request with the key is executing -> unknown; 422 the
 * key holds another request -> request_mismatch; other 4xx -> definite; 5xx or no answer -> unknown.
 */
async function post(path: string, body: Record<string, unknown>, key: string, signal: AbortSignal): Promise<{ id: string }> {
  const response = await fetch(`${config.paymentsUrl}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${config.account}`, "content-type": "application/json", "idempotency-key": `"${key}"` },
    body: JSON.stringify(body),
    signal: AbortSignal.any([signal, AbortSignal.timeout(5_000)]),
  });
  const text = await response.text();
  if (response.ok) return JSON.parse(text) as { id: string };
  const message = `${response.status} from ${path}: ${text.slice(0, 200)}`;
  if (response.status === 422) throw new ToolError(message, { disposition: "request_mismatch" });
  if (response.status >= 400 && response.status < 500 && response.status !== 409) throw new ToolError(message, { disposition: "definite" });
  throw new Error(message);
}

const pay = defineTool({
  name: "pay",
  effect: "keyed_write",
  input: z.object({ payee: z.string(), amount: z.number().int().positive(), reference: z.string() }),
  async run(args, ctx) {
    const payment = await post("/v1/payments", { ...args, currency: "EUR" }, ctx.idempotencyKey, ctx.signal);
    return { paymentId: payment.id };
  },
});

const invoice = defineTool({
  name: "invoice",
  effect: "unkeyed_write",
  input: z.object({ customer: z.string(), amount: z.number().int().positive() }),
  async run(args, ctx) {
    const created = await post("/v1/invoices", { ...args, currency: "EUR" }, ctx.idempotencyKey, ctx.signal);
    return { invoiceId: created.id };
  },
});

/**
 * FAULT_PLANT=ignore-claim-id: the ledger never sees the claim id (a ledger without LEDGER-26). The
 * suite must then find false unknowns; this is how it proves it can (see the README), never a default.
 */
function planted(ledger: Ledger): Ledger {
  if (process.env.FAULT_PLANT !== "ignore-claim-id") return ledger;
  return {
    get capabilities() {
      return ledger.capabilities;
    },
    claim: ({ claimId: _ignored, ...request }) => ledger.claim(request),
    renew: (key, fence, leaseMs) => ledger.renew(key, fence, leaseMs),
    complete: (key, fence, result) => ledger.complete(key, fence, result),
    fail: (key, fence, error) => ledger.fail(key, fence, error),
    markUnknown: (key, fence, reason) => ledger.markUnknown(key, fence, reason),
    release: (key, fence) => ledger.release(key, fence),
    lookup: (key) => ledger.lookup(key),
    sweep: () => ledger.sweep(),
    close: () => ledger.close(),
  };
}

/**
 * Every claim call in the trace: its claim id, when it was sent and when it was answered or failed.
 * The oracle needs it to tell a claimant that could not reach the store for its whole lease (the
 * row then expires by LEDGER-7, as a dead claimant's does) from a false unknown.
 */
function traced(ledger: Ledger): Ledger {
  const claim = ledger.claim.bind(ledger);
  ledger.claim = async (request) => {
    const sentAt = Date.now();
    const base = { type: "ledger_claim", key: request.key, claimId: request.claimId, sentAt };
    try {
      const answer = await claim(request);
      trace({ ...base, outcome: answer.outcome, fence: answer.outcome === "claimed" ? answer.fence : answer.row.fence });
      return answer;
    } catch (error) {
      trace({ ...base, error: isDispatchOnceError(error) ? error.code : String(error) });
      throw error;
    }
  };
  return ledger;
}

const dispatcher = new Dispatcher({
  tools: [pay, invoice],
  ledger: traced(planted(await openLedger())),
  owner: `worker-${config.id}`,
  leaseMs: config.leaseMs,
  waitMs: config.waitMs,
  claimRetryMs: config.claimRetryMs,
  // Every event and warning, with the worker and the time, for the oracle to quote: a violation
  // is diagnosed from what the dispatchers did with its key, not guessed at.
  onEvent: (event) => trace(event),
  logger: { warn: (message: string, fields?: Record<string, unknown>) => trace({ type: "warn", message, ...fields }) },
});

function trace(event: object): void {
  appendFileSync(config.tracePath, `${JSON.stringify({ at: Date.now(), worker: config.id, ...event })}\n`);
}

process.on("message", (message: Call) => {
  const turn = { conversationId: message.conversationId, turnIndex: message.turnIndex };
  dispatcher
    .dispatch({ name: message.tool, input: message.input }, turn)
    .then(
      (out): Report => ({ attempt: message.attempt, ok: true, key: out.key, resultJson: out.resultJson, replayed: out.replayed }),
      (error: unknown): Report => ({
        attempt: message.attempt,
        ok: false,
        key: dispatcher.keyFor({ name: message.tool, input: message.input }, turn),
        code: isDispatchOnceError(error) ? error.code : "thrown",
        message: `${error instanceof Error ? error.message : String(error)}${poolState !== undefined ? ` (${poolState()})` : ""}`,
        // What the report tells its caller about the effect (the catalogue's word, or the error's own).
        effect: isDispatchOnceError(error, "claim_released")
          ? (error as { effectMayHaveHappened?: boolean }).effectMayHaveHappened ? "possibly" : "no"
          : catalogueEntry(error)?.effect ?? "possibly",
      }),
    )
    .then((report) => process.send?.(report));
});

process.send?.({ ready: config.id });
