import { createOnceTools, dispatchOnceOf, type OnceTurn } from "@dispatch-once/ai-sdk";
import { MemoryLedger, ToolError, effectOf } from "@dispatch-once/core";
import { DISPOSITION_BY_OUTCOME, PaymentsError, createPaymentsClient, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, tool, type LanguageModel, type ModelMessage } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { PAY_ZOE, SEED, cutCases, cutPoints, expectRequestsByFate, otherLineEndings, rechunkCases, responseFate, runAll, type ByteCase, type CutRegion } from "./byte-cut-cases.js";
import type { ByteProxy } from "./byte-proxy.js";

/*
 * The app of the AI SDK side of the byte-level harness (spec §13.2, AISDK-*): `streamText` with its
 * tools wrapped by `createOnceTools`, over whichever provider a side gives it, behind the byte
 * proxy. The app does what the AISDK rules ask of it: it keeps a response (appends
 * `response.messages` to its chat) only when its stream had no `error` part and finished with a
 * reason other than `error` or `other` (AISDK-8); it re-sends the same messages after a failed
 * request, up to 3 requests (AISDK-6); and when they all failed, the user re-sends the message (a
 * resubmit: the same messages again, the same turn, AISDK-1), for up to 3 sends. A failed send
 * tells the user, for each call its requests made, what `turn.outcomeOf(toolCallId)` says once the
 * call settled (AISDK-8: never "did not happen"). The paying responses (the requests whose
 * messages carry no result of the call yet) are cut; the answer after the payment goes whole.
 * See README "Byte-level cuts".
 */

/** What a provider side supplies: its model, how its requests and bodies read. */
export interface AiSdkSide {
  /** The event (or chunk, `dataEvent`) that finishes a response: a response is whole once it was written. */
  finishType: string;
  prompt: string;
  /** The model of one case, whose requests carry the case as the `x-byte-case` header. */
  model(caseId: string): LanguageModel;
  /** The provider ids (call ids, response ids) a response body names: none of a cut response may be kept. */
  idsIn(body: Buffer): string[];
  /** A request of the chat that pays: its messages carry no result of the call yet. */
  isPaying(requestBody: unknown): boolean;
  proxy(): ByteProxy;
  payments(): MockPaymentsServer;
}

/** Polls on the event loop until `condition` holds (no wall-clock assertion), for at most ~`tries` turns of 2 ms. */
async function until(condition: () => boolean, tries = 5_000): Promise<boolean> {
  for (let i = 0; i < tries && !condition(); i++) await new Promise((resolve) => setTimeout(resolve, 2));
  await new Promise((resolve) => setTimeout(resolve, 2));
  return condition();
}

export type Mode = "tool-call" | "step";

export const MODES: { mode: Mode; label: string }[] = [
  { mode: "tool-call", label: 'dispatchAt "tool-call" (onChunk)' },
  { mode: "step", label: 'dispatchAt "step"' },
];

/** What one request (an attempt) of the app saw. */
interface Attempt {
  turn: OnceTurn<Record<string, never>>;
  callIds: string[];
  toolErrors: unknown[];
  failed?: string;
}

let referenceRuns = 0;

/**
 * The cases of one dispatch mode, whose plans cut the paying responses (`"paying"`: the n-th
 * request that pays) or the answers after the payment (`"answer"`: the n-th request that carries
 * the call's output; the next request of the app then pays again, and the ledger answers it).
 */
