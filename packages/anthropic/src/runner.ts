import type Anthropic from "@anthropic-ai/sdk";
import {
  DispatchOnceError,
  type CallDispatcher,
  type DispatchOutcome,
  type JsonValue,
  type ProviderToolSchema,
  type StoredError,
  type TurnDispatch,
} from "@dispatch-once/core";
import { TurnAccumulator, type CallState, type FailurePosition } from "./accumulator.js";
import type { ConversationStore, UserContent } from "./conversation.js";
import type { FailedCallRecord, FailedTurnRecord } from "./record.js";

/** A stream that ended without message_stop; the SDK raises nothing for a clean close (STREAM-1). */
export class StreamIncompleteError extends Error {
  readonly code = "stream_incomplete";
  constructor(eventsSeen: number) {
    super(`the stream ended after ${eventsSeen} events without message_stop`);
    this.name = "StreamIncompleteError";
  }
}

/** A turn that could not be completed within the retry policy; carries the failed-turn record. */
export class TurnFailedError extends Error {
  readonly code = "turn_failed";
  readonly record: FailedTurnRecord;
  constructor(record: FailedTurnRecord) {
    super(`turn ${record.turnIndex} of ${record.conversationId} failed (${record.position}): ${record.error.message}`);
    this.name = "TurnFailedError";
    this.record = record;
  }
}

export type AttemptFailure =
  | { kind: "stream"; position: FailurePosition; error: unknown }
  /** The stream finished but a dispatched call could not be resolved (in flight elsewhere, unknown, released). */
  | { kind: "call"; error: unknown; calls: FailedCallRecord[] };

export interface RetryPolicy {
  /** Attempts of one turn, the first included. */
  attempts: number;
  /** Delay before retry number n (1 for the first retry). */
  backoffMs(retry: number): number;
  shouldRetry(failure: AttemptFailure): boolean;
}

/** Client errors that a retry cannot fix: a malformed request, bad credentials. */
function isPermanentRequestError(error: unknown): boolean {
  const status = (error as { status?: unknown } | undefined)?.status;
  return typeof status === "number" && status >= 400 && status < 500 && ![408, 409, 429].includes(status);
}

export const defaultRetryPolicy: RetryPolicy = {
  attempts: 3,
  backoffMs: (retry) => 100 * 2 ** (retry - 1),
  // A retry is safe at every position because the ledger answers repeats (STREAM-5); only an
  // unknown outcome is left for a human, since nothing can make it known by asking again.
  shouldRetry: (failure) =>
    failure.kind === "stream"
      ? !isPermanentRequestError(failure.error)
      : !failure.calls.some((c) => c.status === "outcome_unknown"),
};

export type RunnerEvent = { at: number; conversationId: string; turnIndex: number; attempt: number } & (
  | { type: "attempt_started" }
  | { type: "call_complete"; callId: string; name: string; index: number }
  | { type: "call_resolved"; callId: string; name: string; key?: string; replayed?: boolean; ok: boolean; error?: string }
  | { type: "call_abandoned"; callId: string; name: string; partialArguments: string }
  | { type: "stream_failed"; position: FailurePosition; error: string }
  | { type: "call_unresolved"; error: string }
  | { type: "retry_scheduled"; delayMs: number }
  | { type: "turn_committed"; committed: boolean; stopReason: string | null }
  | { type: "turn_failed"; record: FailedTurnRecord }
);

export interface ConversationRunnerOptions {
  client: Anthropic;
  dispatcher: CallDispatcher;
  store: ConversationStore;
  model: string;
  tools: ProviderToolSchema[];
  maxTokens?: number;
  system?: string;
  retry?: Partial<RetryPolicy>;
  /** Model responses per send() before giving up on the tool-use loop. Default 8. */
  maxTurns?: number;
  /** Extra request headers per attempt (tracing, or fault injection against a mock provider). */
  requestHeaders?: (info: { conversationId: string; turnIndex: number; attempt: number }) => Record<string, string>;
  onEvent?: (event: RunnerEvent) => void;
}

export interface CallReport {
  callId: string;
  name: string;
  key?: string;
  ordinal?: number;
  replayed?: boolean;
  result?: JsonValue;
  error?: StoredError;
}

