/**
 * The SDK's own tool runner through Dispatch-Once (`createOnceToolRunner`, §13.3) over the cloud
 * platforms' SDK clients (`AnthropicBedrock` from `@anthropic-ai/bedrock-sdk` 1.1.4,
 * `AnthropicVertex` from `@anthropic-ai/vertex-sdk` 1.1.5), each talking to the mock provider's
 * route for its platform (Bedrock: `invoke-with-response-stream`, the AWS event-stream framing and
 * its `exception` messages; Vertex: `:streamRawPredict`, the Messages API's SSE). Both clients have
 * `beta.messages.toolRunner` (they build the SDK's own Beta resource); the type-check of this file
 * (lint:sources) is the check that `once.toolRunner` takes them without a cast. Neither has message
 * threads (`@anthropic-ai/sdk` 1.14.0 threads only on `Anthropic`): the SDK's runner sends the full
 * history on every request in its default mode too, which every case checks.
 *
 * The app is README's `answer`: it re-runs the whole loop from the user's message when a request
 * of it fails. Each cut must get the treatment it gets over `Anthropic` (tool-runner.test.ts):
 * paid once (the mock payments API's effect log), and what the app reads (the tool results it
 * keeps, the final answer, `callsOf`) names that one payment.
 */
import type Anthropic from "@anthropic-ai/sdk";
import { APIError, AnthropicError } from "@anthropic-ai/sdk";
import { AnthropicBedrock } from "@anthropic-ai/bedrock-sdk";
import type { AnthropicVertex } from "@anthropic-ai/vertex-sdk";
import { MemoryLedger } from "@dispatch-once/core";
import type { Fault, MockProvider } from "@dispatch-once/mock-provider";
import { afterEach, describe, expect, it } from "vitest";
import { createOnceToolRunner, type OnceToolRunner, type ToolRunnerClient } from "../src/index.js";
import { cloudClient, truncatingFetch, type Platform } from "./fixtures.js";
import { THREAD_MODES, expectRequestsOfMode, paymentsApp, providerPerTest, toolResultsOf, type ThreadMode } from "./tool-runner-fixtures.js";

const provider = providerPerTest();

type Message = Anthropic.Beta.Messages.BetaMessageParam;
type CloudClient = AnthropicBedrock | AnthropicVertex;
const IDENTITY = { send_payment: ["payee", "amount", "currency", "reference"] };
const DEFAULT_MODE = THREAD_MODES.find(([, params]) => params.thread === undefined)!;
const UNTHREADED = THREAD_MODES.find(([, params]) => params.thread === false)!;

async function app(platform: Platform, options: { client?: CloudClient } = {}) {
  const payments = await paymentsApp(provider());
  const once = createOnceToolRunner({
    tools: [payments.sendPayment, payments.getBalance],
    effects: { send_payment: "keyed_write", get_balance: "read" },
    ledger: new MemoryLedger(),
    identity: IDENTITY,
    dispatcher: { waitMs: 5_000, pollMs: 5 },
  });
  // The SDK's own retry is not what is tested here: a stream cut after its headers is never retried by it.
  return { ...payments, once, client: options.client ?? cloudClient(platform, provider(), 0) };
}

/**
 * README's `answer`: the SDK's runner over the platform's client, the whole loop run again from the
 * user's message when a request of it fails (at most 3 runs). For each failed run: its
 * error, and how many payments the effect log held when it failed.
 */
async function answer(once: OnceToolRunner, client: CloudClient, effects: () => readonly unknown[], mode: ThreadMode, options: { stream?: boolean } = {}) {
  const failures: { error: unknown; paid: number; messages: Message[] }[] = [];
  for (let attempt = 1; attempt <= 3; attempt++) {
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, stream: options.stream ?? true, ...mode[1], messages: [{ role: "user", content: "pay acme" }] }, { conversationId: "conv-cloud" });
    try {
      const message = await runner.runUntilDone();
      return { message, failures, messages: runner.params.messages, calls: [...once.callsOf(runner).values()], unanswered: await once.unansweredCallsOf(runner) };
    } catch (error) {
      failures.push({ error, paid: effects().length, messages: runner.params.messages });
    }
  }
  throw new Error(`the loop never finished: ${failures.map((f) => String(f.error)).join("; ")}`);
}

/** What the app reads agrees with the effect log: the tool results it keeps and the final answer name each payment made, once. */
function expectToldAgreesWithEffects(messages: readonly Message[], finalText: string, effects: readonly { resourceId?: string | null }[]) {
  const told = toolResultsOf(messages).filter((r) => !r.isError).map((r) => (JSON.parse(r.text) as { paymentId: string }).paymentId);
  expect(told.sort()).toEqual(effects.map((e) => e.resourceId).sort());
  for (const effect of effects) expect(finalText).toContain(effect.resourceId);
}

function textOf(message: { content: readonly { type: string; text?: string }[] }): string {
  return message.content.map((b) => (b.type === "text" ? b.text : "")).join("");
}

