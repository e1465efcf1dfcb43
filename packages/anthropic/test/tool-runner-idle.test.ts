import Anthropic from "@anthropic-ai/sdk";
import { MemoryLedger } from "@dispatch-once/core";
import type { FaultPosition } from "@dispatch-once/mock-provider";
import { once as onceEvent } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { boundedFetch, createOnceToolRunner } from "../src/index.js";
import { THREAD_MODES, expectRequestsOfMode, paymentsApp, providerPerTest, toolResultsOf, type ThreadMode } from "./tool-runner-fixtures.js";

// STREAM-16 for the SDK's tool runner (ATR-11): the SDK owns the loop, so no runner's
// streamIdleTimeoutMs bounds a model stream that goes silent after its headers. These tests show
// the hole (with the plain client and with the SDK's own `timeout`, which is cleared once the
// headers arrive), and that `new Anthropic({ fetch: boundedFetch({ idleMs }) })` ends the stalled
// request so the app's re-run (the README's `answer`) runs, its calls answered from the ledger.

const provider = providerPerTest();

type Message = Anthropic.Beta.Messages.BetaMessageParam;

/** Small enough for a test, far above a loaded host's gap between two events the mock writes at once. */
const IDLE_MS = 400;
const IDENTITY = { send_payment: ["payee", "amount", "currency", "reference"] };

async function app(options: { fetch?: typeof fetch; timeout?: number; latencyMs?: number } = {}) {
  const payments = await paymentsApp(provider(), options.latencyMs !== undefined ? { latencyMs: options.latencyMs } : {});
  const once = createOnceToolRunner({ tools: [payments.sendPayment], effects: { send_payment: "keyed_write" }, identity: IDENTITY, ledger: new MemoryLedger(), dispatcher: { logger: { warn: () => {} } } });
  const client = new Anthropic({
    baseURL: provider().baseURL,
    apiKey: "test-key",
    maxRetries: 0,
    ...(options.fetch ? { fetch: options.fetch } : {}),
    ...(options.timeout !== undefined ? { timeout: options.timeout } : {}),
  });
  return { ...payments, once, client };
}

/** The README's `answer`: run the SDK's loop for one user message; re-run the whole loop when a request fails. */
async function answer(once: ReturnType<typeof createOnceToolRunner>, client: Anthropic, history: Message[], mode: ThreadMode = THREAD_MODES[0]!) {
  const errors: unknown[] = [];
  for (let attempt = 1; ; attempt++) {
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, messages: history, stream: true, ...mode[1] }, { conversationId: "conv-idle" });
    try {
      const final = await runner.runUntilDone(); // a re-run's calls are answered from the ledger
      return { final, errors, messages: runner.params.messages, calls: [...once.callsOf(runner).values()] };
    } catch (error) {
      errors.push(error);
      if (attempt === 3) throw error;
    }
  }
}

/** The stream of the given request (1-based over the provider's lifetime) stalls at `at`, headers sent, socket open. */
function holdRequest(requestNumber: number, at: FaultPosition): void {
  provider().setFaultPlan((_request, info) => (info.stream && info.requestNumber === requestNumber ? { kind: "hold", at } : undefined));
}

/** Resolves with whether `promise` settled within `ms` (a liveness check with a wide margin, not a speed assert). */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let settled = false;
  const watched = promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  await Promise.race([watched, new Promise((r) => setTimeout(r, ms))]);
  return settled;
}

