import { createOpenAI } from "@ai-sdk/openai";
import type { Ledger } from "@dispatch-once/core";
import { createOnceTools, dispatchOnceOf } from "@dispatch-once/ai-sdk";
import { createPaymentsClient } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, tool, type ModelMessage, type ToolSet } from "ai";
import { z } from "zod";
import { CHAPTER, INCIDENT_PAYMENT, RESET_AFTER_ACCEPT_MS, shorten, type IncidentSide, type TimelineEntry, type TimelineKind } from "./incident.js";
import { OPENAI_MODEL } from "./openai.js";
import { PAYMENTS_ACCOUNT_TOKEN, paymentMessage, startSide, type Side } from "./world.js";

/** The fields that identify a payment; the memo is free text a retried response may re-word. */
const PAYMENT_IDENTITY = ["payee", "amount", "currency", "reference"] as const;

/**
 * The demo's send_payment as an app writes it for the Vercel AI SDK: `tool({ inputSchema,
 * execute })`. Its Idempotency-Key is the call's Dispatch-Once key when wrapped, else the
 * provider's call id (what a naive handler has, as on the other stream sides).
 */
function sendPaymentTool(side: Side) {
  const api = createPaymentsClient({ baseURL: side.payments.url, token: PAYMENTS_ACCOUNT_TOKEN });
  return tool({
    description: "Send a payment to a payee. Amount in minor units (cents).",
    inputSchema: z.object({
      payee: z.string().min(1),
      amount: z.number().int().positive(),
      currency: z.string().regex(/^[A-Z]{3}$/),
      reference: z.string().min(1),
      memo: z.string().optional(),
    }),
    execute: async (args, options) => {
      const idempotencyKey = dispatchOnceOf(options)?.idempotencyKey ?? options.toolCallId;
      const { body } = await api.createPayment(args, { idempotencyKey });
      return { paymentId: body.id, status: "accepted", amount: args.amount, currency: args.currency, payee: args.payee };
    },
  });
}

/**
 * The incident through the real `ai` package: `streamText` over `@ai-sdk/openai`'s Responses
 * model pointed at the mock Responses API. The AI SDK runs a tool when the model's step has
 * finished, so the cut that repeats a payment is the one after it: the payment step is done,
 * the model's confirmation is streaming, the connection resets before its response.completed.
 * A mid-stream error bypasses the AI SDK's `maxRetries`, so the app re-sends the turn (the same
 * messages), as a regenerate or a resubmit does. Naive: the app's tools as written, which run
 * again. Guarded: the same tools through `createOnceTools`, whose ledger answers the repeat.
 */