/** Every request went to the platform's route (streamed or not, as it was sent), never to /v1/messages. */
function expectPlatformRoutes(platform: Platform): void {
  const routeOf = (stream: boolean) =>
    platform === "bedrock" ? `/model/claude-test/${stream ? "invoke-with-response-stream" : "invoke"}` : `/v1/projects/test-project/locations/us-east5/publishers/anthropic/models/claude-test:${stream ? "streamRawPredict" : "rawPredict"}`;
  const paths = provider().requests.map((r) => [r.api, r.path]);
  expect(paths.length).toBeGreaterThan(0);
  expect(paths).toEqual(provider().requests.map((r) => [platform, routeOf(r.stream)]));
}

/** The fault on the first run's request `n` only (request numbers count over the mock's lifetime). */
function faultOnRequest(n: number, fault: Fault): void {
  provider().setFaultPlan((_request, info) => (info.requestNumber === n ? fault : undefined));
}

/** The one run that failed: the error the app's retry caught, thrown by the SDK's runner. */
function onlyFailure(run: { failures: { error: unknown; paid: number; messages: Message[] }[] }) {
  expect(run.failures).toHaveLength(1);
  return run.failures[0]!;
}

/** The re-run's call: answered from the ledger (the payment of the failed run), under the key the effect log holds. */
function expectReplayedOnce(run: Awaited<ReturnType<typeof answer>>, made: readonly { idempotencyKey: string | null; resourceId?: string | null }[]) {
  expect(made).toHaveLength(1);
  expect(run.calls).toEqual([expect.objectContaining({ toolName: "send_payment", outcome: expect.objectContaining({ replayed: true, key: made[0]!.idempotencyKey }) })]);
  expectToldAgreesWithEffects(run.messages, textOf(run.message), made);
  expect(run.unanswered).toEqual({ listed: true, calls: [] });
}

