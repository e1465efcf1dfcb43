import { AnthropicBedrock } from "@anthropic-ai/bedrock-sdk";
import { ConversationRunner } from "@dispatch-once/anthropic";
import { describe, expect, it } from "vitest";
import { SEED, cutCases, cutDelivery, cutPoints, eventStreamFrames, rechunkCases, runAll, bodyText } from "./byte-cut-cases.js";
import { runnerCases, type RunnerSide } from "./byte-cut-runner.js";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * Claude on Amazon Bedrock (ConversationRunner over AnthropicBedrock's messages.create({ stream: true }),
 * `invoke-with-response-stream`) behind the byte proxy. The body is in the AWS event-stream binary
 * framing: one message per Messages event (a 12-byte prelude with the total length, the headers,
 * a payload `{"bytes": base64 of the event's JSON}`, the message CRC32). The paying response is cut
 * on the frames where the call completes (content_block_stop) and the response finishes
 * (message_delta, message_stop), inside the frames that carry a multi-byte character of the
 * arguments, and at seeded offsets, with a FIN and with a RST; and whole responses re-chunked.
 * See README "Byte-level cuts".
 */

const world = byteCutWorld("byte-cut-bedrock", (p) => p.bedrockBaseURL);

type Block = { type: string; id?: string; input?: unknown; tool_use_id?: string; content?: unknown };
const blocksOf = (log: unknown[]) => log.flatMap((m) => (Array.isArray((m as { content?: unknown }).content) ? (m as { content: Block[] }).content : []));

const bedrock: RunnerSide = {
  finishType: "message_stop",
  prompt: PROMPT,
  // The ids sit in the frames' base64 payloads.
  idsIn: (body) => [...bodyText(body).matchAll(/"id":"((?:toolu|msg)_[^"]+)"/g)].map((m) => m[1]!),
  runner: ({ caseId, tools, dispatcher, store, onEvent }) =>
    new ConversationRunner({
      // The proxy tells the cases apart by this header (signed along with the others; the mock does not verify SigV4).
      client: new AnthropicBedrock({ baseURL: world.proxy.baseURL, awsRegion: "us-east-1", awsAccessKey: "AKIDEXAMPLE", awsSecretKey: "test-secret", maxRetries: 0, defaultHeaders: { "x-byte-case": caseId } }),
      dispatcher,
      store,
      model: "claude-test",
      tools: tools.providerSchemas(),
      retry: { backoffMs: () => 1 },
      onEvent,
    }),
  committed: (log) => {
    const blocks = blocksOf(log);
    return {
      calls: blocks.filter((b) => b.type === "tool_use").map((b) => ({ id: b.id!, input: b.input })),
      results: blocks.filter((b) => b.type === "tool_result").map((b) => ({ callId: b.tool_use_id!, output: b.content as string })),
    };
  },
};

const { runCase, referenceBody, cutEveryAttemptThenResend } = runnerCases(bedrock, { proxy: () => world.proxy, payments: () => world.payments });

describe(`byte-level cuts of Claude on Amazon Bedrock's event stream, AnthropicBedrock messages.create({ stream: true }) (seed ${SEED})`, () => {
  it("the reference body is an event stream of one frame per Messages event, in the order the harness names them", async () => {
    const names = eventStreamFrames(await referenceBody()).map((f) => f.name);
    expect(names.slice(-3)).toEqual(["content_block_stop", "message_delta", "message_stop"]);
    expect(names.filter((n) => n === "content_block_delta").length).toBeGreaterThan(2);
  });

  it("what the SDK tells of a FIN inside a frame: nothing when fewer than 4 bytes of it came (its decoder has no total length yet, and ends as at a clean close), `Truncated event message received.` from the 4th byte to the last but one", async () => {
    const frames = eventStreamFrames(await referenceBody());
    const stop = frames.find((f) => f.name === "message_stop")!;
    const told: Record<number, string> = {};
    for (const delta of [0, 1, 2, 3, 4, 11, stop.end - stop.start - 1, stop.end - stop.start]) {
      const caseId = `sdk-fin-${delta}`;
      world.proxy.plan(caseId, (_request, body) => cutDelivery(body, eventStreamFrames(body).find((f) => f.name === "message_stop")!.start + delta, "fin"));
      const client = new AnthropicBedrock({ baseURL: world.proxy.baseURL, awsRegion: "us-east-1", awsAccessKey: "AKIDEXAMPLE", awsSecretKey: "test-secret", maxRetries: 0, defaultHeaders: { "x-byte-case": caseId } });
      const seen: string[] = [];
      try {
        const tools = [{ name: "send_payment", description: "Send a payment", input_schema: { type: "object" as const } }];
        const stream = await client.messages.create({ model: "claude-test", max_tokens: 1024, messages: [{ role: "user", content: PROMPT }], tools, stream: true });
        for await (const event of stream) seen.push(event.type);
        told[delta] = `ended after ${seen.at(-1)}`;
      } catch (error) {
        told[delta] = `threw ${(error as Error).message} after ${seen.at(-1)}`;
      }
    }
    const length = stop.end - stop.start;
    // So only the runner's own check for message_stop (STREAM-1) fails such a response: the cases above cut there too.
    expect(told).toEqual({
      0: "ended after message_delta",
      1: "ended after message_delta",
      2: "ended after message_delta",
      3: "ended after message_delta",
      4: "threw Truncated event message received. after message_delta",
      11: "threw Truncated event message received. after message_delta",
      [length - 1]: "threw Truncated event message received. after message_delta",
      [length]: "ended after message_stop",
    });
  });

  it("STREAM-1 STREAM-8 STREAM-11 RECORD-8 a cut on the frames of the call's completion and the finish (prelude, header/payload edge, message CRC, seeded bytes), inside the frames of UTF-8 of the arguments, or elsewhere, by FIN or RST: one payment with its exact arguments, nothing of a cut response committed, records true", async () => {
    const points = cutPoints(
      await referenceBody(),
      [
        // The end of the last argument frame (its CRC), then the call's completion.
        { type: "content_block_stop", before: 4, edges: 6 },
        { type: "message_delta", before: 0, edges: 6 },
        { type: "message_stop", before: 0, edges: 6 },
      ],
      { sample: 6, seed: SEED },
    );
    await runAll(cutCases("cut", points, { rstEvery: 5 }), runCase);
  });

  it("RECORD-7 RECORD-8 TURN-12 the same cut on every attempt of the first send (the turn fails), then the user's re-send of the message: one payment, and each failed turn's record tells of it", async () => {
    await cutEveryAttemptThenResend("content_block_stop");
  });

  it("STREAM-2 the whole paying response re-chunked (1 byte a write; seeded splits of 1 to 64 bytes) commits at the first attempt with one payment", async () => {
    const cases = rechunkCases("chunks", SEED, 3, { crlf: false });
    await runAll(cases, runCase);
    // Nothing was cut, so nothing was retried: each case's turn took its first response.
    for (const c of cases) expect(world.proxy.requests.filter((r) => r.caseId === c.id).map((r) => r.number), c.label).toEqual([1, 2]);
  });
});
