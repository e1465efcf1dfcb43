import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import express, { type Request, type Response as ExpressResponse } from "express";
import { z } from "zod";
import { MockOpenAIError } from "./errors.js";
import { sha256Hex, stableStringify } from "./random.js";
import { renderResponse, resolvePosition } from "./render.js";
import type { Fault, FaultPlan, RequestRecord, ResponsesRequest, Script, Timing } from "./types.js";

export interface MockOpenAIOptions {
  script: Script;
  port?: number;
  host?: string;
  /** Seeds every per-response variation; same seed, same ids and wording. */
  seed?: string;
  timing?: Partial<Timing>;
  model?: string;
}

export interface MockOpenAI {
  url: string;
  /** What to pass to the SDK as `baseURL` (it appends `/responses`). */
  baseURL: string;
  readonly requests: RequestRecord[];
  setFaultPlan(plan: FaultPlan | undefined): void;
  /** Faults applied to the next requests, one each, in order. */
  queueFault(fault: Fault): void;
  clearRequests(): void;
  close(): Promise<void>;
}

const timingSchema = z.object({ betweenEventsMs: z.number().min(0), afterCallDoneMs: z.number().min(0), beforeCompletedMs: z.number().min(0) }).strict().partial();
const positionSchema = z.union([
  z.object({ event: z.number().int().min(0) }).strict(),
  z.object({ call: z.number().int().min(0), afterFragment: z.number().int().min(0) }).strict(),
  z.object({ afterCallDone: z.number().int().min(0) }).strict(),
  z.object({ beforeCompleted: z.literal(true) }).strict(),
]);
const faultSchema = z.union([
  z.object({ kind: z.enum(["reset", "clean_close"]), at: positionSchema, timing: timingSchema.optional() }).strict(),
  z.object({ kind: z.enum(["error_event", "failed_event"]), at: positionSchema, code: z.string().optional(), message: z.string().optional(), timing: timingSchema.optional() }).strict(),
  z.object({ kind: z.literal("status"), status: z.number().int().min(400).max(599), shouldRetry: z.boolean().optional() }).strict(),
]);