for (const platform of ["bedrock", "vertex"] as const) {
  const label = platform === "bedrock" ? "Amazon Bedrock (AnthropicBedrock)" : "Google Vertex AI (AnthropicVertex)";
  describe(`ATR: createOnceToolRunner over ${label}`, () => {
    afterEach(() => {
      expectPlatformRoutes(platform);
      // Default mode or not, no request of the platform's runner carries a thread: the full history each time.
      expectRequestsOfMode(provider(), UNTHREADED);
    });

    for (const mode of THREAD_MODES) {
      const modeName = mode[1].thread === false ? "thread: false" : "the SDK's default mode (which does not thread on the platform)";
      it(`ATR-1 on ${platform}, ${modeName}: the incident: iteration 2's stream is reset after the payment ran, before message_stop (AnthropicError terminated, its cause the TypeError); the app re-runs the loop: acme paid once, the re-run's call answered from the ledger, and the answer names that payment`, async () => {
        const { once, client, effects } = await app(platform);
        faultOnRequest(2, { kind: "reset", at: { beforeMessageStop: true } });
        const run = await answer(once, client, effects, mode);
        const failure = onlyFailure(run);
        expect(failure.error).toBeInstanceOf(AnthropicError);
        expect(failure.error).toMatchObject({ message: "terminated", cause: expect.objectContaining({ name: "TypeError", message: "terminated" }) });
        expect(failure.paid).toBe(1);
        expect(provider().requests[1]!.outcome).toBe("reset");
        expectReplayedOnce(run, effects());
      });
    }

    it(`ATR-1 control on ${platform}: the same incident with the SDK's runner unwrapped (no ledger, no key) pays twice`, async () => {
      const { client, sendPayment, effects } = await app(platform);
      faultOnRequest(2, { kind: "reset", at: { beforeMessageStop: true } });
      const errors: unknown[] = [];
      for (let attempt = 0; attempt < 2; attempt++) {
        const runner = client.beta.messages.toolRunner({ model: "claude-test", max_tokens: 1024, stream: true, messages: [{ role: "user", content: "pay acme" }], tools: [sendPayment] });
        await runner.runUntilDone().catch((error: unknown) => errors.push(error));
      }
      expect(errors).toHaveLength(1);
      expect(effects()).toHaveLength(2);
    });

    it(`ATR-1 on ${platform}: a clean close of iteration 2's stream before message_stop, after the payment ran, fails the run (the SDK: no message without message_stop), never an answer from the cut reply; the re-run pays nothing more and its answer names the payment`, async () => {
      const { once, client, effects } = await app(platform);
      faultOnRequest(2, { kind: "clean_close", at: { beforeMessageStop: true } });
      const run = await answer(once, client, effects, DEFAULT_MODE);
      const failure = onlyFailure(run);
      expect(failure.error).toBeInstanceOf(AnthropicError);
      expect((failure.error as Error).message).toBe("stream ended without producing a Message with role=assistant");
      expect(failure.paid).toBe(1);
      expect(provider().requests[1]!.outcome).toBe("clean_close");
      expectReplayedOnce(run, effects());
    });

    it(`ATR-3 on ${platform}: a clean close of iteration 1's stream after the call's content_block_stop, before message_stop: the call of a reply that never ended does not run (nothing paid when the run fails); the re-run pays once and says so`, async () => {
      const { once, client, effects } = await app(platform);
      faultOnRequest(1, { kind: "clean_close", at: { beforeMessageStop: true } });
      const run = await answer(once, client, effects, DEFAULT_MODE);
      const failure = onlyFailure(run);
      expect((failure.error as Error).message).toBe("stream ended without producing a Message with role=assistant");
      expect(failure.paid).toBe(0);
      // The SDK kept the cut reply's complete call, with no result: rerunMessagesOf drops it (README).
      expect(failure.messages.at(-1)).toMatchObject({ role: "assistant", content: [expect.objectContaining({ type: "tool_use", name: "send_payment" })] });
      expect(toolResultsOf(failure.messages)).toEqual([]);
      const made = effects();
      expect(made).toHaveLength(1);
      expect(run.calls).toEqual([expect.objectContaining({ outcome: expect.objectContaining({ replayed: false, key: made[0]!.idempotencyKey }) })]);
      expectToldAgreesWithEffects(run.messages, textOf(run.message), made);
    });

    it(`ATR-1 on ${platform} without streaming (${platform === "bedrock" ? "/invoke" : ":rawPredict"}): a 503 on iteration 2's request, after the payment ran (the SDK's retries off), fails the run; the re-run pays nothing more and its answer names the payment`, async () => {
      const { once, client, effects } = await app(platform);
      faultOnRequest(2, { kind: "status", status: 503 });
      const run = await answer(once, client, effects, DEFAULT_MODE, { stream: false });
      const failure = onlyFailure(run);
      expect(failure.error).toBeInstanceOf(APIError);
      expect(failure.error).toMatchObject({ status: 503 });
      expect(failure.paid).toBe(1);
      expect(provider().requests.map((r) => r.stream)).toEqual(provider().requests.map(() => false));
      expectReplayedOnce(run, effects());
    });

    const streamError = platform === "bedrock" ? { type: "modelStreamErrorException", message: "Overloaded" } : { type: "overloaded_error", message: "Overloaded" };
    it(`ATR-1 on ${platform}: an in-stream error in iteration 2 (${platform === "bedrock" ? "an exception message" : "an error event"}) after the payment ran fails the run with an APIError without status saying ${streamError.type}; the re-run pays nothing more and its answer names the payment`, async () => {
      const { once, client, effects } = await app(platform);
      faultOnRequest(2, { kind: "error_event", at: { beforeMessageStop: true } });
      const run = await answer(once, client, effects, DEFAULT_MODE);
      const failure = onlyFailure(run);
      expect(failure.error).toBeInstanceOf(APIError);
      expect(failure.error).toMatchObject({ status: undefined, error: { type: "error", error: streamError } });
      expect(failure.paid).toBe(1);
      expectReplayedOnce(run, effects());
    });
  });
}

describe("ATR: createOnceToolRunner over an event stream truncated inside a message (Amazon Bedrock)", () => {
  afterEach(() => {
    expectPlatformRoutes("bedrock");
    expectRequestsOfMode(provider(), UNTHREADED);
  });

  it("ATR-1 on bedrock: iteration 2's message_stop message cut in half, then a clean end: the run fails (Truncated event message received), the re-run pays nothing more and its answer names the payment", async () => {
    const client = new AnthropicBedrock({ baseURL: provider().bedrockBaseURL, awsRegion: "us-east-1", awsAccessKey: "AKIDEXAMPLE", awsSecretKey: "test-secret", maxRetries: 0, fetch: truncatingFetch(2) });
    const { once, effects } = await app("bedrock", { client });
    const run = await answer(once, client, effects, DEFAULT_MODE);
    const failure = onlyFailure(run);
    expect(String(failure.error)).toContain("Truncated event message received.");
    expect(failure.paid).toBe(1);
    expectReplayedOnce(run, effects());
  });
});

describe("ATR: the platforms' clients as toolRunner's client", () => {
  // The wrapper needs only beta.messages.toolRunner. The type-check of this file (lint:sources) fails
  // when toolRunner asks for more: `client: Anthropic` refused both (no models, files, skills, organization).
  it("ATR-7 AnthropicBedrock and AnthropicVertex are toolRunner's client as they are, without a cast, and each has the SDK's beta tool runner", () => {
    const mock = { bedrockBaseURL: "http://127.0.0.1:9", vertexBaseURL: "http://127.0.0.1:9/v1" } as MockProvider;
    const clients: ToolRunnerClient[] = [cloudClient("bedrock", mock), cloudClient("vertex", mock)];
    expect(clients.map((c) => typeof c.beta.messages.toolRunner)).toEqual(["function", "function"]);
  });
});
