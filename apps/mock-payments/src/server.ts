import { randomBytes } from "node:crypto";
import { STATUS_CODES, createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import type { Duplex } from "node:stream";
import express, { type NextFunction, type Request, type Response } from "express";
import { jsonBody } from "@dispatch-once/mock-http";
import type { z } from "zod";
import { fingerprint } from "./canonical.js";
import { MockPaymentsError } from "./errors.js";
import { FaultController, parseFaultHeader, type FaultDecision, type FaultState } from "./faults.js";
import { parseIdempotencyKey } from "./idempotency-key.js";
import { PROBLEM_CONTENT_TYPE, ProblemError, makeProblem, problemTypeUri, type Problem, type ProblemSlug } from "./problems.js";
import {
  createInvoiceBodySchema,
  createPaymentBodySchema,
  faultControlSchema,
  summarizeIssues,
  voidPaymentBodySchema,
  type FaultOutcome,
  type FaultPlan,
  type FaultSpec,
  type InjectedFault,
  type Invoice,
  type IdempotencyKeyLookup,
  type ListResponse,
  type Operation,
  type Payment,
} from "./schemas.js";
import { MemoryStore, matchesEffect, type Effect, type EffectFilter, type NewEffect, type Store, type StoredResponse } from "./store.js";

/**
 * A request as the route handlers read it, from express or from the plain server's hot route
 * (POST /v1/payments): node's request with its parsed body and its route parameters.
 */
type Incoming = IncomingMessage & { body?: unknown; params: Request["params"] };

export type StorageOption = { kind: "memory" } | { kind: "sqlite"; path: string };

export interface MockPaymentsOptions {
  /** Default 0: the OS picks a free port. */
  port?: number;
  /** Default "127.0.0.1". */
  host?: string;
  /** When true, a keyed endpoint called without Idempotency-Key gets 400. Default false. */
  requireIdempotencyKey?: boolean;
  /**
   * How long a completed response stays replayable under its key. Expired keys are forgotten
   * 8 times per period (at most once a minute), so a server holds at most 1 1/8 periods of keys.
   * @default 86_400_000 (24 h)
   */
  retentionMs?: number;
  /** Default in memory. With SQLite a restart keeps payments, invoices, stored responses and effects. */
  storage?: StorageOption;
  /** Latency added to every request that no fault overrides (e.g. the chapter's 820 ms). Default 0. */
  latencyMs?: number;
  /** A seeded random fault plan active from the start. */
  faultPlan?: FaultPlan;
  /** Honour the per-request `x-mock-fault` header. Default true. */
  allowFaultHeader?: boolean;
  /** Serve the /_control endpoints. Default true. */
  control?: boolean;
  /** Clock in epoch ms, for retention tests. Default Date.now. */
  now?: () => number;
  /**
   * In-memory storage only: keep at most this many payments, invoices, effects and fault
   * decisions, the oldest forgotten first, so a long run's memory stays flat (`onEffect` still
   * sees every effect). Idempotency records are bounded by `retentionMs` instead. Default: all.
   */
  memoryLimit?: number;
  /**
   * How long an idle keep-alive connection stays open, in ms (Node's `server.keepAliveTimeout`,
   * announced to clients as `Keep-Alive: timeout=N`). A client must close idle connections before
   * the server does: a request written on a connection the server is closing is lost, and a
   * stalled process runs the server's timer before it reads that request. Give the server the
   * longer timeout, by a wide margin. From 1000 (the announced timeout is in whole seconds) to
   * 3600000; anything else is refused with `invalid_option`.
   * @default 5000 (Node's)
   * @example 65_000 // beside a client agent that drops idle sockets after 30 s
   */
  keepAliveTimeoutMs?: number;
  /** Called after each effect is committed. */
  onEffect?: (effect: Effect) => void;
  /** Called after a crash_after_accept fault has stopped the server (the CLI exits the process here). */
  onCrash?: () => void;
}

/** A claim whose effect has not been performed yet (the request is still executing). */
export interface InFlightClaim {
  account: string;
  key: string;
  operation: Operation;
  since: string;
}

export type StopReason = "closed" | "crashed";

export interface MockPaymentsServer {
  readonly url: string;
  readonly port: number;
  readonly host: string;
  readonly storage: "memory" | "sqlite";
  /** True once crash_after_accept (or crash()) has stopped the server. */
  readonly crashed: boolean;
  /** Resolves when the server stops, with the reason. */
  readonly stopped: Promise<StopReason>;
  /** Stop listening and destroy every socket; requests still executing are abandoned without effect. */
  close(): Promise<void>;
  /** Start a new server with the same options on the same port (closing this one first if needed). */
  restart(): Promise<MockPaymentsServer>;
  /** Simulate the process dying now: sockets destroyed, listener closed, in-memory state gone. */
  crash(): void;
  /** Every effect performed, in order. After the server stopped: the log as it was at that moment. */
  effects(filter?: EffectFilter): Effect[];
  clearEffects(): void;
  /** Queue a fault for the next `times` (default 1) matching requests. */
  injectFault(fault: InjectedFault, options?: { times?: number }): void;
  /** A fault applied to every matching request (null to remove). */
  setGlobalFault(fault: InjectedFault | null): void;
  setFaultPlan(plan: FaultPlan | null): void;
  /** Remove queued, global and planned faults and the decision log. */
  clearFaults(): void;
  faultState(): FaultState;
  /** The fault decided for each /v1 request, in arrival order. */
  faultDecisions(): FaultDecision[];
  inFlight(): InFlightClaim[];
  /** End every injected latency now (the waiting requests proceed); returns how many were waiting. */
  releaseLatency(): number;
  payments(account: string): Payment[];
  invoices(account: string): Invoice[];
  /** Forget payments, invoices, stored responses, effects and faults. */
  reset(): void;
}

export const DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000;

/** Thrown inside a handler whose server stopped while it waited: it must not perform anything. */
class ServerGone extends Error {}

interface Outcome {
  response: StoredResponse;
  replayed: boolean;
}

interface RequestContext {
  account: string;
  decision: FaultDecision;
  /** The execution point: waits out the injected latency, then checks the server is still alive. */
  reachExecution(): Promise<void>;
}

/** Sleeps that can be ended early (releaseLatency) or all at once (on stop). */
class LatencyGate {
  private waiters = new Set<{ timer: NodeJS.Timeout; resolve: () => void }>();
  sleep(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const waiter = {
        timer: setTimeout(() => {
          this.waiters.delete(waiter);
          resolve();
        }, ms),
        resolve,
      };
      this.waiters.add(waiter);
    });
  }
  releaseAll(): number {
    const n = this.waiters.size;
    for (const w of this.waiters) {
      clearTimeout(w.timer);
      w.resolve();
    }
    this.waiters.clear();
    return n;
  }
}