export interface TurnOutcome {
  conversationId: string;
  turnIndex: number;
  attempts: number;
  /** False when another attempt of the same turn committed first (TURN-5); this one's content was discarded. */
  committed: boolean;
  stopReason: string | null;
  text: string;
  calls: CallReport[];
}

export interface SendResult {
  conversationId: string;
  messageId: string;
  /** False when the message id was already known: a re-send, a redelivery, a double click (TURN-2). */
  appended: boolean;
  status: "answered" | "turn_limit";
  turns: TurnOutcome[];
}

type Resolution = { ok: true; outcome: DispatchOutcome } | { ok: false; error: unknown };

/** Dispatcher errors that are themselves an established answer for the model: sent as is_error results. */
const COMMITTABLE_ERRORS = new Set(["tool_failed", "tool_input_invalid", "unknown_tool", "result_not_storable", "invalid_arguments_json"]);

function errorCode(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  return typeof code === "string" ? code : undefined;
}

function storedErrorOf(error: unknown): StoredError {
  if (error instanceof DispatchOnceError && error.code === "tool_failed") {
    return (error as unknown as { error: StoredError }).error;
  }
  const stored: StoredError = {
    name: error instanceof Error ? error.name : "Error",
    message: error instanceof Error ? error.message : String(error),
  };
  const code = errorCode(error);
  if (code !== undefined) stored.code = code;
  return stored;
}

/**
 * Runs conversations over the real SDK: dispatches each tool call the moment its
 * content_block_stop arrives, retries failed streams, and commits a turn only when the
 * stream established it (message_stop seen, every call resolved) (RECORD-3).
 */
export class ConversationRunner {
  private readonly options: ConversationRunnerOptions;
  private readonly retry: RetryPolicy;

  constructor(options: ConversationRunnerOptions) {
    this.options = options;
    this.retry = { ...defaultRetryPolicy, ...options.retry };
  }

  /** Add a user message (idempotent on its id) and run the tool-use loop until the model ends its turn. */
  async send(conversationId: string, message: { id: string; content: UserContent }): Promise<SendResult> {
    const append = await this.options.store.appendUserMessage(conversationId, message);
    const result: SendResult = { conversationId, messageId: message.id, appended: append.appended, status: "answered", turns: [] };
    if (append.answered) return result;
    const maxTurns = this.options.maxTurns ?? 8;
    while (result.turns.length < maxTurns) {
      const snapshot = await this.options.store.load(conversationId);
      // Another route (a concurrent redelivery) may have finished the answer already.
      if (snapshot.pendingMessageId === undefined) return result;
      const outcome = await this.runTurn(conversationId);
      result.turns.push(outcome);
      if (outcome.committed && outcome.stopReason !== "tool_use") return result;
    }
    result.status = "turn_limit";
    return result;
  }

  /** One model response at the conversation's next turn index, retried per the policy. */
  async runTurn(conversationId: string): Promise<TurnOutcome> {
    const { store } = this.options;
    let turnIndex = -1;
    let lastFailure: AttemptFailure | undefined;
    let lastAccumulator: TurnAccumulator | undefined;
    let lastResolutions = new Map<number, Resolution>();
    let attempt = 0;
    for (;;) {
      attempt++;
      const snapshot = await store.load(conversationId);
      if (turnIndex === -1) turnIndex = snapshot.turnCount;
      else if (snapshot.turnCount !== turnIndex) {
        // Another attempt of this turn committed while we were retrying.
        return { conversationId, turnIndex, attempts: attempt - 1, committed: false, stopReason: null, text: "", calls: [] };
      }
      const run = await this.attempt(snapshot.messages, conversationId, turnIndex, attempt);
      if (run.failure === undefined) {
        return this.commit(conversationId, turnIndex, attempt, run.accumulator, run.resolutions);
      }
      lastFailure = run.failure;
      lastAccumulator = run.accumulator;
      lastResolutions = run.resolutions;
      if (attempt >= this.retry.attempts || !this.retry.shouldRetry(run.failure)) break;
      const delayMs = this.retry.backoffMs(attempt);
      this.emit({ type: "retry_scheduled", conversationId, turnIndex, attempt, delayMs });
      await new Promise((resolve) => setTimeout(resolve, delayMs));
    }
    const record = this.failedTurnRecord(conversationId, turnIndex, attempt, lastFailure, lastAccumulator, lastResolutions);
    await store.recordFailedTurn(record);
    this.emit({ type: "turn_failed", conversationId, turnIndex, attempt, record });
    throw new TurnFailedError(record);
  }

