import type { Ledger } from "@dispatch-once/core";
import { TurnFailedError, type RunnerEvent } from "@dispatch-once/anthropic";
import { PROVIDER_API, type DemoProvider } from "./providers.js";
import { paymentMessage, startSide, type PaymentArgs, type Side } from "./world.js";

// In a module of their own, without imports: the CLI's thread reads them (options, printout) and loads no SDK.
export { DEMO_PROVIDERS, PROVIDER_API, type DemoProvider } from "./providers.js";

/** The events that bound the window on each provider's stream (spec STREAM-7, STREAM-20), for the timelines. */
export const STREAM_EVENTS: Record<DemoProvider, { callDone: string; finish: string; callIdPrefix: string }> = {
  anthropic: { callDone: "content_block_stop", finish: "message_stop", callIdPrefix: "toolu_" },
  openai: { callDone: "response.output_item.done", finish: "response.completed", callIdPrefix: "call_" },
  // A call is final at the next index's first fragment (here check_balance's) or at finish_reason.
  "openai-chat": { callDone: "check_balance's first fragment (the next tool_calls index)", finish: "finish_reason", callIdPrefix: "call_" },
  "ai-sdk": { callDone: "tool-call", finish: "response.completed", callIdPrefix: "call_" },
};

/** The chapter's figures for the incident. */
export const CHAPTER = {
  /** The dispatcher's call to the payments API. */
  paymentsMs: 820,
  /** The provider's gap between the last content block stopping and message_stop. */
  gapMs: 240,
  /** Stream failures per turn. */
  failureRate: 0.006,
  /** Share of stream failures that land after dispatch (inside the window). */
  windowShare: 0.11,
} as const;

/** Where the reset lands: this long after the payment was accepted, inside the 240 ms gap. */
export const RESET_AFTER_ACCEPT_MS = 120;

export type TimelineKind =
  | "attempt_started"
  | "dispatched"
  | "payment_accepted"
  | "stream_reset"
  | "retry_scheduled"
  | "replayed_from_ledger"
  | "ran_again"
  | "turn_committed"
  | "answered"
  | "turn_failed";

export interface TimelineEntry {
  /** Milliseconds from the start of the incident run. */
  atMs: number;
  kind: TimelineKind;
  attempt: number;
  text: string;
}

export interface IncidentSide {
  payments: number;
  paymentIds: string[];
  /** The provider call ids (toolu_…, call_…) of the send_payment call in each attempt: new per response. */
  callIds: string[];
  /** The Idempotency-Key each POST carried. */
  idempotencyKeys: string[];
  /** What the retry's dispatch did. */
  retryDispatch: "ran_again" | "replayed_from_ledger" | "none";
  failurePosition: string | undefined;
  timeline: TimelineEntry[];
  /**
   * The window on the first attempt (ms from start): dispatch, payment accepted, the handler back
   * on the stream (call resolved), the reset, and when message_stop was due (the provider's gap
   * after the handler returned to the stream).
   */
  window: { dispatchMs: number; acceptedMs: number; resolvedMs: number; resetMs: number; messageStopDueMs: number } | undefined;
  durationMs: number;
}

export interface IncidentResult {
  /** The stream side it ran on; absent in results written before the option existed means "anthropic". */
  provider: DemoProvider;
  /** The API it spoke (PROVIDER_API), so a printout or a JSON result says which one ran. */
  api: string;
  /** That stream's event names: where a call completes, what finishes a response. */
  events: (typeof STREAM_EVENTS)[DemoProvider];
  timeScale: number;
  paymentsMs: number;
  gapMs: number;
  resetAfterAcceptMs: number;
  naive: IncidentSide;
  guarded: IncidentSide;
}

export const INCIDENT_PAYMENT: PaymentArgs = {
  payee: "acme-supplies",
  amount: 1_250_000,
  currency: "EUR",
  reference: "INV-1042",
  memo: "Invoice 1042, March deliveries",
};