/** Parse a fault from untrusted input (control endpoint, `x-mock-fault` header). */
export function parseFault(input: unknown): Fault {
  const parsed = faultSchema.safeParse(input);
  if (!parsed.success) throw new MockOpenAIError("invalid_fault", `invalid fault: ${parsed.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
  return parsed.data as Fault;
}

const requestSchema = z
  .object({
    model: z.string().min(1),
    input: z.union([z.string(), z.array(z.record(z.string(), z.unknown()))]),
    stream: z.boolean().optional(),
    tools: z.array(z.unknown()).optional(),
  })
  .loose();

function statusError(status: number): { type: string; code: string | null; message: string } {
  if (status === 429) return { type: "rate_limit_exceeded", code: "rate_limit_exceeded", message: "Rate limit reached" };
  if (status >= 500) return { type: "server_error", code: "server_error", message: "The server had an error while processing your request." };
  return { type: "invalid_request_error", code: null, message: "Invalid request" };
}

const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());

export async function startMockOpenAI(options: MockOpenAIOptions): Promise<MockOpenAI> {
  const seed = options.seed ?? "0";
  const baseTiming: Timing = { betweenEventsMs: 0, afterCallDoneMs: 0, beforeCompletedMs: 0, ...options.timing };
  const requests: RequestRecord[] = [];
  const attempts = new Map<string, number>();
  const queued: Fault[] = [];
  let plan: FaultPlan | undefined;
  // Ids stay fresh after clearRequests() resets the attempt counters.
  let generation = 0;
  const app = express();
  app.use(express.json({ limit: "10mb" }));

  app.get("/_control/requests", (_req, res) => {
    res.json(requests);
  });
  app.post("/_control/faults", (req, res) => {
    try {
      queued.push(parseFault(req.body));
      res.status(204).end();
    } catch (error) {
      res.status(400).json({ error: (error as Error).message });
    }
  });
  app.post("/_control/reset", (_req, res) => {
    requests.length = 0;
    attempts.clear();
    queued.length = 0;
    generation++;
    res.status(204).end();
  });

  app.post("/v1/responses", async (req: Request, res: ExpressResponse) => {
    const parsed = requestSchema.safeParse(req.body);
    const stream = parsed.success && parsed.data.stream === true;
    const body = req.body as Record<string, unknown>;
    const { stream: _ignored, ...modelInput } = (body ?? {}) as Record<string, unknown>;
    const bodyHash = sha256Hex(stableStringify(modelInput));
    const attempt = (attempts.get(bodyHash) ?? 0) + 1;
    attempts.set(bodyHash, attempt);
    const headers = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)]));
    const record: RequestRecord = { requestNumber: requests.length + 1, attempt, bodyHash, body, headers, stream, faultFired: false, calls: [], events: [], outcome: "pending" };
    requests.push(record);
    const fail = (status: number, outcome: RequestRecord["outcome"], message: string, type = "invalid_request_error") => {
      record.outcome = outcome;
      record.status = status;
      record.error = message;
      // x-should-retry: false so that a mis-scripted test fails loudly instead of being retried by the SDK.
      res.status(status).set("x-should-retry", "false").json({ error: { message, type, param: null, code: null } });
    };
    if (!parsed.success) return fail(400, "invalid_request", parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; "));

    let fault: Fault | undefined;
    try {
      const header = req.headers["x-mock-fault"];
      fault = typeof header === "string" ? parseFault(JSON.parse(header)) : queued.shift() ?? plan?.(parsed.data as ResponsesRequest, { requestNumber: record.requestNumber, attempt, bodyHash, stream });
    } catch (error) {
      return fail(400, "invalid_request", (error as Error).message);
    }
    if (fault !== undefined) record.fault = fault;

    if (fault?.kind === "status") {
      record.faultFired = true;
      const error = statusError(fault.status);
      record.outcome = "status";
      record.status = fault.status;
      if (fault.shouldRetry !== undefined) res.set("x-should-retry", String(fault.shouldRetry));
      // retry-after-ms keeps the SDK's own retry (when enabled) fast.
      res.status(fault.status).set("retry-after-ms", "5").json({ error: { message: error.message, type: error.type, param: null, code: error.code } });
      return;
    }

    let rendered;
    let cutAt: number | undefined;
    try {
      const scripted = options.script(parsed.data as ResponsesRequest);
      rendered = renderResponse(scripted, { seed, bodyHash, attempt, salt: String(generation), model: parsed.data.model });
      if (fault !== undefined && stream) cutAt = resolvePosition(fault.at, rendered.events);
    } catch (error) {
      return fail(500, "script_error", `${(error as { code?: string }).code ?? "script_error"}: ${(error as Error).message}`, "server_error");
    }
    record.responseId = rendered.responseId;
    record.calls = rendered.calls;
    if (!stream) {
      record.outcome = "complete";
      record.status = 200;
      res.json(rendered.response);
      return;
    }

    const timing: Timing = { ...baseTiming, ...(fault !== undefined && "timing" in fault ? fault.timing : {}) };
    let clientGone = false;
    res.on("close", () => {
      if (!res.writableFinished) clientGone = true;
    });
    res.status(200).set({ "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "x-request-id": `req_${rendered.responseId.slice(5)}` });
    res.flushHeaders();
    record.status = 200;
    // Every event carries an `event:` line, as the API sends them. Each write is awaited until it left
    // the process, so a reset after event n cuts after exactly n events, not somewhere in a buffer.
    const write = (type: string, data: Record<string, unknown>) =>
      new Promise<void>((resolve) => {
        record.events.push({ index: record.events.length, type, data });
        if (clientGone || res.destroyed) return resolve();
        res.write(`event: ${type}\ndata: ${JSON.stringify(data)}\n\n`, () => resolve());
      });
    for (let i = 0; i <= rendered.events.length; i++) {
      const event = rendered.events[i];
      if (i > 0) await sleep(timing.betweenEventsMs);
      const previous = rendered.events[i - 1];
      if (previous?.type === "response.output_item.done" && previous.call !== undefined) await sleep(timing.afterCallDoneMs);
      if (event?.type === "response.completed") await sleep(timing.beforeCompletedMs);
      if (clientGone) {
        record.outcome = "client_closed";
        return;
      }
      if (fault !== undefined && i === cutAt) {
        record.faultFired = true;
        record.outcome = fault.kind;
        if (fault.kind === "reset") {
          // The chunked body stays unterminated: undici reports "terminated".
          req.socket.destroy();
          return;
        }
        if (fault.kind === "error_event") {
          await write("error", { type: "error", code: fault.code ?? "server_error", message: fault.message ?? "The server had an error while processing your request.", param: null, sequence_number: i });
        } else if (fault.kind === "failed_event") {
          const response = { ...rendered.response, status: "failed", output: [], usage: null, error: { code: fault.code ?? "server_error", message: fault.message ?? "The server had an error." } };
          await write("response.failed", { type: "response.failed", response, sequence_number: i });
        }
        res.end();
        return;
      }
      if (event === undefined) break;
      await write(event.type, event.data);
    }
    record.outcome = "complete";
    res.end();
  });

  const server: Server = await new Promise((resolve) => {
    const s = app.listen(options.port ?? 0, options.host ?? "127.0.0.1", () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  const url = `http://${options.host ?? "127.0.0.1"}:${port}`;
  return {
    url,
    baseURL: `${url}/v1`,
    requests,
    setFaultPlan(next) {
      plan = next;
    },
    queueFault(fault) {
      queued.push(parseFault(fault));
    },
    clearRequests() {
      requests.length = 0;
      attempts.clear();
      generation++;
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((e) => (e ? reject(e) : resolve()));
      }),
  };
}