  private async attempt(
    messages: Anthropic.Messages.MessageParam[],
    conversationId: string,
    turnIndex: number,
    attempt: number,
  ): Promise<{ accumulator: TurnAccumulator; resolutions: Map<number, Resolution>; failure?: AttemptFailure }> {
    const { client, dispatcher, model, tools } = this.options;
    const info = { conversationId, turnIndex, attempt };
    const accumulator = new TurnAccumulator();
    const resolutions = new Map<number, Resolution>();
    const turn = dispatcher.turn({ conversationId, turnIndex });
    const dispatches: Promise<void>[] = [];
    let failure: AttemptFailure | undefined;
    this.emit({ type: "attempt_started", ...info });
    try {
      const headers = this.options.requestHeaders?.(info);
      const stream = await client.messages.create(
        {
          model,
          max_tokens: this.options.maxTokens ?? 1024,
          messages,
          ...(tools.length > 0 ? { tools: tools as Anthropic.Messages.ToolUnion[] } : {}),
          ...(this.options.system !== undefined ? { system: this.options.system } : {}),
          stream: true,
        },
        headers !== undefined ? { headers } : undefined,
      );
      for await (const event of stream) {
        const complete = accumulator.apply(event);
        // Dispatch at content_block_stop, as latency-minded handlers do (STREAM-4).
        if (complete !== undefined) dispatches.push(this.dispatchCall(turn, complete, resolutions, info));
      }
      if (!accumulator.messageStopped) throw new StreamIncompleteError(accumulator.eventsSeen);
    } catch (error) {
      // Read the position now: calls still running belong to "during_dispatch" (STREAM-2).
      const position = accumulator.failurePosition();
      for (const call of accumulator.abandonOpenCalls()) {
        this.emit({ type: "call_abandoned", ...info, callId: call.callId, name: call.name, partialArguments: call.partialJson });
      }
      failure = { kind: "stream", position, error };
      this.emit({ type: "stream_failed", ...info, position, error: describe(error) });
    }
    // A dispatched call is never cancelled by the stream's death: wait for its outcome (STREAM-6).
    await Promise.all(dispatches);
    if (failure === undefined) {
      const unresolved = accumulator.calls.filter((call) => {
        const resolution = resolutions.get(call.index);
        return resolution !== undefined && !resolution.ok && !COMMITTABLE_ERRORS.has(errorCode(resolution.error) ?? "");
      });
      if (unresolved.length > 0) {
        const first = resolutions.get(unresolved[0]!.index) as { ok: false; error: unknown };
        const calls = this.callRecords(accumulator, resolutions);
        failure = { kind: "call", error: first.error, calls };
        this.emit({ type: "call_unresolved", ...info, error: describe(first.error) });
      }
    }
    return failure === undefined ? { accumulator, resolutions } : { accumulator, resolutions, failure };
  }

  private async dispatchCall(
    turn: TurnDispatch,
    call: CallState,
    resolutions: Map<number, Resolution>,
    info: { conversationId: string; turnIndex: number; attempt: number },
  ): Promise<void> {
    this.emit({ type: "call_complete", ...info, callId: call.callId, name: call.name, index: call.index });
    call.phase = "dispatched";
    let resolution: Resolution;
    if (call.inputError !== undefined) {
      const error = Object.assign(new Error(`arguments are not JSON: ${call.inputError}`), { code: "invalid_arguments_json" });
      resolution = { ok: false, error };
    } else {
      try {
        resolution = { ok: true, outcome: await turn.dispatch({ name: call.name, input: call.input, callId: call.callId }) };
      } catch (error) {
        resolution = { ok: false, error };
      }
    }
    resolutions.set(call.index, resolution);
    call.phase = "resolved";
    this.emit({
      type: "call_resolved",
      ...info,
      callId: call.callId,
      name: call.name,
      ok: resolution.ok,
      ...(resolution.ok
        ? { key: resolution.outcome.key, replayed: resolution.outcome.replayed }
        : { error: describe(resolution.error) }),
    });
  }

