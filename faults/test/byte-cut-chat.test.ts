import OpenAI from "openai";
import { ChatCompletionsRunner } from "@dispatch-once/openai";
import { startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { call, respond, scriptFromPlans, startMockOpenAI, type MockOpenAI } from "@dispatch-once/mock-openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PAY_ZOE, SEED, crlf, cutCases, cutDelivery, cutPoints, dataEvent, rechunkCases, runAll, type ByteCase } from "./byte-cut-cases.js";
import { startByteProxy, type ByteProxy, type Delivery } from "./byte-proxy.js";
import { runnerCases, type RunnerSide } from "./byte-cut-runner.js";

/*
 * The OpenAI Chat Completions side (ChatCompletionsRunner over chat.completions.create({ stream:
 * true }), the API most OpenAI-compatible servers speak) behind the byte proxy. Its chunks have no
 * `event:` line, so the landmarks are named by their data (dataEvent): the chunk that names the
 * call (its first tool_calls fragment), the one whose finish_reason both completes the one call
 * and finishes the response (STREAM-20), and `data: [DONE]` after the usage chunk. The paying
 * response is cut around those, on every byte of multi-byte UTF-8 in the streamed arguments, and
 * at seeded offsets, with a FIN and with a RST; and whole responses re-chunked. A smaller sample
 * than the Responses side's (CI's budget: about 4 s of CPU). See README "Byte-level cuts".
 */

const PROMPT = "pay Zoë";
/** The first fragment of call 0: it names the call (id, function name), its arguments follow. */
const CALL_NAMED = dataEvent('"tool_calls":[{"index":0,"id":"call_');
/** The finish_reason chunk (a string, where every chunk before has null): the one call is complete there, and the response finished (STREAM-20). */
const FINISH = dataEvent('"finish_reason":"');
/** The stream's last line, after the usage chunk: the SDK consumes it; the response finished before it. */
const DONE = dataEvent("[DONE]");

let provider: MockOpenAI;
let proxy: ByteProxy;
let payments: MockPaymentsServer;

beforeAll(async () => {
  provider = await startMockOpenAI({ seed: "byte-cut-chat", script: scriptFromPlans({ [PROMPT]: respond(call("send_payment", PAY_ZOE)) }, { after: "Payment sent." }) });
  proxy = await startByteProxy(provider.baseURL);
  payments = await startMockPayments({ latencyMs: 0 });
});
afterAll(async () => {
  await proxy?.close();
  await provider?.close();
  await payments?.close();
});

type Message = { role?: string; tool_calls?: { id: string; function: { arguments: string } }[]; tool_call_id?: string; content?: string };
/** The committed log's messages: the runner commits a turn's tool messages as one array (STREAM-21). */
const messagesOf = (log: unknown[]): Message[] => log.flatMap((entry) => (Array.isArray(entry) ? (entry as Message[]) : [entry as Message]));

const chat: RunnerSide = {
  finishType: FINISH,
  prompt: PROMPT,
  idsIn: (body) => [...body.toString("utf8").matchAll(/"id":"((?:call_|chatcmpl-)[^"]+)"/g)].map((m) => m[1]!),
  runner: ({ caseId, tools, dispatcher, store, onEvent }) =>
    new ChatCompletionsRunner({
      // The proxy tells the cases apart by this header.
      client: new OpenAI({ baseURL: proxy.baseURL, apiKey: "test-key", maxRetries: 0, defaultHeaders: { "x-byte-case": caseId } }),
      dispatcher,
      store,
      model: "gpt-test",
      tools: tools.providerSchemas(),
      // A usage chunk between the finish_reason and [DONE]: a cut there falls after the finish.
      params: { stream_options: { include_usage: true } },
      retry: { backoffMs: () => 1 },
      onEvent,
    }),
  committed: (log) => {
    const messages = messagesOf(log);
    return {
      calls: messages.flatMap((m) => (m.role === "assistant" ? (m.tool_calls ?? []) : [])).map((c) => ({ id: c.id, input: JSON.parse(c.function.arguments) as unknown })),
      results: messages.filter((m) => m.role === "tool").map((m) => ({ callId: m.tool_call_id!, output: m.content! })),
    };
  },
};

const { runCase, referenceBody, cutEveryAttemptThenResend } = runnerCases(chat, { proxy: () => proxy, payments: () => payments });

describe(`byte-level cuts of the Chat Completions stream, chat.completions.create({ stream: true }) (seed ${SEED})`, () => {
  it("STREAM-20 STREAM-21 STREAM-11 RECORD-8 a cut around the chunk naming the call, the finish_reason chunk and [DONE], inside UTF-8 of the arguments, or elsewhere, by FIN or RST: one payment with its exact arguments, nothing of a cut response committed, records true", async () => {
    const body = await referenceBody();
    // The reference is what the landmarks say it is: one call named once, finished by tool_calls, then usage and [DONE].
    expect(body.toString("utf8").match(/"finish_reason":"tool_calls"/g)).toHaveLength(1);
    expect(body.toString("utf8")).toMatch(/"usage":\{[^]*data: \[DONE\]\n\n$/);
    const points = cutPoints(
      body,
      [
        { type: CALL_NAMED, before: 2, head: 8 },
        { type: FINISH, before: 0, head: 10, tail: 6 },
        { type: DONE, before: 0, head: 6 },
      ],
      { sample: 3, seed: SEED, nonAsciiBefore: FINISH },
    );
    await runAll(cutCases("cut", points, { rstEvery: 5 }), runCase);
  });

  it("STREAM-20 a CRLF body cut on the first and last bytes of its finish_reason chunk (between \\r and \\n too), by FIN, and by RST at every fourth", async () => {
    const points = cutPoints(crlf(await referenceBody()), [{ type: FINISH, before: 0, head: 4, tail: 6 }], { sample: 0, seed: SEED, insideCharacters: false });
    await runAll(cutCases("crlf", points, { crlf: true, rstEvery: 4 }), runCase);
  });

  it("RECORD-7 RECORD-8 TURN-12 the same cut on every attempt of the first send (the turn fails), then the user's re-send of the message: one payment, and each failed turn's record tells of it", async () => {
    // On this API the call completes at the finish_reason chunk: both landmarks are that chunk.
    await cutEveryAttemptThenResend(FINISH);
  });

  it("STREAM-3 RECORD-7 a cut right after an argument fragment that ends inside a surrogate pair (the stream splits 🧾 or 💳 between fragments as UTF-16 halves), on every attempt of the first send: the failed turn's record is kept and the re-send pays once", async () => {
    // A fragment whose text ends with an escaped high surrogate: the low half comes in the next one.
    const split = /\\ud[89ab][0-9a-f]{2}"\}\}\]\}/;
    let splits = 0;
    const cutAfterSplit = (number: number, body: Buffer): Delivery | undefined => {
      if (number > 3) return undefined;
      const text = body.toString("latin1");
      const at = split.exec(text)?.index;
      if (at !== undefined) splits++;
      // A response whose rendering split no pair is cut after its first argument fragment instead.
      const from = at ?? text.indexOf('{"index":0,"function":{"arguments":');
      return cutDelivery(body, body.indexOf("\n\n", from) + 2, number === 2 ? "rst" : "fin");
    };
    await runAll(Array.from({ length: 8 }, (_, i): ByteCase => ({ id: `pair-${i}`, label: `cut inside a split pair, case ${i}`, plan: cutAfterSplit })), runCase);
    // Renderings vary with the attempt (about one in four splits a pair): some attempts met one.
    expect(splits).toBeGreaterThan(0);
  });

  it("STREAM-20 the whole paying response re-chunked (seeded splits of 1 to 64 bytes, LF and CRLF) commits at the first attempt with one payment", async () => {
    // 1 byte a write is the other sides' (each byte costs a turn of the event loop).
    const cases = rechunkCases("chunks", SEED, 2).filter((c) => !c.label.startsWith("1 byte a write"));
    await runAll(cases, runCase);
    for (const c of cases) expect(proxy.requests.filter((r) => r.caseId === c.id).map((r) => r.number), c.label).toEqual([1, 2]);
  });
});
