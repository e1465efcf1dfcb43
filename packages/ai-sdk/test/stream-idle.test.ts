import { createOpenAI } from "@ai-sdk/openai";
import { MemoryLedger } from "@dispatch-once/core";
import { call, respond, scriptFromPlans, text, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { stepCountIs, streamText, type ModelMessage, type TextStreamPart, type ToolSet } from "ai";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { InvalidArgumentError } from "@dispatch-once/core";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { boundedFetch, createOnceTools } from "../src/index.js";
import { drain, invoiceTool, outputsOf, quiet } from "./helpers.js";

// STREAM-16 for the AI SDK profile: the SDK owns its loop, so the runner's idle bound is not
// there. These tests show the hole, why `streamText`'s own `timeout.chunkMs` does not close it
// (it does not time the wait for the first chunk, and it runs while a tool executes), and that
// `boundedFetch` does, at every stall position, in both dispatch modes.

let mock: MockOpenAI;
let payments: MockPaymentsServer;
const startMocks = async (options: { latencyMs?: number; betweenEventsMs?: number } = {}) => {
  payments = await startMockPayments({ latencyMs: options.latencyMs ?? 0 });
  mock = await startMockOpenAI({
    seed: "ai-sdk-stream-idle",
    script: scriptFromPlans({ "bill acme": respond(text("Billing acme."), call("create_invoice", { customer: "acme", amount: 12_500 })) }),
    ...(options.betweenEventsMs !== undefined ? { timing: { betweenEventsMs: options.betweenEventsMs } } : {}),
  });
};
beforeEach(() => startMocks());
afterEach(async () => {
  if (mock.held.length > 0) mock.cutNow();
  await mock.close();
  await payments.close();
});

const messages: ModelMessage[] = [{ role: "user", content: "bill acme" }];

/** Small enough for a test, far above a loaded host's gap between two events the mock writes at once. */
const IDLE_MS = 400;

interface AppOptions {
  fetch?: typeof fetch;
  timeout?: { chunkMs: number };
  dispatchAt?: "step" | "tool-call";
  keys?: string[];
}

/** The app's request as AISDK-6 wants it: a failed attempt keeps nothing, and the same messages are sent again. */
function appWith(ledger: MemoryLedger, options: AppOptions = {}) {
  const once = createOnceTools({ tools: { create_invoice: invoiceTool(payments, (key) => options.keys?.push(key!)) }, effects: { create_invoice: "unkeyed_write" }, ledger, dispatcher: quiet });
  const model = createOpenAI({ baseURL: mock.baseURL, apiKey: "test", ...(options.fetch ? { fetch: options.fetch } : {}) }).responses("gpt-5");
  return () => {
    const turn = once.forTurn({ conversationId: "chat_idle", messages, dispatchAt: options.dispatchAt ?? "step" });
    return streamText({ model, messages, tools: turn.tools, onChunk: turn.onChunk, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {}, ...(options.timeout ? { timeout: options.timeout } : {}) });
  };
}

type Parts = readonly TextStreamPart<ToolSet>[];
const finished = (parts: Parts) => parts.some((p) => p.type === "finish");
/** How a request ended when it did not finish: the error part's error or the abort part's reason. */
const endingOf = (parts: Parts): string => {
  const last = parts.find((p) => p.type === "error" || p.type === "abort") as { error?: unknown; reason?: unknown } | undefined;
  if (last === undefined) return "no error or abort part";
  const cause = (last.error ?? last.reason) as { message?: string; cause?: { message?: string } } | string | undefined;
  return typeof cause === "string" ? cause : `${cause?.message ?? ""} ${cause?.cause?.message ?? ""}`;
};

/** Resolves with "still open" if `drained` has not settled `ms` after the hold began. */
async function stillOpenAfter(drained: Promise<unknown>, ms: number): Promise<string> {
  await mock.waitForHold(1, { timeoutMs: 20_000 });
  return Promise.race([drained.then(() => "ended"), new Promise<string>((r) => setTimeout(() => r("still open"), ms))]);
}

/** Resolves once the mock holds no stream (the abort reached it); fails after 10 s. */
async function heldStreamsEnd(): Promise<void> {
  for (let waited = 0; mock.held.length > 0; waited += 50) {
    if (waited > 10_000) throw new Error(`the mock still holds ${JSON.stringify(mock.held)}: the request was not aborted`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Where mock-openai's `hold` fault stalls request 1; `toolCallPaid`: the call started at its tool-call part before the stall. */
const STALLS = [
  { name: "before the first event (only the headers arrived)", at: { event: 0 }, toolCallPaid: false },
  { name: "after response.created, before any output", at: { event: 1 }, toolCallPaid: false },
  { name: "in the middle of the call's arguments", at: { call: 0, afterFragment: 0 }, toolCallPaid: false },
  { name: "after the call's output_item.done", at: { afterCallDone: 0 }, toolCallPaid: true },
  { name: "before response.completed", at: { beforeCompleted: true }, toolCallPaid: true },
] as const;

describe("AISDK-13 STREAM-16 the AI SDK profile: what bounds a silent model stream", { timeout: 30_000 }, () => {
  it("STREAM-16 the hole: with no bound, a stream stalled after response.created is still open 2 s later", async () => {
    mock.queueFault({ kind: "hold", at: { event: 1 } });
    const drained = drain(appWith(new MemoryLedger())().fullStream);
    expect(await stillOpenAfter(drained, 2_000)).toBe("still open");
    mock.cutNow(1, "reset");
    await drained;
  });

  it("STREAM-16 streamText's timeout.chunkMs does not time the wait for the first chunk: still open 2 s later under chunkMs 400", async () => {
    mock.queueFault({ kind: "hold", at: { event: 1 } });
    const drained = drain(appWith(new MemoryLedger(), { timeout: { chunkMs: IDLE_MS } })().fullStream);
    expect(await stillOpenAfter(drained, 2_000)).toBe("still open");
    mock.cutNow(1, "reset");
    await drained;
  });

  it("STREAM-16 streamText's timeout.chunkMs runs while a tool executes: a 1.5 s invoice under chunkMs 300 aborts its step (the re-send still bills once)", async () => {
    await payments.close();
    await mock.close();
    await startMocks({ latencyMs: 1_500 });
    const ledger = new MemoryLedger();
    const keys: string[] = [];
    const cut = await drain(appWith(ledger, { timeout: { chunkMs: 300 }, keys })().fullStream);
    expect(finished(cut)).toBe(false);
    expect(endingOf(cut)).toContain("Chunk timeout of 300ms exceeded");
    // The abort did not cancel the dispatch: its row settles when the payments API answers.
    for (let waited = 0; (keys.length === 0 || (await ledger.lookup(keys[0]!))?.state === "in_flight") && waited < 20_000; waited += 50) {
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(payments.effects()).toHaveLength(1);
    const resent = await drain(appWith(ledger)().fullStream);
    expect(finished(resent)).toBe(true);
    expect(payments.effects()).toHaveLength(1);
    expect(outputsOf(resent)).toEqual([{ invoice: payments.effects()[0]!.resourceId, amount: 12_500 }]);
  });

  for (const dispatchAt of ["step", "tool-call"] as const) {
    for (const stall of STALLS) {
      it(`AISDK-13 STREAM-16 AISDK-6 boundedFetch, dispatchAt ${dispatchAt}: a stall ${stall.name} ends the request unfinished after idleMs, aborts it, and the re-send bills once`, async () => {
        mock.queueFault({ kind: "hold", at: stall.at });
        const ledger = new MemoryLedger();
        const send = appWith(ledger, { fetch: boundedFetch({ idleMs: IDLE_MS }), dispatchAt });

        const stalled = await drain(send().fullStream);
        expect(finished(stalled)).toBe(false);
        expect(endingOf(stalled)).toContain(`the model's stream was idle for ${IDLE_MS} ms (STREAM-16)`);
        await heldStreamsEnd();
        const paidBefore = dispatchAt === "tool-call" && stall.toolCallPaid;
        for (let waited = 0; payments.effects().length < (paidBefore ? 1 : 0) && waited < 20_000; waited += 50) await new Promise((r) => setTimeout(r, 50));
        expect(payments.effects()).toHaveLength(paidBefore ? 1 : 0);

        // The mock runs in this process, so on a loaded host a re-send the mock never held can go
        // idleMs without a chunk too (the process was starved, nothing was read): the bound doing
        // its job, not the case under test. The app then sends the same messages again (AISDK-6).
        let resent = await drain(send().fullStream);
        for (let resends = 1; !finished(resent) && resends < 4; resends++) {
          expect(endingOf(resent)).toContain(`the model's stream was idle for ${IDLE_MS} ms (STREAM-16)`);
          resent = await drain(send().fullStream);
        }
        expect(finished(resent), endingOf(resent)).toBe(true);
        expect(mock.requests.filter((r) => r.faultFired).map((r) => r.requestNumber)).toEqual([1]);
        expect(payments.effects()).toHaveLength(1);
        expect(outputsOf(resent)).toEqual([{ invoice: payments.effects()[0]!.resourceId, amount: 12_500 }]);
      });
    }
  }

  it("AISDK-13 STREAM-16 boundedFetch times the network, not the reader: a 1.5 s invoice under idleMs 400 finishes its request", async () => {
    await payments.close();
    await mock.close();
    await startMocks({ latencyMs: 1_500 });
    const parts = await drain(appWith(new MemoryLedger(), { fetch: boundedFetch({ idleMs: IDLE_MS }) })().fullStream);
    expect(finished(parts), endingOf(parts)).toBe(true);
    expect(payments.effects()).toHaveLength(1);
  });

  it("AISDK-13 STREAM-16 boundedFetch re-arms at every chunk: a slow but live stream (an event every 150 ms, several seconds in all) under idleMs 2 000 is never cut", async () => {
    await payments.close();
    await mock.close();
    await startMocks({ betweenEventsMs: 150 });
    let firstRequestMs = 0;
    const timed: typeof fetch = async (input, init) => {
      const started = Date.now();
      const response = await boundedFetch({ idleMs: 2_000 })(input, init);
      const text = await response.text();
      if (firstRequestMs === 0) firstRequestMs = Date.now() - started;
      return new Response(text, { status: response.status, headers: response.headers });
    };
    const parts = await drain(appWith(new MemoryLedger(), { fetch: timed })().fullStream);
    expect(finished(parts), endingOf(parts)).toBe(true);
    expect(payments.effects()).toHaveLength(1);
    // The precondition that makes this test able to fail: the first request's stream lasted longer
    // than the bound in all, so a timer armed once, not at every chunk, would have cut it.
    expect(firstRequestMs, "the stream must outlast the bound").toBeGreaterThan(2_000);
  }, 30_000);

  it("AISDK-13 STREAM-16 boundedFetch bounds the wait for the headers: a server that never answers is given up after idleMs", async () => {
    const silent = createServer(() => {});
    silent.listen(0, "127.0.0.1");
    await once(silent, "listening");
    try {
      const url = `http://127.0.0.1:${(silent.address() as AddressInfo).port}/v1/responses`;
      const error = await boundedFetch({ idleMs: IDLE_MS })(url, { method: "POST", body: "{}" }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DOMException);
      expect(error).toMatchObject({ name: "TimeoutError", message: `the model's stream was idle for ${IDLE_MS} ms (STREAM-16)` });
    } finally {
      silent.closeAllConnections();
      await new Promise((r) => silent.close(r));
    }
  });

  it("AISDK-13 boundedFetch refuses options it cannot honour, naming them", () => {
    for (const idleMs of [0, -1, Number.NaN, 2 ** 31, "300000"]) {
      expect(() => boundedFetch({ idleMs: idleMs as number })).toThrow(InvalidArgumentError);
      expect(() => boundedFetch({ idleMs: idleMs as number })).toThrow(/options\.idleMs/);
    }
    expect(() => boundedFetch({ fetch: "fetch" as unknown as typeof fetch })).toThrow(/options\.fetch/);
    expect(() => boundedFetch({ idleMS: 1_000 } as never)).toThrow(/options\.idleMS.*is not an option of boundedFetch/);
    expect(() => boundedFetch(null as never)).toThrow(InvalidArgumentError);
    expect(boundedFetch({ idleMs: Infinity })).toBeTypeOf("function");
  });
});