/** Resolves once the mock holds no stream (the client's abort reached it); fails after 10 s. */
async function heldStreamsEnd(): Promise<void> {
  for (let waited = 0; provider().held.length > 0; waited += 50) {
    if (waited > 10_000) throw new Error(`the mock still holds ${JSON.stringify(provider().held)}: the request was not aborted`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const textOf = (final: Anthropic.Beta.Messages.BetaMessage) => final.content.map((b) => (b.type === "text" ? b.text : "")).join("");

/**
 * Where the "pay acme" loop's stream stalls. Iteration 1 (request 1) holds the payment's call; the SDK
 * runs a reply's tools only once that reply is whole, so a stall anywhere in it (after the call's
 * content_block_stop too) ran nothing. Iteration 2 (request 2) comes after the payment ran and its
 * result was appended: the re-run's identical call is answered from the ledger.
 */
const STALLS = [
  { name: "before any event (only the headers arrived)", request: 1, at: { event: 0 }, paidBefore: 0 },
  { name: "after message_start", request: 1, at: { event: 1 }, paidBefore: 0 },
  { name: "mid tool_use input (after its first fragment)", request: 1, at: { toolUse: 0, afterFragment: 0 }, paidBefore: 0 },
  { name: "after the call's content_block_stop (the reply not whole: nothing ran)", request: 1, at: { afterToolUseStop: 0 }, paidBefore: 0 },
  { name: "before message_stop", request: 1, at: { beforeMessageStop: true }, paidBefore: 0 },
  { name: "between iterations: iteration 2 before any event (the payment ran)", request: 2, at: { event: 0 }, paidBefore: 1 },
  { name: "between iterations: iteration 2 after message_start (the payment ran)", request: 2, at: { event: 1 }, paidBefore: 1 },
] as const;

describe("ATR-11 STREAM-16 the SDK's tool runner: what bounds a silent model stream", { timeout: 30_000 }, () => {
  it("STREAM-16 the hole: with the plain client, runUntilDone() on a stream stalled after message_start is still pending 2 s later", async () => {
    const { once, client, effects } = await app();
    holdRequest(1, { event: 1 });
    const run = answer(once, client, [{ role: "user", content: "pay acme" }]);
    await provider().waitForHold(1, { timeoutMs: 20_000 });
    expect(await settlesWithin(run, 2_000)).toBe(false);
    // Only the stream's end ends it: the mock cuts it, the app's re-run then pays once.
    provider().cutNow(1, "reset");
    const { errors } = await run;
    expect(errors).toHaveLength(1);
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-16 the SDK's own `timeout` (400 ms) times only the wait for the headers: a stream stalled after them is still pending 2 s later", async () => {
    const { once, client } = await app({ timeout: IDLE_MS });
    holdRequest(1, { event: 0 });
    const run = answer(once, client, [{ role: "user", content: "pay acme" }]);
    await provider().waitForHold(1, { timeoutMs: 20_000 });
    expect(await settlesWithin(run, 2_000)).toBe(false);
    provider().cutNow(1, "reset");
    await run;
  });

  it("STREAM-16 control: the SDK's own `timeout` (400 ms) does end a request whose headers never come (so the test above measured the body, not a disarmed option)", async () => {
    const server = createServer(() => {}); // accepts the request, never answers
    server.listen(0, "127.0.0.1");
    await onceEvent(server, "listening");
    try {
      const client = new Anthropic({ baseURL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, apiKey: "test-key", maxRetries: 0, timeout: IDLE_MS });
      const { once } = await app();
      const error = await once.toolRunner(client, { model: "claude-test", max_tokens: 1024, messages: [{ role: "user", content: "pay acme" }], stream: true }, { conversationId: "conv-headers" }).runUntilDone().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.APIConnectionTimeoutError);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });

  describe.each(THREAD_MODES)("with new Anthropic({ fetch: boundedFetch({ idleMs: 400 }) }), %s", (name, params) => {
    const mode: ThreadMode = [name, params];
    for (const stall of STALLS) {
      it(`ATR-11 ATR-1 STREAM-16 a stall ${stall.name}: the loop rejects after idleMs, the request is aborted, and the re-run pays once, as told`, async () => {
        const { once, client, effects } = await app({ fetch: boundedFetch({ idleMs: IDLE_MS }) });
        holdRequest(stall.request, stall.at);
        const { final, errors, messages, calls } = await answer(once, client, [{ role: "user", content: "pay acme" }], mode);

        // A failed run of the loop, ended by the bound; the stalled request was aborted (the mock saw
        // the client leave). The mock runs in this process, so on a loaded host the bound can expire
        // before the client has read what the mock wrote (the process was starved): on a re-run's
        // request the mock never held (one more failed run), or before the client read the headers
        // (boundedFetch then rejects the fetch itself, which the SDK reports as its
        // APIConnectionTimeoutError; no other timeout of the client is shorter than 10 minutes).
        // Each failed run was ended by the bound, and only the planned request was held.
        expect(errors.length).toBeGreaterThanOrEqual(1);
        for (const error of errors) {
          if (error instanceof Anthropic.APIConnectionTimeoutError) continue;
          expect(error).toBeInstanceOf(Anthropic.AnthropicError);
          expect((error as Error).cause).toMatchObject({ name: "TimeoutError", message: `the model's stream was idle for ${IDLE_MS} ms (STREAM-16)` });
        }
        expect(provider().requests.filter((r) => r.faultFired).map((r) => r.requestNumber)).toEqual([stall.request]);
        await heldStreamsEnd();

        // The oracle: one payment in the payments API's effect log, the one the kept run was told.
        const made = effects();
        expect(made).toHaveLength(1);
        expect(calls).toHaveLength(1);
        expect(calls[0]!.outcome).toMatchObject({ key: made[0]!.idempotencyKey, replayed: stall.paidBefore === 1 });
        const told = toolResultsOf(messages);
        expect(told).toHaveLength(1);
        expect(told[0]!.isError).toBe(false);
        expect(JSON.parse(told[0]!.text)).toEqual({ paymentId: made[0]!.resourceId, status: "accepted" });
        // The answer the app returns closes on that result (the mock's model echoes what it was told).
        expect(textOf(final)).toBe(`Done. send_payment: ${told[0]!.text}`);
        expectRequestsOfMode(provider(), mode);
      });
    }
  });

  it("ATR-11 STREAM-16 boundedFetch times the network, not the loop: a payment that takes 1.5 s under idleMs 400 finishes in one run of the loop", async () => {
    const { once, client, effects } = await app({ fetch: boundedFetch({ idleMs: IDLE_MS }), latencyMs: 1_500 });
    const { final, errors, messages, calls } = await answer(once, client, [{ role: "user", content: "pay acme" }]);
    expect(errors).toEqual([]);
    expect(effects()).toHaveLength(1);
    expect(textOf(final)).toContain(effects()[0]!.resourceId!);
    expect(calls[0]!.outcome).toMatchObject({ key: effects()[0]!.idempotencyKey, replayed: false });
    expect(JSON.parse(toolResultsOf(messages)[0]!.text)).toMatchObject({ paymentId: effects()[0]!.resourceId });
  });

  it("ATR-11 STREAM-16 boundedFetch re-arms at every event: a slow but live stream (an event every 150 ms) under idleMs 1 000 is never cut", async () => {
    provider().setFaultPlan(() => ({ kind: "timing", timing: { firstEventMs: 150, betweenEventsMs: 150, afterBlockStopMs: 150, beforeMessageStopMs: 150 } }));
    const { once, client, effects } = await app({ fetch: boundedFetch({ idleMs: 1_000 }) });
    const { errors, final } = await answer(once, client, [{ role: "user", content: "pay acme" }]);
    expect(errors).toEqual([]);
    expect(effects()).toHaveLength(1);
    expect(textOf(final)).toContain(effects()[0]!.resourceId!);
  });
});
