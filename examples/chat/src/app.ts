import { fileURLToPath } from "node:url";
import type { RunnerEvent, SendResult } from "@dispatch-once/anthropic";
import { tenantConversationId } from "@dispatch-once/core";
import express, { type NextFunction, type Request, type Response } from "express";
import type { ChatBackend } from "./backend.js";
import { problem, problemForSendError, type ChatProblem } from "./problem.js";

/**
 * The client's message id travels in this header, as in draft-ietf-httpapi-idempotency-key-header:
 * the same id is the same message, however often it arrives (TURN-2).
 */
export const MESSAGE_ID_HEADER = "Idempotency-Key";
/** What this example accepts as a message id: a UUID fits, and so does any short token. */
export const MESSAGE_ID_PATTERN = /^[A-Za-z0-9_.:~-]{1,128}$/;
/** Conversation ids in the path; the tenant prefix is added by the server (KEY-11). */
export const CONVERSATION_PATTERN = /^[A-Za-z0-9_.~-]{1,128}$/;
const MAX_TEXT = 4000;

export interface ChatAppOptions {
  backend: ChatBackend;
  /** Whose conversations these are; a real app takes it from the authenticated user. */
  tenant?: string;
  /** Where index.html and chat.js are; default the package's `public` directory. */
  publicDir?: string;
}

/** The answer to a message, as the client gets it (a JSON body, or the `answer` event). */
export interface ChatAnswer {
  conversationId: string;
  messageId: string;
  /** False when the id was already known: a re-send, a double click. */
  appended: boolean;
  /** True when the stored answer was returned and nothing ran (no model call, no payment). */
  fromStore: boolean;
  text: string;
  turns: { turnIndex: number; text: string; calls: { name: string; replayed?: boolean; result?: unknown; error?: unknown }[] }[];
  /**
   * Effects of earlier runs of a resumed turn that the answer does not contain (RECORD-8): show
   * them, e.g. "a payment to acme was made by an earlier attempt". `listed: false` means they
   * could not be looked up and some may exist. Absent when there are none.
   */
  earlierEffects?: { turnIndex: number; listed: boolean; calls: { name: string; effect: string; summary: string }[] }[];
}

/** The server-sent events of one message's answer (`event:` name → `data:` JSON). */
export type ChatStreamEvent =
  | { event: "attempt"; data: { turnIndex: number; attempt: number } }
  | { event: "text"; data: { turnIndex: number; attempt: number; text: string } }
  /** Everything streamed for (turnIndex, attempt) is void: drop it (the retry streams anew). */
  | { event: "discard"; data: { turnIndex: number; attempt: number; reason: "retry" | "failed" | "superseded" } }
  | { event: "tool"; data: { turnIndex: number; attempt: number; name: string; ok: boolean; replayed?: boolean } }
  /** The committed answer: authoritative; ends the stream. */
  | { event: "answer"; data: ChatAnswer }
  /** The send failed: the problem document (its `status` is what a JSON request gets); ends the stream. */
  | { event: "problem"; data: ChatProblem };

function sendProblem(res: Response, body: ChatProblem): void {
  if (body.retryable === "same_message" && body.status === 503) res.setHeader("Retry-After", "1");
  res.status(body.status).type("application/problem+json").send(JSON.stringify(body));
}

function answerOf(conversationId: string, result: SendResult): ChatAnswer {
  const turns = result.turns.map((t) => ({
    turnIndex: t.turnIndex,
    text: t.text,
    calls: t.calls.map((c) => ({
      name: c.name,
      ...(c.replayed !== undefined ? { replayed: c.replayed } : {}),
      ...(c.result !== undefined ? { result: c.result } : {}),
      ...(c.error !== undefined ? { error: c.error } : {}),
    })),
  }));
  return {
    conversationId,
    messageId: result.messageId,
    appended: result.appended,
    fromStore: result.fromStore,
    text: turns.map((t) => t.text).join(""),
    turns,
    ...(result.records !== undefined
      ? {
          earlierEffects: result.records.map((r) => ({
            turnIndex: r.turnIndex,
            listed: r.listed,
            calls: r.calls.map((c) => ({ name: c.name, effect: c.effect, summary: c.summary })),
          })),
        }
      : {}),
  };
}

