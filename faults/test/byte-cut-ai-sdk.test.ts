import { createOpenAI } from "@ai-sdk/openai";
import { boundedFetch } from "@dispatch-once/ai-sdk";
import { call, respond, scriptFromPlans, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MODES, aiSdkCases as appCases, type AiSdkSide, type Mode } from "./byte-cut-ai-sdk-app.js";
import { PAY_ZOE, SEED, cutCases, cutPoints, expectRequestsByFate, crlf, rechunkCases, runAll } from "./byte-cut-cases.js";
import { startByteProxy, type ByteProxy } from "./byte-proxy.js";

/*
 * The Vercel AI SDK side (spec §13.2, AISDK-*): an app on `streamText` with its tools wrapped by
 * `createOnceTools` (byte-cut-ai-sdk-app.ts), over `@ai-sdk/openai`'s Responses model (the provider the package's tests and
 * the kit's `--provider ai-sdk` profile use), against mock-openai through the byte proxy. The app
 * does what the AISDK rules ask of it: it keeps a response (appends `response.messages` to its
 * chat) only when its stream had no `error` part and finished with a reason other than `error` or
 * `other` (AISDK-8); it re-sends the same messages after a failed request, up to 3 requests
 * (AISDK-6); and when they all failed, the user re-sends the message (a resubmit: the same
 * messages again, the same turn, AISDK-1), for up to 3 sends. A failed send tells the user, for
 * each call its requests made, what `turn.outcomeOf(toolCallId)` says once the call settled
 * (AISDK-8: never "did not happen"). The paying responses (the requests whose last input item is
 * the user's message, not a `function_call_output`) are cut; the answer after the payment goes whole.
 * See README "Byte-level cuts".
 */

const PROMPT = "pay Zoë";
const FINISH = "response.completed";
let provider: MockOpenAI;
let proxy: ByteProxy;
let payments: MockPaymentsServer;

beforeAll(async () => {
  provider = await startMockOpenAI({ seed: "byte-cut-ai-sdk", script: scriptFromPlans({ [PROMPT]: respond(call("send_payment", PAY_ZOE)) }, { after: "Payment sent." }) });
  proxy = await startByteProxy(provider.baseURL);
  payments = await startMockPayments({ latencyMs: 0 });
});
afterAll(async () => {
  await proxy?.close();
  await provider?.close();
  await payments?.close();
});

const idsIn = (body: Buffer) => [...body.toString("utf8").matchAll(/"(?:call_id|id|item_id)":"((?:call|fc|resp|msg)_[^"]+)"/g)].map((m) => m[1]!);

/** A request of the chat that pays: its last input item is the user's message (not the call's output). */
function isPaying(requestBody: unknown): boolean {
  const input = (requestBody as { input?: { type?: string; role?: string }[] } | undefined)?.input;
  const last = Array.isArray(input) ? input[input.length - 1] : undefined;
  return last?.type !== "function_call_output";
}

const responses: AiSdkSide = {
  finishType: FINISH,
  prompt: PROMPT,
  // The proxy tells the cases apart by this header; boundedFetch ends a stream that goes silent (AISDK-13).
  model: (caseId) => createOpenAI({ baseURL: proxy.baseURL, apiKey: "test-key", headers: { "x-byte-case": caseId }, fetch: boundedFetch({ idleMs: 30_000 }) }).responses("gpt-test"),
  idsIn,
  isPaying,
  proxy: () => proxy,
  payments: () => payments,
};
const aiSdkCases = (mode: Mode, target: "paying" | "answer" = "paying") => appCases(responses, mode, target);
const modes = MODES;

describe(`byte-level cuts of streamText over @ai-sdk/openai's Responses model, tools from createOnceTools (seed ${SEED})`, () => {
  const toolCall = aiSdkCases("tool-call");

  it('AISDK-4 AISDK-6 AISDK-8 dispatchAt "tool-call": a cut around the call\'s output_item.done and the response.completed, inside UTF-8 of the arguments, or elsewhere, by FIN or RST: one payment with its exact arguments, nothing of a cut response kept, outcomes true', async () => {
    const points = cutPoints(
      await toolCall.referenceBody(),
      [
        { type: "response.function_call_arguments.done", before: 6, head: 12 },
        { type: "response.output_item.done", before: 0, head: 16, tail: 8 },
        { type: FINISH, before: 0, head: 16, tail: 8 },
      ],
      { sample: 4, seed: SEED, nonAsciiBefore: "response.function_call_arguments.done" },
    );
    await toolCall.run(cutCases("aisdk-cut", points, { rstEvery: 5 }));
  });

  it("AISDK-8 a CRLF body cut on the first and last bytes of its response.completed (between \\r and \\n too), by FIN, and by RST at every fourth", async () => {
    const points = cutPoints(crlf(await toolCall.referenceBody()), [{ type: FINISH, before: 0, head: 8, tail: 8 }], { sample: 0, seed: SEED, insideCharacters: false });
    await toolCall.run(cutCases("aisdk-crlf", points, { crlf: true, rstEvery: 4 }));
  });

  const again: { mode: Mode; target: "paying" | "answer"; what: string }[] = [
    { mode: "tool-call", target: "paying", what: "the paying response (its call dispatched at its tool-call part)" },
    // At the step's end the call runs only once its response finished: the cut that matters falls after it.
    { mode: "step", target: "answer", what: "the answer after the payment (the call ran at its step's end)" },
  ];
  for (const { mode, target, what } of again) {
    const side = mode === "tool-call" && target === "paying" ? toolCall : aiSdkCases(mode, target);
    const label = modes.find((m) => m.mode === mode)!.label;
    it(`AISDK-1 AISDK-6 AISDK-8 ${label}: the same cut of ${what} on every request of the first send (it fails), then the user's re-send of the same messages: one payment, and what each failed send tells names it`, async () => {
      const points = cutPoints(
        await side.referenceBody(),
        [
          { type: "response.output_item.done", before: 0, head: 0, tail: 6 },
          { type: FINISH, before: 0, head: 4, tail: 6 },
        ],
        { sample: 4, seed: SEED + 1, insideCharacters: false },
      );
      const cases = cutCases(`aisdk-again-${mode}-${target}`, points, { requests: [1, 2, 3], rstEvery: 2 });
      await side.run(cases);
      // Each attempt of the first send is one request, or two where the target is the answer after the payment.
      const failedSends = expectRequestsByFate(cases, proxy.requests, { finishType: FINISH, isTarget: (r) => isPaying(r.requestBody) === (target === "paying"), perAttempt: target === "paying" ? 1 : 2 });
      expect(failedSends).toBeGreaterThan(points.length / 2);
    });
  }

  it('AISDK-4 dispatchAt "tool-call": the whole paying response re-chunked (seeded splits of 1 to 64 bytes, LF and CRLF) is kept at the first request with one payment', async () => {
    // 1 byte a write is the Messages side's (each byte costs a turn of the event loop).
    const cases = rechunkCases("aisdk-chunks", SEED, 2).filter((c) => !c.label.startsWith("1 byte a write"));
    await runAll(cases, toolCall.runCase);
    for (const c of cases) expect(proxy.requests.filter((r) => r.caseId === c.id).map((r) => r.number), c.label).toEqual([1, 2]);
  });
});