export function aiSdkCases(side: AiSdkSide, mode: Mode, target: "paying" | "answer" = "paying") {
  const FINISH = side.finishType;
  async function runCase({ id: caseId, plan }: ByteCase): Promise<string | undefined> {
    const { proxy, payments } = { proxy: side.proxy(), payments: side.payments() };
    const account = `acct_${caseId}`;
    let planned = 0;
    proxy.plan(caseId, ({ requestBody }, body) => (side.isPaying(requestBody) === (target === "paying") ? plan(++planned, body) : undefined));
    const client = createPaymentsClient({ baseURL: payments.url, token: account });
    let claims = 0;
    const sendPayment = tool({
      description: "Send a payment to a payee",
      inputSchema: z.object({ payee: z.string(), amount: z.number().int().positive(), currency: z.string().length(3), reference: z.string(), memo: z.string().optional() }),
      execute: async (args, options) => {
        try {
          const payment = await client.createPayment(args, { idempotencyKey: dispatchOnceOf(options)!.idempotencyKey, ...(options.abortSignal ? { signal: options.abortSignal } : {}) });
          return { paymentId: payment.body.id, status: "accepted" };
        } catch (error) {
          if (error instanceof PaymentsError) throw new ToolError(error.message, { disposition: DISPOSITION_BY_OUTCOME[error.outcome], code: error.code, cause: error });
          throw error;
        }
      },
    });
    const once = createOnceTools({
      tools: { send_payment: sendPayment },
      effects: { send_payment: "keyed_write" },
      identity: { send_payment: ["payee", "amount", "currency", "reference"] },
      ledger: new MemoryLedger(),
      dispatcher: {
        waitMs: 10_000,
        pollMs: 2,
        logger: { warn: () => {} },
        // Claims whose outcome is not in the ledger yet: a call started at its tool-call part may outlive its stream.
        onEvent: (event) => void (event.type === "claimed" ? claims++ : event.type === "recorded" || event.type === "record_failed" ? claims-- : 0),
      },
    });
    const model = side.model(caseId);
    const messages: ModelMessage[] = [{ role: "user", content: side.prompt }];

    /** One request: kept when its stream finished (AISDK-8), else nothing is kept. */
    const request = async (): Promise<Attempt> => {
      const turn = once.forTurn({ conversationId: `chat_${caseId}`, messages, dispatchAt: mode }) as unknown as Attempt["turn"];
      const attempt: Attempt = { turn, callIds: [], toolErrors: [] };
      const fail = (why: string) => void (attempt.failed ??= why);
      try {
        const result = streamText({
          model,
          messages,
          tools: turn.tools,
          ...(mode === "tool-call" ? { onChunk: turn.onChunk } : {}),
          stopWhen: stepCountIs(3),
          maxRetries: 0,
          onError: () => {},
        });
        let finished = false;
        for await (const part of result.fullStream) {
          if (part.type === "tool-call") attempt.callIds.push(part.toolCallId);
          else if (part.type === "tool-error") attempt.toolErrors.push(part.error);
          else if (part.type === "error") fail(`error part: ${String((part.error as Error)?.message ?? part.error).slice(0, 80)}`);
          else if (part.type === "finish") {
            finished = true;
            if (part.finishReason === "error" || part.finishReason === "other") fail(`finish reason ${part.finishReason}`);
          }
        }
        if (!finished) fail("no finish part");
        if (attempt.failed === undefined) messages.push(...(await result.response).messages);
      } catch (error) {
        fail(`threw ${String(error).slice(0, 80)}`);
      }
      return attempt;
    };

    const paidKeys = () => payments.effects().flatMap((e) => (e.account === account && e.kind === "payment_created" ? [e.idempotencyKey!] : []));
    /** Until every claimed call has its outcome in the ledger (the wrapper's outcome follows the write within the turn of the event loop `until` waits after). */
    const settled = () => until(() => claims === 0);
    const all: Attempt[] = [];
    // Per failed send: the keys its calls' outcomes name (what the app tells the user), and the keys that had paid.
    const failedSends: { told: string[]; paid: string[] }[] = [];
    let kept: Attempt | undefined;
    for (let send = 1; send <= 3 && kept === undefined; send++) {
      const attempts: Attempt[] = [];
      for (let i = 1; i <= 3 && kept === undefined; i++) {
        const attempt = await request();
        attempts.push(attempt);
        if (attempt.failed === undefined) kept = attempt;
      }
      all.push(...attempts);
      if (kept === undefined) {
        if (!(await settled())) return `send ${send}: a call never settled`;
        failedSends.push({ told: attempts.flatMap((a) => a.callIds.flatMap((id) => a.turn.outcomeOf(id)?.key ?? [])), paid: paidKeys() });
      }
    }
    await settled();
    const requests = proxy.requests.filter((r) => r.caseId === caseId);
    const where = () =>
      `requests ${requests.map((r) => `#${r.number}${side.isPaying(r.requestBody) ? "" : " (answer)"} ${r.sent}/${r.body.length} ${r.end} (${responseFate(r, FINISH)})`).join(", ")}; requests failed: ${all
        .map((a) => a.failed ?? "kept")
        .join(" / ")}`;
    try {
      expect(kept, "the turn was never kept in 3 sends of 3 requests").toBeDefined();
      // Exactly one payment, with the arguments as the model sent them (the UTF-8 intact).
      const made = payments.effects().filter((e) => e.account === account && e.kind === "payment_created");
      expect(made.map((e) => e.payload)).toEqual([PAY_ZOE]);
      const paidKey = made[0]!.idempotencyKey!;
      // The chat holds one call and its one result, of a response the client got whole (AISDK-8).
      const parts = messages.slice(1).flatMap((m) => (Array.isArray(m.content) ? (m.content as { type: string; toolCallId?: string; input?: unknown; output?: { type: string; value: unknown } }[]) : []));
      const calls = parts.filter((p) => p.type === "tool-call");
      const results = parts.filter((p) => p.type === "tool-result");
      expect(calls.map((c) => c.input)).toEqual([PAY_ZOE]);
      expect(results.map((r) => r.toolCallId)).toEqual([calls[0]!.toolCallId]);
      expect(results[0]!.output).toEqual({ type: "json", value: { paymentId: made[0]!.resourceId, status: "accepted" } });
      const callId = calls[0]!.toolCallId!;
      const keeping = requests.find((r) => side.idsIn(r.body).includes(callId));
      expect(keeping, `the kept call ${callId} is of no response this case received`).toBeDefined();
      expect(responseFate(keeping!, FINISH), `the kept call ${callId} is of request #${keeping!.number}, cut before its ${FINISH}`).not.toBe("cut");
      const text = JSON.stringify(messages);
      for (const cut of requests.filter((r) => responseFate(r, FINISH) === "cut")) {
        for (const id of side.idsIn(cut.body)) expect(text, `the chat names ${id} of cut request #${cut.number} (AISDK-8)`).not.toContain(id);
      }
      // The kept call's outcome is the payment's key; no tool error of any request says the payment did not happen (AISDK-5, EFFECT-6).
      expect(kept!.turn.outcomeOf(callId)?.key).toBe(paidKey);
      for (const error of all.flatMap((a) => a.toolErrors)) expect(effectOf(error), `a tool-error says the payment did not happen: ${String(error)}`).not.toBe("no");
      // What a failed send tells the user names every payment made by then (AISDK-8: the wrapper's outcome, never "not done"), and no other key.
      failedSends.forEach(({ told, paid }, i) => {
        for (const key of paid) expect(told, `the outcomes of failed send ${i + 1} do not name the payment made under ${key} (AISDK-8)`).toContain(key);
        for (const key of told) expect(key, `an outcome of failed send ${i + 1} names a key that never paid`).toBe(paidKey);
      });
      return undefined;
    } catch (error) {
      return `${(error as Error).message.split("\n")[0]}; ${where()}`;
    }
  }

  /**
   * The paying response of a whole pass-through, to place the cut points on. Its verdict is the
   * first case's: a bug that fails it still gets every cut case run and counted.
   */
  let reference: { label: string; failure: string | undefined } | undefined;
  async function referenceBody(): Promise<Buffer> {
    const id = `reference-${mode}-${referenceRuns++}`;
    reference = { label: "the whole response (reference)", failure: await runCase({ id, label: "whole", plan: () => undefined }) };
    return side.proxy().requests.find((r) => r.caseId === id && r.number === (target === "paying" ? 1 : 2))!.body;
  }
  /** Runs the cases, counting the reference among them. */
  const run = (cases: readonly ByteCase[]) =>
    runAll(reference === undefined ? cases : [{ id: "reference", label: reference.label, plan: () => undefined }, ...cases], (c) => (c.id === "reference" ? Promise.resolve(reference!.failure) : runCase(c)));
  return { runCase, referenceBody, run };
}