  private async commit(
    conversationId: string,
    turnIndex: number,
    attempts: number,
    accumulator: TurnAccumulator,
    resolutions: Map<number, Resolution>,
  ): Promise<TurnOutcome> {
    const content = accumulator.content();
    const calls: CallReport[] = [];
    const toolResults: Anthropic.Messages.ToolResultBlockParam[] = [];
    for (const call of accumulator.calls) {
      const resolution = resolutions.get(call.index);
      if (resolution === undefined) continue;
      if (resolution.ok) {
        const { outcome } = resolution;
        calls.push({ callId: call.callId, name: call.name, key: outcome.key, ordinal: outcome.ordinal, replayed: outcome.replayed, result: outcome.result });
        toolResults.push({ type: "tool_result", tool_use_id: call.callId, content: outcome.resultJson });
      } else {
        const error = storedErrorOf(resolution.error);
        calls.push({ callId: call.callId, name: call.name, error });
        toolResults.push({ type: "tool_result", tool_use_id: call.callId, content: JSON.stringify({ error }), is_error: true });
      }
    }
    const { committed } = await this.options.store.commitTurn(conversationId, {
      turnIndex,
      assistant: { role: "assistant", content: content as Anthropic.Messages.ContentBlockParam[] },
      ...(toolResults.length > 0 ? { toolResults: { role: "user" as const, content: toolResults } } : {}),
      stopReason: accumulator.stopReason,
    });
    this.emit({ type: "turn_committed", conversationId, turnIndex, attempt: attempts, committed, stopReason: accumulator.stopReason });
    const text = content.flatMap((b) => (b.type === "text" ? [b.text] : [])).join("");
    return { conversationId, turnIndex, attempts, committed, stopReason: accumulator.stopReason, text, calls };
  }

  private callRecords(accumulator: TurnAccumulator, resolutions: Map<number, Resolution>): FailedCallRecord[] {
    return accumulator.calls.map((call): FailedCallRecord => {
      const base = { index: call.index, callId: call.callId, name: call.name };
      const resolution = resolutions.get(call.index);
      if (call.phase === "abandoned" || resolution === undefined) {
        return { ...base, status: "not_run", summary: "not run (connection lost)", partialArguments: call.partialJson };
      }
      if (resolution.ok) {
        return {
          ...base,
          status: "completed",
          summary: resolution.outcome.replayed ? "completed earlier (result replayed)" : "completed",
          key: resolution.outcome.key,
          result: resolution.outcome.result,
        };
      }
      const code = errorCode(resolution.error);
      const error = storedErrorOf(resolution.error);
      const key = (resolution.error as { key?: unknown }).key;
      const withKey = typeof key === "string" ? { key } : {};
      switch (code) {
        case "tool_failed":
          return { ...base, ...withKey, status: "failed", summary: `failed: ${error.message}`, error };
        case "in_flight_elsewhere":
          return { ...base, ...withKey, status: "in_flight_elsewhere", summary: "still running in another attempt", error };
        case "outcome_unknown":
          return { ...base, ...withKey, status: "outcome_unknown", summary: "outcome unknown; will not be re-run", error };
        default:
          return { ...base, ...withKey, status: "error", summary: `error: ${error.message}`, error };
      }
    });
  }

  private failedTurnRecord(
    conversationId: string,
    turnIndex: number,
    attempts: number,
    failure: AttemptFailure | undefined,
    accumulator: TurnAccumulator | undefined,
    resolutions: Map<number, Resolution>,
  ): FailedTurnRecord {
    const calls = accumulator === undefined ? [] : this.callRecords(accumulator, resolutions);
    return {
      conversationId,
      turnIndex,
      attempts,
      position: failure?.kind === "stream" ? failure.position : "call_unresolved",
      error: storedErrorOf(failure?.error),
      calls,
      at: new Date().toISOString(),
    };
  }

  private emit(event: Omit<RunnerEvent, "at"> & Record<string, unknown>): void {
    this.options.onEvent?.({ at: Date.now(), ...event } as RunnerEvent);
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}