export async function startMockPayments(options: MockPaymentsOptions = {}): Promise<MockPaymentsServer> {
  validateOptions(options);
  const host = options.host ?? "127.0.0.1";
  const requireKey = options.requireIdempotencyKey ?? false;
  const retentionMs = options.retentionMs ?? DEFAULT_RETENTION_MS;
  const purgeEveryMs = Math.min(60_000, Math.ceil(retentionMs / 8));
  const clock = options.now ?? Date.now;
  const allowFaultHeader = options.allowFaultHeader ?? true;
  const storage = options.storage ?? { kind: "memory" };

  const store: Store =
    storage.kind === "sqlite"
      ? await (await import("./sqlite-store.js")).openSqliteStore(storage.path)
      : new MemoryStore(options.memoryLimit !== undefined ? { limit: options.memoryLimit } : {});
  // Claim and effect commit atomically, so a claim still in flight at startup belongs to a dead
  // instance that performed nothing: dropping it lets the retry execute.
  store.releaseAllInFlight();

  const faults = new FaultController(options.latencyMs ?? 0, options.memoryLimit);
  if (options.faultPlan !== undefined) faults.setPlan(options.faultPlan);
  const gate = new LatencyGate();
  const sockets = new Set<Socket>();
  let alive = true;
  let crashed = false;
  let finalEffects: Effect[] | null = null;
  let lastPurge = clock();
  let resolveStopped!: (reason: StopReason) => void;
  const stopped = new Promise<StopReason>((resolve) => (resolveStopped = resolve));

  const iso = () => new Date(clock()).toISOString();

  // ---- the write path -------------------------------------------------------------------

  /** Perform an effect and (when keyed) store its response, in one transaction. */
  function commit(
    account: string,
    key: string | null,
    execute: (at: string, record: (e: NewEffect) => void) => StoredResponse,
  ): StoredResponse {
    const appended: Effect[] = [];
    const response = store.transaction(() => {
      const r = execute(iso(), (e) => appended.push(store.appendEffect(e)));
      if (key !== null) store.complete(account, key, r);
      return r;
    });
    for (const e of appended) {
      // The effect is committed: a throwing listener must not turn it into an error response.
      try {
        options.onEffect?.(e);
      } catch (error) {
        console.error("[mock-payments] onEffect listener threw", error);
      }
    }
    return response;
  }

  /**
   * Idempotency-Key semantics (Stripe, draft-ietf-httpapi-idempotency-key-header): claim the key
   * BEFORE the latency and the effect, so a concurrent duplicate sees it in flight (409).
   */
  async function keyedWrite(
    ctx: RequestContext,
    key: string | null,
    operation: Operation,
    material: Record<string, unknown>,
    execute: (at: string, record: (e: NewEffect) => void) => StoredResponse,
  ): Promise<Outcome> {
    if (key === null) {
      await ctx.reachExecution();
      return { response: commit(ctx.account, null, execute), replayed: false };
    }
    const now = clock();
    // At most once a minute, and 8 times per retention period when that is shorter: a server
    // keeps at most 1 1/8 retention periods of keys (purging once per period kept up to two).
    if (now - lastPurge >= purgeEveryMs) {
      store.purgeExpired(now);
      lastPurge = now;
    }
    const print = fingerprint({ operation, ...material });
    const claim = store.claim({
      account: ctx.account,
      key,
      operation,
      fingerprint: print,
      now,
      expiresAt: now + retentionMs,
    });
    if (!claim.claimed) {
      const existing = claim.existing;
      if (existing.fingerprint !== print) {
        throw new ProblemError(
          "idempotency-key-reused",
          `Idempotency-Key ${JSON.stringify(key)} was first used for a different request (${existing.operation}); use a new key for a new request`,
        );
      }
      if (existing.state === "in_flight" || existing.response === null) {
        throw new ProblemError(
          "idempotency-key-in-use",
          `the first request with Idempotency-Key ${JSON.stringify(key)} is still being processed; retry later`,
        );
      }
      return { response: existing.response, replayed: true };
    }
    try {
      await ctx.reachExecution();
      return { response: commit(ctx.account, key, execute), replayed: false };
    } catch (error) {
      // Nothing was committed (the effect and the completion share one transaction), so the
      // key is free again. If the server died meanwhile, the claim dies with it (or is
      // dropped at the next start when it sits in SQLite).
      if (alive) store.release(ctx.account, key);
      throw error;
    }
  }

  // ---- HTTP plumbing ----------------------------------------------------------------------

  function writeResponse(res: ServerResponse, response: StoredResponse, replayed: boolean): void {
    res.statusCode = response.status;
    res.setHeader("Content-Type", `${response.contentType}; charset=utf-8`);
    if (replayed) res.setHeader("Idempotent-Replayed", "true");
    const location = locationOf(response);
    if (location !== null) res.setHeader("Location", location);
    // A refused request and a key still in flight are both worth retrying shortly.
    if (response.status === 503 || isProblemOf(response, "idempotency-key-in-use")) res.setHeader("Retry-After", "1");
    res.end(JSON.stringify(response.body));
  }

  function deliver(req: Incoming, res: ServerResponse, outcome: Outcome, after: FaultOutcome | "none"): void {
    if (!alive) {
      req.socket.destroy();
      return;
    }
    if (after === "drop_after_accept") {
      // The lost response: whatever happened is committed; the caller never hears of it.
      req.socket.destroy();
      return;
    }
    if (after === "crash_after_accept") {
      crash();
      return;
    }
    writeResponse(res, outcome.response, outcome.replayed);
  }

  /** A route's handler: for express (the account from `authenticate`, in res.locals) and for the hot route. */
  function route(operation: Operation, run: (req: Incoming, ctx: RequestContext) => Promise<Outcome>) {
    const handle = (req: Incoming, res: ServerResponse, account: string) => serveRoute(operation, run, req, res, account);
    return Object.assign((req: Request, res: Response): Promise<void> => handle(req, res, res.locals["account"] as string), { handle });
  }

  async function serveRoute(
    operation: Operation,
    run: (req: Incoming, ctx: RequestContext) => Promise<Outcome>,
    req: Incoming,
    res: ServerResponse,
    account: string,
  ): Promise<void> {
    let header: FaultSpec | null = null;
    const raw = allowFaultHeader ? headerValue(req, "x-mock-fault") : undefined;
    if (raw !== undefined) {
      const parsed = parseFaultHeader(raw);
      if (!parsed.ok) throw new ProblemError("invalid-fault", `x-mock-fault: ${parsed.reason}`);
      header = parsed.spec;
    }
    const decision = faults.decide(operation, account, header);
    const ctx: RequestContext = {
      account,
      decision,
      reachExecution: async () => {
        await gate.sleep(decision.latencyMs);
        if (!alive) throw new ServerGone();
      },
    };
    let outcome: Outcome;
    try {
      if (decision.outcome === "fail_before_accept") {
        await ctx.reachExecution();
        const problem = makeProblem("service-unavailable", "the request was refused before it was accepted; nothing was performed");
        writeResponse(res, problemResponse(problem), false);
        return;
      }
      outcome = await run(req, ctx);
    } catch (error) {
      if (error instanceof ServerGone) {
        req.socket.destroy();
        return;
      }
      if (!(error instanceof ProblemError)) throw error;
      outcome = { response: problemResponse(error.problem), replayed: false };
    }
    deliver(req, res, outcome, decision.outcome);
  }

  function readKey(req: Incoming, required: boolean): string | null {
    const raw = keyHeader(req);
    if (raw === undefined) {
      if (required) {
        throw new ProblemError("idempotency-key-missing", "this server requires an Idempotency-Key header on this endpoint");
      }
      return null;
    }
    const parsed = parseIdempotencyKey(raw);
    if (!parsed.ok) throw new ProblemError("idempotency-key-malformed", `Idempotency-Key: ${parsed.reason}`);
    return parsed.key;
  }

  function getPaymentOr404(account: string, id: string): Payment {
    const payment = store.getPayment(account, id);
    if (payment === null) throw new ProblemError("payment-not-found", `no payment ${JSON.stringify(id)} for this account`);
    return payment;
  }

  // ---- routes -----------------------------------------------------------------------------

  const app = express();
  app.disable("x-powered-by");
  app.set("etag", false);
  const json = jsonBody({ limitBytes: 100 * 1024, type: ["application/json", "application/*+json"] });

  if (options.control ?? true) {
    const control = express.Router();
    control.use(json);
    control.get("/effects", (req, res) => {
      const filter: EffectFilter = {};
      if (typeof req.query["account"] === "string") filter.account = req.query["account"];
      if (typeof req.query["kind"] === "string") filter.kind = req.query["kind"] as Effect["kind"];
      if (typeof req.query["idempotencyKey"] === "string") filter.idempotencyKey = req.query["idempotencyKey"];
      res.json({ effects: store.effects(filter) });
    });
    control.delete("/effects", (_req, res) => {
      store.clearEffects();
      res.status(204).end();
    });
    control.get("/faults", (_req, res) => {
      res.json({ ...faults.state(), decisions: faults.decisions() });
    });
    control.post("/faults", (req, res) => {
      const body = parseBody(faultControlSchema, req.body, "invalid-fault");
      if (body.mode === "queue") faults.inject(body.fault, body.times ?? 1);
      else if (body.mode === "global") faults.setGlobal(body.fault);
      else faults.setPlan(body.plan);
      res.status(200).json(faults.state());
    });
    control.delete("/faults", (_req, res) => {
      faults.clear();
      res.status(204).end();
    });
    control.get("/in-flight", (_req, res) => {
      res.json({ inFlight: inFlight() });
    });
    control.post("/latency/release", (_req, res) => {
      res.json({ released: gate.releaseAll() });
    });
    control.post("/reset", (_req, res) => {
      store.reset();
      faults.clear();
      res.status(204).end();
    });
    app.use("/_control", control);
  }

  const v1 = express.Router();
  v1.use(authenticate, json);

  const createPayment = route("create_payment", async (req, ctx) => {
    const key = readKey(req, requireKey);
    const body = parseBody(createPaymentBodySchema, req.body);
    return keyedWrite(ctx, key, "create_payment", { body }, (at, record) => {
      const payment: Payment = {
        id: newId("pay"),
        object: "payment",
        payee: body.payee,
        amount: body.amount,
        currency: body.currency,
        reference: body.reference,
        memo: body.memo ?? null,
        status: "succeeded",
        created_at: at,
        voided_at: null,
        void_reason: null,
      };
      store.insertPayment(ctx.account, payment);
      record({ kind: "payment_created", account: ctx.account, idempotencyKey: key, resourceId: payment.id, payload: { ...body }, at });
      return { status: 201, contentType: "application/json", body: payment };
    });
  });
  v1.post("/payments", createPayment);

  v1.post(
    "/payments/:id/void",
    route("void_payment", async (req, ctx) => {
      const key = readKey(req, requireKey);
      const id = req.params["id"] as string;
      const body = parseBody(voidPaymentBodySchema, req.body ?? {});
      return keyedWrite(ctx, key, "void_payment", { paymentId: id, body }, (at, record) => {
        // Business errors found once execution started are stored under the key like successes.
        const payment = store.getPayment(ctx.account, id);
        if (payment === null) {
          return problemResponse(makeProblem("payment-not-found", `no payment ${JSON.stringify(id)} for this account`));
        }
        if (payment.status === "voided") {
          return problemResponse(
            makeProblem("payment-already-voided", `payment ${id} was already voided at ${payment.voided_at}`, {
              payment_id: id,
            }),
          );
        }
        const voided: Payment = { ...payment, status: "voided", voided_at: at, void_reason: body.reason ?? null };
        store.updatePayment(ctx.account, voided);
        record({
          kind: "payment_voided",
          account: ctx.account,
          idempotencyKey: key,
          resourceId: id,
          payload: { paymentId: id, ...body },
          at,
        });
        return { status: 200, contentType: "application/json", body: voided };
      });
    }),
  );

  v1.get(
    "/payments",
    route("list_payments", async (_req, ctx) => {
      await ctx.reachExecution();
      const list: ListResponse<Payment> = { object: "list", data: store.listPayments(ctx.account) };
      return ok(list);
    }),
  );

  // Reconciliation: what this account's key holds, so a caller whose response was lost can ask.
  v1.get(
    "/idempotency-keys/:key",
    route("lookup_idempotency_key", async (req, ctx) => {
      await ctx.reachExecution();
      const key = req.params["key"] as string;
      const record = store.getRecord(ctx.account, key, clock());
      const found: IdempotencyKeyLookup =
        record === null
          ? { object: "idempotency_key", key, state: "absent" }
          : record.state === "in_flight" || record.response === null
            ? { object: "idempotency_key", key, state: "in_flight", operation: record.operation }
            : {
                object: "idempotency_key",
                key,
                state: "completed",
                operation: record.operation,
                response: { status: record.response.status, body: record.response.body },
              };
      return ok(found);
    }),
  );

  v1.get(
    "/payments/:id",
    route("get_payment", async (req, ctx) => {
      await ctx.reachExecution();
      return ok(getPaymentOr404(ctx.account, req.params["id"] as string));
    }),
  );

  v1.post(
    "/invoices",
    route("create_invoice", async (req, ctx) => {
      // The "internal" API that never expected to be called twice: no deduplication at all.
      // A key the caller sent is ignored (recorded in the effect log only, when well-formed).
      const raw = keyHeader(req);
      const parsedKey = raw === undefined ? null : parseIdempotencyKey(raw);
      const sentKey = parsedKey !== null && parsedKey.ok ? parsedKey.key : null;
      const body = parseBody(createInvoiceBodySchema, req.body);
      await ctx.reachExecution();
      const response = commit(ctx.account, null, (at, record) => {
        const invoice: Invoice = {
          id: newId("inv"),
          object: "invoice",
          customer: body.customer,
          amount: body.amount,
          currency: body.currency,
          memo: body.memo ?? null,
          created_at: at,
        };
        store.insertInvoice(ctx.account, invoice);
        record({ kind: "invoice_created", account: ctx.account, idempotencyKey: sentKey, resourceId: invoice.id, payload: { ...body }, at });
        return { status: 201, contentType: "application/json", body: invoice };
      });
      return { response, replayed: false };
    }),
  );

  v1.get(
    "/invoices/:id",
    route("get_invoice", async (req, ctx) => {
      await ctx.reachExecution();
      const id = req.params["id"] as string;
      const invoice = store.getInvoice(ctx.account, id);
      if (invoice === null) throw new ProblemError("invoice-not-found", `no invoice ${JSON.stringify(id)} for this account`);
      return ok(invoice);
    }),
  );

  v1.get(
    "/invoices",
    route("list_invoices", async (_req, ctx) => {
      await ctx.reachExecution();
      const list: ListResponse<Invoice> = { object: "list", data: store.listInvoices(ctx.account) };
      return ok(list);
    }),
  );

  app.use("/v1", v1);

  app.use((req: Request, _res: Response, next: NextFunction) => {
    next(new ProblemError("not-found", `no route for ${req.method} ${req.path}`));
  });

  app.use((error: unknown, req: Request, res: Response, _next: NextFunction) => answerError(error, req, res));

  function answerError(error: unknown, req: IncomingMessage, res: ServerResponse): void {
    if (res.headersSent || !alive) {
      req.socket.destroy();
      return;
    }
    writeResponse(res, problemResponse(toProblem(error)), false);
  }

  /**
   * POST /v1/payments, the demo's hot route, goes straight to its handler; everything else to
   * the express app. Express's router and request setup cost about as much as the route's own
   * work; the authentication, the body parser, the handler and the error answers are the same
   * ones, so are the bytes (a test compares both ways in byte for byte).
   */
  function serve(req: IncomingMessage, res: ServerResponse): void {
    if (req.method !== "POST" || req.url !== "/v1/payments") {
      app(req, res);
      return;
    }
    const account = accountOf(req, res);
    if (account === null) return;
    const incoming = req as Incoming;
    incoming.params = {};
    // express's types, not its objects: the parser reads only node's request (as express.json does).
    json(req as Request, res as Response, (err?: unknown) => {
      if (err !== undefined) return answerError(err, req, res);
      createPayment.handle(incoming, res, account).catch((e: unknown) => answerError(e, req, res));
    });
  }

  // ---- lifecycle --------------------------------------------------------------------------

  const httpServer: Server = createServer(serve);
  if (options.keepAliveTimeoutMs !== undefined) httpServer.keepAliveTimeout = options.keepAliveTimeoutMs;
  // Requests Node's HTTP parser rejects never reach express; answer them with problem+json too.
  httpServer.on("clientError", (error: NodeJS.ErrnoException, socket: Duplex) => answerClientError(error, socket));
  httpServer.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  try {
    await new Promise<void>((resolve, reject) => {
      httpServer.once("error", reject);
      httpServer.listen(options.port ?? 0, host, () => {
        httpServer.off("error", reject);
        resolve();
      });
    });
  } catch (error) {
    store.close();
    throw error;
  }
  const port = (httpServer.address() as AddressInfo).port;
  const urlHost = host === "0.0.0.0" ? "127.0.0.1" : host === "::" ? "[::1]" : host.includes(":") ? `[${host}]` : host;
  const url = `http://${urlHost}:${port}`;
  const listenerClosed = new Promise<void>((resolve) => httpServer.once("close", () => resolve()));

  function stop(reason: StopReason): void {
    if (!alive) return;
    alive = false;
    crashed = reason === "crashed";
    try {
      finalEffects = store.effects();
    } catch {
      finalEffects = [];
    }
    httpServer.close();
    for (const socket of sockets) socket.destroy();
    // Wake requests sleeping in injected latency: they see the server gone and perform nothing.
    gate.releaseAll();
    store.close();
    resolveStopped(reason);
  }

  function crash(): void {
    if (!alive) return;
    stop("crashed");
    options.onCrash?.();
  }

  function inFlight(): InFlightClaim[] {
    if (!alive) return [];
    return store.inFlight().map((r) => ({
      account: r.account,
      key: r.key,
      operation: r.operation,
      since: new Date(r.createdAt).toISOString(),
    }));
  }

  function live(what: string): void {
    if (!alive) throw new MockPaymentsError("server_closed", `cannot ${what}: the server has stopped`);
  }

  const server: MockPaymentsServer = {
    url,
    port,
    host,
    storage: store.kind,
    get crashed() {
      return crashed;
    },
    stopped,
    async close() {
      stop("closed");
      await listenerClosed;
    },
    async restart() {
      if (alive) await server.close();
      await listenerClosed;
      return startMockPayments({ ...options, port });
    },
    crash,
    effects(filter) {
      if (!alive) return (finalEffects ?? []).filter((e) => matchesEffect(e, filter)).map((e) => structuredClone(e));
      return store.effects(filter);
    },
    clearEffects() {
      live("clear effects");
      store.clearEffects();
    },
    injectFault(fault, injectOptions) {
      faults.inject(fault, injectOptions?.times ?? 1);
    },
    setGlobalFault(fault) {
      faults.setGlobal(fault);
    },
    setFaultPlan(plan) {
      faults.setPlan(plan);
    },
    clearFaults() {
      faults.clear();
    },
    faultState() {
      return faults.state();
    },
    faultDecisions() {
      return faults.decisions();
    },
    inFlight,
    releaseLatency() {
      return gate.releaseAll();
    },
    payments(account) {
      live("list payments");
      return store.listPayments(account);
    },
    invoices(account) {
      live("list invoices");
      return store.listInvoices(account);
    },
    reset() {
      live("reset");
      store.reset();
      faults.clear();
    },
  };
  return server;
}