/** Where a provider's bodies are cut: its landmarks, by the event (event stream) or chunk (`dataEvent`) that holds them. */
export interface AiSdkLandmarks {
  /** The regions cut around the call's completion and the finish (FIN at every point, RST at every fifth). */
  regions: CutRegion[];
  /** The event or chunk that completes the call (the same-cut-every-request cases cut its last bytes). */
  callDone: string;
  /** Cut inside the multi-byte characters of the arguments that stream before this event or chunk. */
  nonAsciiBefore: string;
  /** Seeded offsets anywhere in the body. */
  sample: number;
  /**
   * An SSE body: its finishing chunk cut on its first and last bytes with the line endings it does
   * not have too (CRLF for LF; mock-provider's Gemini routes send CRLF, so LF there), and re-chunked
   * so. An event stream is binary: none.
   */
  otherLineEndings: boolean;
}

/**
 * The AI SDK side's cases over a provider (the cloud routes: Converse, Gemini, Gemini on Vertex AI):
 * in `dispatchAt: "tool-call"`, the paying response cut around the call's completion and the finish,
 * inside the multi-byte characters of the arguments and at seeded offsets, by FIN and every fifth by
 * RST; a CRLF body (SSE only) cut on its finishing chunk; the same cut on every request of the first
 * send, then the resubmit, of the paying response (`"tool-call"`) and of the answer after the
 * payment (`"step"`); and the paying response re-chunked (1 byte a write, seeded splits).
 */