/** The chapter's incident, naive and guarded side by side (each in its own world, run concurrently). */
export async function runIncident(options: { ledger: Ledger; runId: string; seed: string; timeScale: number; provider?: DemoProvider }): Promise<IncidentResult> {
  const provider = options.provider ?? "anthropic";
  // The AI SDK (and OpenAI's) modules load only for a run that uses them: every thread of the
  // demo would otherwise keep them in memory.
  const replay = provider === "ai-sdk" ? (await import("./ai-sdk.js")).replayAiSdkIncident : replayIncident;
  const [naive, guarded] = await Promise.all([
    replay({ ...options, provider, guarded: false }),
    replay({ ...options, provider, guarded: true }),
  ]);
  return {
    provider,
    api: PROVIDER_API[provider],
    events: STREAM_EVENTS[provider],
    timeScale: options.timeScale,
    paymentsMs: CHAPTER.paymentsMs * options.timeScale,
    gapMs: CHAPTER.gapMs * options.timeScale,
    resetAfterAcceptMs: RESET_AFTER_ACCEPT_MS * options.timeScale,
    naive,
    guarded,
  };
}

async function replayIncident(options: {
  ledger: Ledger;
  runId: string;
  seed: string;
  timeScale: number;
  guarded: boolean;
  provider: DemoProvider;
}): Promise<IncidentSide> {
  const words = STREAM_EVENTS[options.provider];
  const scale = options.timeScale;
  const started = Date.now();
  const at = () => Date.now() - started;
  const timeline: TimelineEntry[] = [];
  const add = (kind: TimelineKind, attempt: number, text: string, atMs = at()) => timeline.push({ atMs, kind, attempt, text });
  let currentAttempt = 0;
  let side: Side | undefined;
  const acceptedAt: number[] = [];
  const idempotencyKeys: string[] = [];
  const paymentIds: string[] = [];
  try {
    side = await startSide({
      guarded: options.guarded,
      ledger: options.ledger,
      paymentsLatencyMs: CHAPTER.paymentsMs * scale,
      // The Anthropic side sets its timings per request below; the OpenAI mock keeps the gap throughout.
      ...(options.provider === "openai" || options.provider === "openai-chat"
        ? { stream: options.provider, providerTiming: { beforeMessageStopMs: CHAPTER.gapMs * scale } }
        : { providerTiming: {} }),
      seed: options.seed,
      onEffect: (effect) => {
        if (effect.kind !== "payment_created") return;
        acceptedAt.push(at());
        idempotencyKeys.push(effect.idempotencyKey ?? "(none)");
        paymentIds.push(effect.resourceId);
        add("payment_accepted", currentAttempt, `payments API accepted ${effect.resourceId} (Idempotency-Key ${shorten(effect.idempotencyKey)})`);
      },
    });
    const provider = side.stream;
    // First attempt: the stream is held where message_stop would go and cut once the payment is
    // accepted, so the reset lands inside the window by construction, not by timing luck.
    let cutRequest: number | undefined;
    // The chapter's handler is away for the payment (820 ms), then the provider takes its 240 ms
    // before message_stop: the payment turn's stream stays open through both, one after the other.
    const paymentTurnTiming = { afterBlockStopMs: CHAPTER.paymentsMs * scale, beforeMessageStopMs: CHAPTER.gapMs * scale };
    if (options.provider === "anthropic") side.provider.setFaultPlan((_request, info) => {
      if (info.headers["x-demo-turn-index"] !== "0") return undefined;
      if (cutRequest !== undefined || info.headers["x-demo-attempt"] !== "1") return { kind: "timing", timing: paymentTurnTiming };
      cutRequest = info.requestNumber;
      return { kind: "hold", at: { beforeMessageStop: true }, timing: { ...paymentTurnTiming, beforeMessageStopMs: 0 } };
    });
    // The OpenAI streams the same way, in the demo's own fault terms: the first attempt's payment
    // response is held where response.completed goes (after the call's output_item.done), or on
    // Chat Completions where finish_reason goes (the payment made final by check_balance's first fragment).
    else
      provider.setFaultPlan((info) => {
        if (cutRequest !== undefined || info.headers["x-demo-turn-index"] !== "0" || info.headers["x-demo-attempt"] !== "1") return undefined;
        cutRequest = info.requestNumber;
        return { kind: "hold", at: "before_finish" };
      });
    const callIds: string[] = [];
    let dispatchMs: number | undefined;
    let resolvedMs: number | undefined;
    let resetMs: number | undefined;
    let failurePosition: string | undefined;
    let retryDispatch: IncidentSide["retryDispatch"] = "none";
    const onEvent = (event: RunnerEvent) => {
      if (event.turnIndex !== 0) {
        if (event.type === "turn_committed") add("answered", event.attempt, "the model confirms the payment; the message is answered");
        return;
      }
      // The timeline follows the payment; the Chat Completions side's check_balance is a read beside it.
      if ((event.type === "call_complete" || event.type === "call_resolved") && event.name !== "send_payment") return;
      const t = event.at - started;
      switch (event.type) {
        case "attempt_started":
          currentAttempt = event.attempt;
          add("attempt_started", event.attempt, event.attempt === 1 ? "request sent to the provider" : "retry: the same request sent again (nothing was committed)", t);
          break;
        case "call_complete":
          callIds.push(event.callId);
          if (event.attempt === 1) dispatchMs = t;
          add("dispatched", event.attempt, `send_payment complete (${event.callId}): dispatched at ${words.callDone}`, t);
          break;
        case "call_resolved":
          if (event.attempt === 1) resolvedMs = t;
          if (event.attempt === 1 && cutRequest !== undefined) {
            const request = cutRequest;
            setTimeout(() => {
              void provider.waitForHold(request).then(() => provider.cutNow(request, "reset"));
            }, RESET_AFTER_ACCEPT_MS * scale);
          }
          if (event.attempt > 1) {
            retryDispatch = event.replayed ? "replayed_from_ledger" : "ran_again";
            add(
              retryDispatch,
              event.attempt,
              event.replayed
                ? "the retry's dispatch found the key completed in the ledger: first payment's result replayed, payments API not called"
                : "the retry's dispatch ran the tool again: a second payment",
              t,
            );
          }
          break;
        case "stream_failed":
          resetMs = t;
          failurePosition = event.position;
          add("stream_reset", event.attempt, `connection reset before ${words.finish} (position ${event.position})`, t);
          break;
        case "retry_scheduled":
          add("retry_scheduled", event.attempt, `retry scheduled in ${event.delayMs} ms`, t);
          break;
        case "turn_committed":
          add("turn_committed", event.attempt, `${words.finish} received: the turn is committed to the conversation`, t);
          break;
        case "turn_failed":
          add("turn_failed", event.attempt, `the turn failed: ${event.record.error.message}`, t);
          break;
      }
    };
    const runnerOptions = {
      retry: { attempts: 3, backoffMs: (n: number) => Math.max(1, Math.round(100 * 2 ** (n - 1) * scale)) },
      requestHeaders: (info: { attempt: number; turnIndex: number }) => ({ "x-demo-attempt": String(info.attempt), "x-demo-turn-index": String(info.turnIndex) }),
      onEvent,
    };
    const conversationId = `${options.runId}-incident-${options.guarded ? "guarded" : "naive"}`;
    const message = { id: "msg-1", content: paymentMessage(INCIDENT_PAYMENT) };
    if (!options.guarded && side.stream.kind === "openai-chat") {
      // The naive app on Chat Completions is its own loop over the SDK (openai.ts), not a runner.
      const { naiveChatLoop } = await import("./openai.js");
      await naiveChatLoop(side.stream, side.dispatcher, conversationId, message, { attempts: runnerOptions.retry.attempts, backoffMs: runnerOptions.retry.backoffMs, requestHeaders: runnerOptions.requestHeaders, onEvent });
    } else {
      // Any stream side's runner: the same send() over the shared runner.
      try {
        await side.runner(runnerOptions).send(conversationId, message);
      } catch (error) {
        if (!(error instanceof TurnFailedError)) throw error;
      }
    }
    timeline.sort((a, b) => a.atMs - b.atMs);
    const window =
      dispatchMs !== undefined && acceptedAt[0] !== undefined && resolvedMs !== undefined && resetMs !== undefined
        ? {
            dispatchMs,
            acceptedMs: acceptedAt[0],
            resolvedMs,
            resetMs,
            messageStopDueMs: resolvedMs + CHAPTER.gapMs * scale,
          }
        : undefined;
    return {
      payments: side.payments.effects({ kind: "payment_created" }).length,
      paymentIds,
      callIds,
      idempotencyKeys,
      retryDispatch,
      failurePosition,
      timeline,
      window,
      durationMs: at(),
    };
  } finally {
    await side?.close();
  }
}

export function shorten(key: string | null): string {
  if (key === null) return "none";
  return key.length > 20 ? `${key.slice(0, 16)}…` : key;
}