function authenticate(req: Request, res: Response, next: NextFunction): void {
  const account = accountOf(req, res);
  if (account === null) return;
  res.locals["account"] = account;
  next();
}

/** The account a request's bearer token names, or null once a 401 is answered. */
function accountOf(req: IncomingMessage, res: ServerResponse): string | null {
  const header = headerValue(req, "authorization");
  const match = header === undefined ? null : /^Bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  if (match === null) {
    res.setHeader("WWW-Authenticate", 'Bearer realm="mock-payments"');
    const problem = makeProblem(
      "unauthorized",
      header === undefined ? "send Authorization: Bearer <token>; the token names the account" : "the Authorization header is not a Bearer token",
    );
    res.statusCode = 401;
    res.setHeader("Content-Type", `${PROBLEM_CONTENT_TYPE}; charset=utf-8`);
    res.end(JSON.stringify(problem));
    return null;
  }
  return match[1]!;
}

/**
 * What express's `req.get(name)` answers for a header name other than referer/referrer (node
 * joins repeated lines into one string for every name but set-cookie, the one kept as a list).
 */
function headerValue(req: IncomingMessage, lowerCaseName: string): string | undefined {
  const value = req.headers[lowerCaseName];
  return Array.isArray(value) ? value.join(", ") : value;
}