export function aiSdkSuite(title: string, side: AiSdkSide, landmarks: AiSdkLandmarks): void {
  describe(`${title} (seed ${SEED})`, () => {
    const toolCall = aiSdkCases(side, "tool-call");

    it(`AISDK-4 AISDK-6 AISDK-8 dispatchAt "tool-call": a cut around the call's completion (${landmarks.callDone}) and the finish (${side.finishType}), inside UTF-8 of the arguments, or elsewhere, by FIN or RST: one payment with its exact arguments, nothing of a cut response kept, outcomes true`, async () => {
      const points = cutPoints(await toolCall.referenceBody(), landmarks.regions, { sample: landmarks.sample, seed: SEED, nonAsciiBefore: landmarks.nonAsciiBefore });
      await toolCall.run(cutCases("aisdk-cut", points, { rstEvery: 5 }));
    });

    if (landmarks.otherLineEndings) {
      it(`AISDK-8 the body with the other line endings (LF for CRLF, CRLF for LF) cut on the first and last bytes of its finishing chunk, by FIN, and by RST at every fourth`, async () => {
        const points = cutPoints(otherLineEndings(await toolCall.referenceBody()), [{ type: side.finishType, before: 0, head: 6, tail: 8 }], { sample: 0, seed: SEED, insideCharacters: false });
        await toolCall.run(cutCases("aisdk-eol", points, { otherLineEndings: true, rstEvery: 4 }));
      });
    }

    const again: { mode: Mode; target: "paying" | "answer"; what: string }[] = [
      { mode: "tool-call", target: "paying", what: "the paying response (its call dispatched at its tool-call part)" },
      // At the step's end the call runs only once its response finished: the cut that matters falls after it.
      { mode: "step", target: "answer", what: "the answer after the payment (the call ran at its step's end)" },
    ];
    for (const { mode, target, what } of again) {
      const cases = mode === "tool-call" && target === "paying" ? toolCall : aiSdkCases(side, mode, target);
      const label = MODES.find((m) => m.mode === mode)!.label;
      it(`AISDK-1 AISDK-6 AISDK-8 ${label}: the same cut of ${what} on every request of the first send (it fails), then the user's re-send of the same messages: one payment, and what each failed send tells names it`, async () => {
        // The answer after the payment has no call: its finish is all there is to cut around.
        const regions: CutRegion[] = [
          ...(target === "paying" ? [{ type: landmarks.callDone, before: 0, head: 0, tail: 6 }] : []),
          { type: side.finishType, before: 0, head: 4, tail: 6 },
        ];
        const points = cutPoints(await cases.referenceBody(), regions, { sample: 4, seed: SEED + 1, insideCharacters: false });
        const made = cutCases(`aisdk-again-${mode}-${target}`, points, { requests: [1, 2, 3], rstEvery: 2 });
        await cases.run(made);
        const proxy = side.proxy();
        // Each attempt of the first send is one request, or two where the target is the answer after the payment.
        const failedSends = expectRequestsByFate(made, proxy.requests, { finishType: side.finishType, isTarget: (r) => side.isPaying(r.requestBody) === (target === "paying"), perAttempt: target === "paying" ? 1 : 2 });
        expect(failedSends).toBeGreaterThan(points.length / 2);
      });
    }

    it('AISDK-4 dispatchAt "tool-call": the whole paying response re-chunked (1 byte a write, seeded splits of 1 to 64 bytes) is kept at the first request with one payment', async () => {
      const cases = rechunkCases("aisdk-chunks", SEED, 2, landmarks.otherLineEndings ? { otherLineEndings: true } : { crlf: false });
      await runAll(cases, toolCall.runCase);
      for (const c of cases) expect(side.proxy().requests.filter((r) => r.caseId === c.id).map((r) => r.number), c.label).toEqual([1, 2]);
    });
  });
}
