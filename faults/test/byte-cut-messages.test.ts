import Anthropic from "@anthropic-ai/sdk";
import { ConversationRunner } from "@dispatch-once/anthropic";
import { describe, expect, it } from "vitest";
import { SEED, crlf, cutCases, cutPoints, rechunkCases, runAll } from "./byte-cut-cases.js";
import { runnerCases, type RunnerSide } from "./byte-cut-runner.js";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * The Messages API side (ConversationRunner over messages.create({ stream: true })) behind the
 * byte proxy: the paying response cut on every byte around the call's content_block_stop and the
 * message_stop (and the start and end of the message_delta), inside every multi-byte character of
 * the arguments, and at seeded offsets, with a FIN and with a RST; and whole responses re-chunked.
 * See README "Byte-level cuts".
 */

const world = byteCutWorld("byte-cut", (p) => p.baseURL);

type Block = { type: string; id?: string; input?: unknown; tool_use_id?: string; content?: unknown };
const blocksOf = (log: unknown[]) => log.flatMap((m) => (Array.isArray((m as { content?: unknown }).content) ? (m as { content: Block[] }).content : []));

const messages: RunnerSide = {
  finishType: "message_stop",
  prompt: PROMPT,
  idsIn: (body) => [...body.toString("utf8").matchAll(/"id":"((?:toolu|msg)_[^"]+)"/g)].map((m) => m[1]!),
  runner: ({ caseId, tools, dispatcher, store, onEvent }) =>
    new ConversationRunner({
      // The proxy tells the cases apart by this header.
      client: new Anthropic({ baseURL: world.proxy.baseURL, apiKey: "test-key", maxRetries: 0, defaultHeaders: { "x-byte-case": caseId } }),
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

const { runCase, referenceBody, cutEveryAttemptThenResend } = runnerCases(messages, { proxy: () => world.proxy, payments: () => world.payments });

describe(`byte-level cuts of the Messages stream, messages.create({ stream: true }) (seed ${SEED})`, () => {
  it("STREAM-1 STREAM-8 STREAM-11 RECORD-8 a cut on any byte around the call's completion and the finish, inside UTF-8, or elsewhere, by FIN or RST: one payment with its exact arguments, nothing of a cut response committed, records true", async () => {
    const points = cutPoints(
      await referenceBody(),
      [
        // The end of the last argument fragment, then every byte of the call's completion.
        { type: "content_block_stop", before: 4 },
        // The stop reason: its event line, and its last bytes.
        { type: "message_delta", before: 0, head: 8, tail: 4 },
        { type: "message_stop", before: 0 },
      ],
      { sample: 6, seed: SEED },
    );
    await runAll(cutCases("cut", points, { rstEvery: 5 }), runCase);
  });

  it("STREAM-8 a CRLF body cut on every byte of its message_stop's event line and of its data line's end and blank line (between \\r and \\n too), by FIN, and by RST at every fourth", async () => {
    const points = cutPoints(crlf(await referenceBody()), [{ type: "message_stop", before: 0, head: 24, tail: 8 }], { sample: 0, seed: SEED, insideCharacters: false });
    await runAll(cutCases("crlf", points, { crlf: true, rstEvery: 4 }), runCase);
  });

  it("RECORD-7 RECORD-8 TURN-12 the same cut on every attempt of the first send (the turn fails), then the user's re-send of the message: one payment, and each failed turn's record tells of it", async () => {
    await cutEveryAttemptThenResend("content_block_stop");
  });

  it("STREAM-2 the whole paying response re-chunked (1 byte a write; seeded splits of 1 to 64 bytes; LF and CRLF) commits at the first attempt with one payment", async () => {
    const cases = rechunkCases("chunks", SEED, 3);
    await runAll(cases, runCase);
    // Nothing was cut, so nothing was retried: each case's turn took its first response.
    for (const c of cases) expect(world.proxy.requests.filter((r) => r.caseId === c.id).map((r) => r.number), c.label).toEqual([1, 2]);
  });
});
