/**
 * Claude on Amazon Bedrock and Google Vertex AI: the runner over the platforms' own SDK clients
 * (`@anthropic-ai/bedrock-sdk` 1.1.4, `@anthropic-ai/vertex-sdk` 1.1.5), each talking to the mock
 * provider's route for its platform (Bedrock: `invoke-with-response-stream` in the AWS event-stream
 * framing, its mid-stream errors as `exception` messages; Vertex: `:streamRawPredict`, the Messages
 * API's SSE). The same scripts and faults as the Messages API tests (incident.test.ts): each cut
 * must get the treatment it gets there: paid once, told the truth, nothing committed the stream
 * did not establish.
 */
import { describe, expect, it } from "vitest";
import { AnthropicBedrock } from "@anthropic-ai/bedrock-sdk";
import type { MockProvider } from "@dispatch-once/mock-provider";
import { TurnFailedError, type ConversationRunnerOptions } from "../src/index.js";
import { RunnerEventLog, cloudClient, cutAfterDispatch, providerPerTest, setup, truncatingFetch, type Platform } from "./fixtures.js";

const provider = providerPerTest();

/** The API version each platform documents for the body's `anthropic_version`. */
const PLATFORM_VERSION: Record<Platform, string> = { bedrock: "bedrock-2023-05-31", vertex: "vertex-2023-10-16" };

async function cloudSetup(platform: Platform, options: { guarded: boolean; latencyMs?: number; onEvent?: RunnerEventLog["onEvent"]; maxRetries?: number; attempts?: number }) {
  return setup(provider(), {
    guarded: options.guarded,
    latencyMs: options.latencyMs ?? 50,
    runner: {
      client: cloudClient(platform, provider(), options.maxRetries),
      retry: { backoffMs: () => 10, ...(options.attempts !== undefined ? { attempts: options.attempts } : {}) },
      ...(options.onEvent !== undefined ? { onEvent: options.onEvent } : {}),
    },
  });
}

/** Every request went to the platform's route, never to /v1/messages. */
function expectPlatformRoutes(platform: Platform): void {
  const paths = provider().requests.map((r) => [r.api, r.path]);
  const route = platform === "bedrock" ? "/model/claude-test/invoke-with-response-stream" : "/v1/projects/test-project/locations/us-east5/publishers/anthropic/models/claude-test:streamRawPredict";
  expect(paths).toEqual(paths.map(() => [platform, route]));
}

/** The chapter's cut on the first request only: held before message_stop until the payment resolved, then reset (or closed). */
function cutFirstAttemptAfterDispatch(kind: "reset" | "clean_close" = "reset"): RunnerEventLog {
  const log = new RunnerEventLog();
  const gate = cutAfterDispatch(provider(), log, kind);
  provider().setFaultPlan((_request, info) => (info.requestNumber === 1 ? gate.hold(info) : undefined));
  return log;
}