/** The one value of a header that must not repeat; "many" when it came on several lines. */
function singleHeader(req: Request, name: string): string | undefined | "many" {
  const values = req.headersDistinct[name.toLowerCase()];
  if (values === undefined || values.length === 0) return undefined;
  return values.length > 1 ? "many" : values[0];
}

/**
 * The chat backend: `POST /api/conversations/:conversationId/messages` with `Idempotency-Key: <message id>`
 * and `{ "text": "…" }`. With `Accept: text/event-stream` the answer streams as server-sent events
 * (`ChatStreamEvent`); otherwise one JSON answer or an `application/problem+json` error.
 * `GET /api/conversations/:conversationId/messages/:messageId` reads a message back.
 */
export function createChatApp(options: ChatAppOptions): express.Express {
  const { backend } = options;
  const tenant = options.tenant ?? "demo";
  const app = express();
  app.disable("x-powered-by");

  // Which message a (conversation, turn index) answers: attempt_started says it; every other
  // event of that turn carries only the turn index. Kept until the turn is committed or failed.
  const turnOwner = new Map<string, string>();
  const subscribers = new Map<string, Set<(event: RunnerEvent) => void>>();
  const slot = (conversationId: string, key: string | number) => `${conversationId}\u0000${key}`;
  backend.subscribe((event) => {
    const turnKey = slot(event.conversationId, event.turnIndex);
    if (event.type === "attempt_started") turnOwner.set(turnKey, event.messageId);
    // A resumed turn's record comes after turn_committed, when the turn's owner is forgotten: it names its message.
    const messageId =
      event.type === "turn_failed" || event.type === "resumed_turn_recorded" ? event.record.messageId : turnOwner.get(turnKey);
    // The last event of a turn's life here (a superseded attempt's discard comes before attempt_superseded).
    if ((event.type === "turn_committed" && event.committed) || event.type === "turn_failed" || event.type === "attempt_superseded") {
      turnOwner.delete(turnKey);
    }
    if (messageId === undefined) return;
    for (const listener of subscribers.get(slot(event.conversationId, messageId)) ?? []) listener(event);
  });

  app.use(express.static(options.publicDir ?? fileURLToPath(new URL("../public", import.meta.url))));

  app.get("/api/conversations/:conversationId/messages/:messageId", async (req, res) => {
    const { conversationId: path, messageId } = req.params;
    if (!CONVERSATION_PATTERN.test(path) || !MESSAGE_ID_PATTERN.test(messageId)) {
      sendProblem(res, problem(404, "not_found", "No such message", "unknown conversation or message id"));
      return;
    }
    const conversationId = tenantConversationId(tenant, path);
    const message = await backend.store.message(conversationId, messageId);
    if (message === undefined) {
      sendProblem(res, problem(404, "not_found", "No such message", `no message ${messageId} in ${path}`));
      return;
    }
    const turns = message.state === "answered" ? await backend.store.turnsOf(conversationId, messageId) : [];
    res.json({ messageId, state: message.state, turns: turns.map((t) => ({ turnIndex: t.turnIndex, stopReason: t.stopReason })) });
  });

  app.post("/api/conversations/:conversationId/messages", express.json({ limit: "16kb" }), async (req, res) => {
    const path = req.params.conversationId;
    if (!CONVERSATION_PATTERN.test(path)) {
      sendProblem(res, problem(400, "invalid_conversation_id", "Invalid conversation id", `must match ${CONVERSATION_PATTERN.source}`));
      return;
    }
    const conversationId = tenantConversationId(tenant, path);
    const header = singleHeader(req, MESSAGE_ID_HEADER);
    if (header === undefined) {
      sendProblem(res, problem(400, "message_id_missing", `${MESSAGE_ID_HEADER} header missing`, "every message carries its client-generated id, reused on every re-send"));
      return;
    }
    // No trimming: a value with extra bytes is a different value, never silently the same id.
    if (header === "many" || !MESSAGE_ID_PATTERN.test(header)) {
      sendProblem(res, problem(400, "message_id_malformed", `${MESSAGE_ID_HEADER} malformed`, `one header line matching ${MESSAGE_ID_PATTERN.source}`));
      return;
    }
    const messageId = header;
    const text = (req.body as { text?: unknown } | undefined)?.text;
    if (typeof text !== "string" || text.trim().length === 0 || text.length > MAX_TEXT || !text.isWellFormed()) {
      sendProblem(res, problem(400, "invalid_message", "Invalid message", `body must be { "text": a non-empty string of at most ${MAX_TEXT} characters }`));
      return;
    }
    const streaming = (req.get("accept") ?? "").includes("text/event-stream");
    // Headers go out with the first event of this message, so an error known before anything
    // streamed (a stored failure, a busy conversation) still gets its real status.
    const write = (e: ChatStreamEvent) => {
      if (!res.headersSent) {
        res.writeHead(200, { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-store", "x-accel-buffering": "no" });
      }
      if (!res.writableEnded && !res.destroyed) res.write(`event: ${e.event}\ndata: ${JSON.stringify(e.data)}\n\n`);
    };
    const listeners = subscribers.get(slot(conversationId, messageId)) ?? new Set();
    subscribers.set(slot(conversationId, messageId), listeners);
    const listener = (event: RunnerEvent) => {
      const at = { turnIndex: event.turnIndex, attempt: event.attempt };
      if (event.type === "attempt_started") write({ event: "attempt", data: at });
      else if (event.type === "text_delta") write({ event: "text", data: { ...at, text: event.text } });
      else if (event.type === "attempt_discarded") write({ event: "discard", data: { ...at, reason: event.reason } });
      else if (event.type === "call_resolved") {
        write({ event: "tool", data: { ...at, name: event.name, ok: event.ok, ...(event.replayed !== undefined ? { replayed: event.replayed } : {}) } });
      }
    };
    if (streaming) listeners.add(listener);
    // A browser that goes away does not stop the turn: it commits, and a re-send of the same
    // id returns the stored answer.
    try {
      // An id already stored with other text is refused by the runner before anything runs
      // (message_id_reused, TURN-20): a 422 below, never the stored message's answer.
      const result = await backend.runner.send(conversationId, { id: messageId, content: text });
      const answer = answerOf(path, result);
      if (streaming) write({ event: "answer", data: answer });
      else res.json(answer);
    } catch (error) {
      const body = problemForSendError(error, { conversationId: path, messageId });
      if (streaming && res.headersSent) write({ event: "problem", data: body });
      else sendProblem(res, body);
    } finally {
      listeners.delete(listener);
      if (listeners.size === 0) subscribers.delete(slot(conversationId, messageId));
      if (!res.writableEnded) res.end();
    }
  });

  // express.json's errors (bad JSON, too large, wrong charset) as problem documents too.
  app.use((error: unknown, _req: Request, res: Response, next: NextFunction) => {
    if (res.headersSent) {
      next(error);
      return;
    }
    const status = (error as { status?: unknown }).status;
    if (typeof status === "number" && status >= 400 && status < 500) {
      sendProblem(res, problem(status, status === 413 ? "payload_too_large" : "malformed_request", "Malformed request", (error as Error).message));
      return;
    }
    sendProblem(res, problem(500, "internal_error", "Internal error", "unexpected error", { retryable: "same_message", effect: "possibly" }));
  });
  return app;
}