export async function replayAiSdkIncident(options: { ledger: Ledger; runId: string; seed: string; timeScale: number; guarded: boolean }): Promise<IncidentSide> {
  const scale = options.timeScale;
  const started = Date.now();
  const at = () => Date.now() - started;
  const timeline: TimelineEntry[] = [];
  const add = (kind: TimelineKind, attempt: number, text: string) => timeline.push({ atMs: at(), kind, attempt, text });
  const idempotencyKeys: string[] = [];
  const paymentIds: string[] = [];
  const callIds: string[] = [];
  let attempt = 0;
  let cutAfterAccept: (() => void) | undefined;
  const side = await startSide({
    guarded: options.guarded,
    ledger: options.ledger,
    stream: "openai",
    paymentsLatencyMs: CHAPTER.paymentsMs * scale,
    providerTiming: { beforeMessageStopMs: CHAPTER.gapMs * scale },
    seed: options.seed,
    onEffect: (effect) => {
      if (effect.kind !== "payment_created") return;
      idempotencyKeys.push(effect.idempotencyKey ?? "(none)");
      paymentIds.push(effect.resourceId);
      add("payment_accepted", attempt, `payments API accepted ${effect.resourceId} (Idempotency-Key ${shorten(effect.idempotencyKey)})`);
      if (attempt === 1) cutAfterAccept?.();
    },
  });
  try {
    if (side.stream.kind !== "openai") throw new Error("the AI SDK incident runs against the mock Responses API");
    const mock = side.stream.mock;
    // The first confirmation response (its input ends with the payment's function_call_output)
    // is held where response.completed goes and reset RESET_AFTER_ACCEPT_MS after the payment
    // was accepted: the payment step has finished by then, by construction, not by timing luck.
    let held = false;
    mock.setFaultPlan((request) => {
      const last = Array.isArray(request.input) ? request.input.at(-1) : undefined;
      if (held || last?.type !== "function_call_output") return undefined;
      held = true;
      return { kind: "hold", at: { beforeCompleted: true } };
    });
    cutAfterAccept = () =>
      setTimeout(() => {
        void mock.waitForHold(undefined, { timeoutMs: 30_000 }).then(
          (hold) => mock.cutNow(hold.requestNumber, "reset"),
          () => undefined,
        );
      }, RESET_AFTER_ACCEPT_MS * scale);
    const model = createOpenAI({ baseURL: mock.baseURL, apiKey: "demo-key" }).responses(OPENAI_MODEL);
    const tools = { send_payment: sendPaymentTool(side) };
    const once = options.guarded
      ? createOnceTools({
          tools,
          effects: { send_payment: "keyed_write" },
          identity: { send_payment: PAYMENT_IDENTITY },
          ledger: options.ledger,
          dispatcher: { logger: { warn: () => {} } },
        })
      : undefined;
    const conversationId = `${options.runId}-incident-aisdk-${options.guarded ? "guarded" : "naive"}`;
    const messages: ModelMessage[] = [{ role: "user", content: paymentMessage(INCIDENT_PAYMENT) }];
    let failurePosition: string | undefined;
    let retryDispatch: IncidentSide["retryDispatch"] = "none";
    for (attempt = 1; attempt <= 3; attempt++) {
      add("attempt_started", attempt, attempt === 1 ? "streamText: the turn's request sent to the provider" : "retry: the app re-sends the turn's messages (a regenerate)");
      const turnTools: ToolSet = once?.forTurn({ conversationId, messages }).tools ?? tools;
      const paymentsBefore = paymentIds.length;
      let failed = false;
      const result = streamText({ model, messages, tools: turnTools, stopWhen: stepCountIs(3), maxRetries: 0 });
      try {
        for await (const part of result.fullStream) {
          if (part.type === "tool-call") {
            callIds.push(part.toolCallId);
            add("dispatched", attempt, `send_payment complete (${part.toolCallId}); the AI SDK runs it when the step finishes`);
          } else if (part.type === "tool-result" && attempt > 1) {
            retryDispatch = paymentIds.length > paymentsBefore ? "ran_again" : "replayed_from_ledger";
            add(
              retryDispatch,
              attempt,
              retryDispatch === "ran_again"
                ? "the regenerated step ran the tool again: a second payment"
                : "the regenerated step's call was answered from the ledger: first payment's result, payments API not called",
            );
          } else if (part.type === "error") {
            failed = true;
          }
        }
      } catch {
        failed = true;
      }
      if (!failed) {
        add("turn_committed", attempt, "response.completed received for the confirmation: the turn is answered");
        break;
      }
      failurePosition ??= "after_dispatch_before_stop";
      add("stream_reset", attempt, "connection reset during the model's confirmation, before its response.completed (the payment step had finished)");
    }
    timeline.sort((a, b) => a.atMs - b.atMs);
    return {
      // The payments API's effect log is the oracle, as on the other stream sides.
      payments: side.payments.effects({ kind: "payment_created" }).length,
      paymentIds,
      callIds,
      idempotencyKeys,
      retryDispatch,
      failurePosition,
      timeline,
      window: undefined,
      durationMs: at(),
    };
  } finally {
    await side.close();
  }
}