for (const platform of ["bedrock", "vertex"] as const) {
  describe(`Claude on ${platform === "bedrock" ? "Amazon Bedrock (AnthropicBedrock)" : "Google Vertex AI (AnthropicVertex)"}`, () => {
    it(`STREAM-5 the chapter's incident on ${platform}: a reset after the payment ran, before message_stop, then the retry: acme paid once, the committed turn is the retry's stream, and the answer says what the store holds`, async () => {
      const log = cutFirstAttemptAfterDispatch();
      const { runner, effects, store } = await cloudSetup(platform, { guarded: true, latencyMs: 100, onEvent: log.onEvent });
      const result = await runner.send(`conv-${platform}-incident`, { id: "m1", content: "pay acme" });

      expect(effects()).toHaveLength(1);
      const [payment] = effects();
      expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({ position: "after_dispatch_before_stop", error: expect.stringContaining("terminated") });
      // The SDK did not send the request again after the headers: one request per attempt.
      expect(provider().requests.map((r) => [r.attempt, r.outcome])).toEqual([[1, "reset"], [2, "complete"], [1, "complete"]]);
      expectPlatformRoutes(platform);

      const paymentTurn = result.turns[0]!;
      expect(paymentTurn.attempts).toBe(2);
      expect(paymentTurn.calls).toEqual([expect.objectContaining({ replayed: true, result: { paymentId: payment!.paymentId, status: "accepted" } })]);
      // What the conversation holds: the retried response's toolu_ id with the first payment's result.
      const committed = (await store.log(`conv-${platform}-incident`)) as { role: string; content: unknown }[];
      const assistant = committed[1]!.content as { type: string; id: string; input: unknown }[];
      const toolResults = committed[2]!.content as { tool_use_id: string; content: string }[];
      expect(assistant.map((b) => b.id)).toEqual([provider().requests[1]!.toolUses[0]!.id]);
      expect(assistant[0]!.id).not.toBe(provider().requests[0]!.toolUses[0]!.id);
      expect(assistant[0]!.input).toEqual(provider().requests[1]!.toolUses[0]!.input);
      expect(toolResults.map((r) => [r.tool_use_id, JSON.parse(r.content)])).toEqual([[assistant[0]!.id, { paymentId: payment!.paymentId, status: "accepted" }]]);
      // What the user is told is what the model was given back: the stored payment.
      expect(paymentTurn.calls[0]!.callId).toBe(assistant[0]!.id);
      expect(result.turns.at(-1)!.text).toContain(payment!.paymentId);
    });

    it(`STREAM-5 control on ${platform}: the same incident with a naive (unguarded) handler pays twice`, async () => {
      const log = cutFirstAttemptAfterDispatch();
      const { runner, effects } = await cloudSetup(platform, { guarded: false, latencyMs: 100, onEvent: log.onEvent });
      await runner.send(`conv-${platform}-naive`, { id: "m1", content: "pay acme" });
      expect(effects()).toHaveLength(2);
    });

    it(`STREAM-1 on ${platform}: a clean close before message_stop is a failed stream (StreamIncompleteError), retried; acme paid once`, async () => {
      const log = cutFirstAttemptAfterDispatch("clean_close");
      const { runner, effects } = await cloudSetup(platform, { guarded: true, onEvent: log.onEvent });
      const result = await runner.send(`conv-${platform}-close`, { id: "m1", content: "pay acme" });
      expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({
        position: "after_dispatch_before_stop",
        error: expect.stringContaining("StreamIncompleteError"),
      });
      expect(provider().requests[0]!.outcome).toBe("clean_close");
      expect(result.turns[0]!.attempts).toBe(2);
      expect(effects()).toHaveLength(1);
    });

    it(`STREAM-1 on ${platform}: a clean close before message_stop on every attempt fails the turn with stream_incomplete, commits nothing, and says the payment happened`, async () => {
      const log = new RunnerEventLog();
      const gate = cutAfterDispatch(provider(), log, "clean_close");
      provider().setFaultPlan((_r, info) => gate.hold(info));
      const { runner, effects, store } = await cloudSetup(platform, { guarded: true, onEvent: log.onEvent, attempts: 2 });
      const error = await runner.send(`conv-${platform}-closed`, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TurnFailedError);
      const record = (error as TurnFailedError).record;
      expect(record).toMatchObject({ position: "after_dispatch_before_stop", attempts: 2, error: { code: "stream_incomplete" } });
      expect(record.effects).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened" })]);
      expect(effects()).toHaveLength(1);
      expect(await store.log(`conv-${platform}-closed`)).toEqual([]);
    });

    const said = platform === "bedrock" ? "error modelStreamErrorException: Overloaded" : "error overloaded_error: Overloaded";
    it(`STREAM-12 on ${platform}: an in-stream error (${platform === "bedrock" ? "an exception message" : "an error event"}) before message_stop fails the stream as stream_incomplete saying the provider's type and message; acme paid once`, async () => {
      provider().setFaultPlan(() => ({ kind: "error_event", at: { beforeMessageStop: true } }));
      const { runner, effects, store } = await cloudSetup(platform, { guarded: true });
      const error = await runner.send(`conv-${platform}-error`, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TurnFailedError);
      const record = (error as TurnFailedError).record;
      expect(record.attempts).toBe(3);
      expect(record.error).toMatchObject({ code: "stream_incomplete" });
      expect(record.error!.message).toContain(said);
      expect(record.effects).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened" })]);
      expect(effects()).toHaveLength(1);
      expect(await store.log(`conv-${platform}-error`)).toEqual([]);
      expect(provider().requests.map((r) => r.outcome)).toEqual(["error_event", "error_event", "error_event"]);
    });

    it(`STREAM-12 on ${platform}: a throttlingException mid-stream is said as it came, and retried like any failed stream (not a refusal): the retry commits, acme paid once`, async () => {
      provider().setFaultPlan((_r, info) =>
        info.attempt === 1 ? { kind: "error_event", at: { beforeMessageStop: true }, error: { type: "throttlingException", message: "Too many tokens, please wait before trying again." } } : undefined,
      );
      const log = new RunnerEventLog();
      const { runner, effects } = await cloudSetup(platform, { guarded: true, onEvent: log.onEvent });
      const result = await runner.send(`conv-${platform}-throttled`, { id: "m1", content: "pay acme" });
      expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({ error: expect.stringContaining("throttlingException: Too many tokens") });
      expect(result.turns[0]!.attempts).toBe(2);
      expect(effects()).toHaveLength(1);
    });

    for (const status of [429, 503] as const) {
      it(`SDK retry on ${platform}: a ${status} before the headers is retried by the SDK itself (maxRetries), never after the headers: at most attempts × (maxRetries + 1) requests, acme paid once`, async () => {
        // Every runner attempt's first request answers ${status}; its SDK retry streams, and attempt 1's stream is cut after the payment ran.
        const log = new RunnerEventLog();
        const gate = cutAfterDispatch(provider(), log);
        let streamed = 0;
        provider().setFaultPlan((_r, info) => {
          if (info.attempt % 2 === 1) return { kind: "status", status, retryAfterMs: 1 };
          return streamed++ === 0 ? gate.hold(info) : undefined;
        });
        const { runner, effects } = await cloudSetup(platform, { guarded: true, onEvent: log.onEvent, maxRetries: 2 });
        const result = await runner.send(`conv-${platform}-${status}`, { id: "m1", content: "pay acme" });
        expect(result.turns[0]!.attempts).toBe(2);
        expect(provider().requests.map((r) => r.outcome)).toEqual(["status", "reset", "status", "complete", "status", "complete"]);
        expect(provider().requests.length).toBeLessThanOrEqual(3 * (2 + 1) * result.turns.length);
        expect(effects()).toHaveLength(1);
      });
    }

    it(`SDK retry on ${platform}: a 503 before the headers on every request sends exactly attempts × (maxRetries + 1) requests, pays nothing, and the record says so`, async () => {
      provider().setFaultPlan(() => ({ kind: "status", status: 503, retryAfterMs: 1 }));
      const { runner, effects, store } = await cloudSetup(platform, { guarded: true, maxRetries: 2, attempts: 2 });
      const error = await runner.send(`conv-${platform}-down`, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TurnFailedError);
      const record = (error as TurnFailedError).record;
      expect(record).toMatchObject({ attempts: 2, calls: [], effects: [] });
      expect(provider().requests).toHaveLength(2 * 3);
      expect(effects()).toHaveLength(0);
      expect(await store.log(`conv-${platform}-down`)).toEqual([]);
    });
  });
}