function parseBody<T>(schema: z.ZodType<T>, body: unknown, slug: "invalid-request-body" | "invalid-fault" = "invalid-request-body"): T {
  if (body === undefined) {
    throw new ProblemError(slug, "expected a JSON object body with Content-Type: application/json", { errors: [] });
  }
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    const errors = summarizeIssues(parsed.error);
    throw new ProblemError(slug, errors.map((e) => `${e.path}: ${e.message}`).join("; "), { errors });
  }
  return parsed.data;
}

function problemResponse(problem: Problem): StoredResponse {
  return { status: problem.status, contentType: PROBLEM_CONTENT_TYPE, body: problem };
}

function ok(body: unknown): Outcome {
  return { response: { status: 200, contentType: "application/json", body }, replayed: false };
}

function newId(prefix: string): string {
  return `${prefix}_${randomBytes(12).toString("hex")}`;
}

/**
 * The Idempotency-Key header value, or undefined when absent. Two header lines are malformed:
 * Node joins them with ", " into one value, which could parse as one key (`"a` + `b"`).
 */
function keyHeader(req: IncomingMessage): string | undefined {
  let lines = 0;
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    if (req.rawHeaders[i]!.toLowerCase() === "idempotency-key") lines++;
  }
  if (lines > 1) {
    throw new ProblemError("idempotency-key-malformed", `Idempotency-Key: the header is sent ${lines} times; send it once`);
  }
  return headerValue(req, "idempotency-key");
}