describe("an event stream truncated inside a message (Amazon Bedrock)", () => {
  it("STREAM-1 on bedrock: half of the message_stop message, then a clean end: the SDK throws (Truncated event message received), the attempt is a failed stream, retried; acme paid once", async () => {
    const log = new RunnerEventLog();
    const client = new AnthropicBedrock({ baseURL: provider().bedrockBaseURL, awsRegion: "us-east-1", awsAccessKey: "AKIDEXAMPLE", awsSecretKey: "test-secret", fetch: truncatingFetch() });
    const { runner, effects, store } = await setup(provider(), { guarded: true, runner: { client, retry: { backoffMs: () => 10 }, onEvent: log.onEvent } });
    // message_stop is held until the payment resolved, then released into the truncating fetch.
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: { beforeMessageStop: true } } : undefined));
    const sent = runner.send("conv-bedrock-truncated", { id: "m1", content: "pay acme" });
    await provider().waitForHold(1, { timeoutMs: 20_000 });
    await log.waitForResolved(provider().requests[0]!.toolUses.map((t) => t.id));
    provider().release(1);
    const result = await sent;
    expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({ position: "after_dispatch_before_stop", error: expect.stringContaining("Truncated event message received") });
    expect(result.turns[0]!.attempts).toBe(2);
    expect(effects()).toHaveLength(1);
    const committed = JSON.stringify(await store.log("conv-bedrock-truncated"));
    expect(committed).toContain(provider().requests[1]!.toolUses[0]!.id);
    expect(committed).not.toContain(provider().requests[0]!.toolUses[0]!.id);
  });
});

describe("the platforms' API version in the body", () => {
  // Both SDKs copy the request's anthropic-version header into the body's anthropic_version and
  // drop the header; @anthropic-ai/sdk 1.14.0's own value is not the platforms' documented one. The
  // README tells users to pin it with the client's defaultHeaders: this is what that does.
  for (const platform of ["bedrock", "vertex"] as const) {
    it(`STREAM-15 on ${platform}: the client's defaultHeaders anthropic-version is the body's anthropic_version on every attempt; without it the SDK's own header value is`, async () => {
      const mock = provider();
      for (const pinned of [true, false]) {
        const client = cloudClient(platform, mock, 0, pinned ? { "anthropic-version": PLATFORM_VERSION[platform] } : undefined);
        const { runner } = await setup(mock, { guarded: true, latencyMs: 1, runner: { client, retry: { backoffMs: () => 1 } } });
        mock.clearRequests();
        await runner.send(`conv-${platform}-version-${pinned}`, { id: "m1", content: "pay acme" });
        const versions = mock.requests.map((r) => (r.body as { anthropic_version?: unknown }).anthropic_version);
        expect(versions.length).toBeGreaterThan(0);
        if (pinned) expect(versions).toEqual(versions.map(() => PLATFORM_VERSION[platform]));
        else expect(versions.every((v) => typeof v === "string" && v !== PLATFORM_VERSION[platform])).toBe(true);
        // The platform never sees the header: the body carries the version.
        expect(mock.requests.every((r) => r.headers["anthropic-version"] === undefined)).toBe(true);
      }
    });
  }
});

describe("the platforms' clients as the runner's client option", () => {
  // The runner needs only messages.create. The type-check of this file (lint:sources) fails when the
  // option asks for more: \`client: Anthropic\` refused both clients (no models, files, skills, organization).
  it("ERR-1 AnthropicBedrock and AnthropicVertex are a runner's client as they are, without a cast", () => {
    const mock = { bedrockBaseURL: "http://127.0.0.1:9", vertexBaseURL: "http://127.0.0.1:9/v1" } as MockProvider;
    const clients: ConversationRunnerOptions["client"][] = [cloudClient("bedrock", mock), cloudClient("vertex", mock)];
    expect(clients.map((c) => typeof c.messages.create)).toEqual(["function", "function"]);
  });
});