function isProblemOf(response: StoredResponse, slug: ProblemSlug): boolean {
  const body = response.body as { type?: unknown } | null;
  return response.contentType === PROBLEM_CONTENT_TYPE && body?.type === problemTypeUri(slug);
}

/** 201 Created names the new resource (RFC 9110 §15.3.2), on a replay as on the first answer. */
function locationOf(response: StoredResponse): string | null {
  if (response.status !== 201) return null;
  const body = response.body as { object?: unknown; id?: unknown } | null;
  if (typeof body?.id !== "string") return null;
  if (body.object === "payment") return `/v1/payments/${encodeURIComponent(body.id)}`;
  if (body.object === "invoice") return `/v1/invoices/${encodeURIComponent(body.id)}`;
  return null;
}

/**
 * What can be answered to a request the parser rejected. Impossible: an answer after the socket
 * is gone (ECONNRESET, a peer that closed) or once a response to an earlier request on the
 * connection has started; those sockets are only destroyed.
 */
function answerClientError(error: NodeJS.ErrnoException, socket: Duplex): void {
  const started = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent === true;
  if (error.code === "ECONNRESET" || !socket.writable || started) {
    socket.destroy();
    return;
  }
  const problem =
    error.code === "HPE_HEADER_OVERFLOW"
      ? makeProblem("request-header-fields-too-large", "the request's header section exceeds the server's limit")
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? makeProblem("request-timeout", "the request was not received completely in time")
        : makeProblem("malformed-request", `the request could not be parsed as HTTP/1.1 (${error.code ?? "parse error"})`);
  const body = JSON.stringify(problem);
  const reason = STATUS_CODES[problem.status] ?? "Bad Request";
  socket.end(
    `HTTP/1.1 ${problem.status} ${reason}\r\nContent-Type: ${PROBLEM_CONTENT_TYPE}; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  );
}

function toProblem(error: unknown): Problem {
  if (error instanceof ProblemError) return error.problem;
  if (error instanceof MockPaymentsError) return makeProblem("invalid-fault", error.message);
  const type = (error as { type?: unknown } | null)?.type;
  if (type === "entity.parse.failed") return makeProblem("malformed-json", "the request body could not be parsed as JSON");
  if (type === "entity.too.large") return makeProblem("payload-too-large", "the request body exceeds 100kb");
  const status = (error as { status?: unknown } | null)?.status;
  if (typeof status === "number" && status >= 400 && status < 500) {
    return makeProblem("invalid-request-body", (error as Error).message);
  }
  console.error("[mock-payments] unexpected error", error);
  return makeProblem("internal-error", "an unexpected error occurred; nothing was committed");
}

/** Every option of `startMockPayments`, as a record so that a new option cannot be left out of it. */
const OPTION_NAMES: { readonly [Name in keyof Required<MockPaymentsOptions>]: true } = {
  port: true, host: true, requireIdempotencyKey: true, retentionMs: true, storage: true, latencyMs: true, faultPlan: true,
  allowFaultHeader: true, control: true, now: true, memoryLimit: true, keepAliveTimeoutMs: true, onEffect: true, onCrash: true,
};

function validateOptions(o: MockPaymentsOptions): void {
  const bad = (m: string) => {
    throw new MockPaymentsError("invalid_option", m);
  };
  if (typeof o !== "object" || o === null || Array.isArray(o)) bad(`options must be an object, got ${o === null ? "null" : Array.isArray(o) ? "an array" : typeof o}`);
  // A misspelt option (requireIdempotency) would be ignored and its default used without a word.
  const unknown = Object.keys(o).find((name) => !Object.hasOwn(OPTION_NAMES, name));
  if (unknown !== undefined) bad(`${unknown} is not an option of startMockPayments (its options: ${Object.keys(OPTION_NAMES).join(", ")})`);
  if (o.port !== undefined && (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535)) bad(`port must be an integer 0..65535, got ${o.port}`);
  if (o.retentionMs !== undefined && (!Number.isInteger(o.retentionMs) || o.retentionMs <= 0)) bad(`retentionMs must be a positive integer, got ${o.retentionMs}`);
  if (o.memoryLimit !== undefined && (!Number.isInteger(o.memoryLimit) || o.memoryLimit <= 0)) bad(`memoryLimit must be a positive integer, got ${o.memoryLimit}`);
  if (o.keepAliveTimeoutMs !== undefined && (!Number.isInteger(o.keepAliveTimeoutMs) || o.keepAliveTimeoutMs < 1_000 || o.keepAliveTimeoutMs > 3_600_000)) {
    bad(`keepAliveTimeoutMs must be an integer 1000..3600000, got ${o.keepAliveTimeoutMs}`);
  }
  if (o.latencyMs !== undefined && (!Number.isInteger(o.latencyMs) || o.latencyMs < 0 || o.latencyMs > 600_000)) bad(`latencyMs must be an integer 0..600000, got ${o.latencyMs}`);
  if (o.storage !== undefined) {
    if (o.storage.kind === "sqlite") {
      if (typeof o.storage.path !== "string" || o.storage.path.length === 0) bad("storage.path must be a non-empty string");
    } else if (o.storage.kind !== "memory") bad(`storage.kind must be "memory" or "sqlite"`);
  }
}
