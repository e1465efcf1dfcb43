/**
 * The Vertex AI and Amazon Bedrock routes over plain fetch: what the README's table says of each
 * (auth, `anthropic_version`, error envelopes, the event-stream framing and its CRC32s), and that
 * a Bedrock stream carries the same events as the Messages API's for the same request and seed.
 * The SDK clients over these routes are tested in packages/anthropic (test/cloud-clients.test.ts).
 */
import { crc32 } from "node:zlib";
import { afterEach, describe, expect, it } from "vitest";
import { messagesFromGemini, signThinking, startMockProvider, toolUse, type MockProvider } from "../src/index.js";

const providers: MockProvider[] = [];
afterEach(async () => {
  await Promise.all(providers.splice(0).map((p) => p.close()));
});
async function start(seed = 7): Promise<MockProvider> {
  const provider = await startMockProvider({ seed });
  providers.push(provider);
  return provider;
}

const messages = [{ role: "user", content: "call send_payment {\"to\":\"acme\",\"amount_cents\":1200}" }];
const tools = [{ name: "send_payment", input_schema: { type: "object", properties: { to: { type: "string" }, amount_cents: { type: "integer" } } } }];
const cloudBody = { anthropic_version: "2026-10-21", max_tokens: 200, messages, tools };
const sigV4 = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261207/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=00";
const vertexPath = (model: string, method: string) => `/projects/p/locations/us-east5/publishers/anthropic/models/${model}:${method}`;

function post(url: string, body: unknown, headers: Record<string, string>, fault?: unknown): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers, ...(fault !== undefined ? { "x-mock-fault": JSON.stringify(fault) } : {}) },
    body: JSON.stringify(body),
  });
}

/** The messages of an event stream, each checked against its two CRC32s as a decoder does. */
function decodeEventStream(bytes: Buffer): { headers: Record<string, string>; payload: unknown }[] {
  const out: { headers: Record<string, string>; payload: unknown }[] = [];
  let at = 0;
  while (at < bytes.length) {
    const total = bytes.readUInt32BE(at);
    const headersLength = bytes.readUInt32BE(at + 4);
    expect(bytes.readUInt32BE(at + 8), `prelude CRC of the message at byte ${at}`).toBe(crc32(bytes.subarray(at, at + 8)));
    expect(bytes.readUInt32BE(at + total - 4), `message CRC of the message at byte ${at}`).toBe(crc32(bytes.subarray(at, at + total - 4)));
    const headers: Record<string, string> = {};
    let h = at + 12;
    while (h < at + 12 + headersLength) {
      const nameLength = bytes.readUInt8(h);
      const name = bytes.subarray(h + 1, h + 1 + nameLength).toString("utf8");
      expect(bytes.readUInt8(h + 1 + nameLength)).toBe(7);
      const valueLength = bytes.readUInt16BE(h + 2 + nameLength);
      headers[name] = bytes.subarray(h + 4 + nameLength, h + 4 + nameLength + valueLength).toString("utf8");
      h += 4 + nameLength + valueLength;
    }
    out.push({ headers, payload: JSON.parse(bytes.subarray(at + 12 + headersLength, at + total - 4).toString("utf8")) });
    at += total;
  }
  return out;
}

describe("Amazon Bedrock route", () => {
  it("streams each Messages event as an event-stream chunk (CRC32s right, base64 of the event's JSON): the same events as /v1/messages for the same request and seed", async () => {
    const bedrock = await start();
    const response = await post(`${bedrock.bedrockBaseURL}/model/claude-test/invoke-with-response-stream`, cloudBody, { authorization: sigV4 });
    expect(response.status).toBe(200);
    expect(response.headers.get("content-type")).toBe("application/vnd.amazon.eventstream");
    const frames = decodeEventStream(Buffer.from(await response.arrayBuffer()));
    expect(new Set(frames.map((f) => JSON.stringify(f.headers)))).toEqual(new Set([JSON.stringify({ ":event-type": "chunk", ":content-type": "application/json", ":message-type": "event" })]));
    const events = frames.map((f) => JSON.parse(Buffer.from((f.payload as { bytes: string }).bytes, "base64").toString("utf8")) as { type: string });

    const messagesApi = await start();
    const sse = await post(`${messagesApi.baseURL}/v1/messages`, { model: "claude-test", max_tokens: 200, messages, tools, stream: true }, { "x-api-key": "k", "anthropic-version": "2023-06-01" });
    const sseEvents = (await sse.text()).split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as unknown);
    expect(events).toEqual(sseEvents);
    expect(events.at(-1)).toEqual({ type: "message_stop" });
    expect(bedrock.requests[0]).toMatchObject({ api: "bedrock", path: "/model/claude-test/invoke-with-response-stream", stream: true, outcome: "complete" });
  });

  it("an error_event fault is an exception message named by the error's type (throttlingException), else modelStreamErrorException", async () => {
    const provider = await start();
    const url = `${provider.bedrockBaseURL}/model/claude-test/invoke-with-response-stream`;
    for (const [error, type, message] of [
      [{ type: "throttlingException", message: "Too many tokens" }, "throttlingException", "Too many tokens"],
      [undefined, "modelStreamErrorException", "Overloaded"],
    ] as const) {
      const response = await post(url, cloudBody, { authorization: sigV4 }, { kind: "error_event", at: { beforeMessageStop: true }, ...(error ? { error } : {}) });
      const last = decodeEventStream(Buffer.from(await response.arrayBuffer())).at(-1)!;
      expect(last).toEqual({ headers: { ":exception-type": type, ":content-type": "application/json", ":message-type": "exception" }, payload: { message } });
    }
  });

  it("STREAM-1 a truncate fault ends the body inside the event-stream message due at its position (the whole ones before it intact); held and cut with cutNow the same; on /v1/messages a partial SSE event", async () => {
    const provider = await start();
    const url = `${provider.bedrockBaseURL}/model/claude-test/invoke-with-response-stream`;
    const typeOf = (f: { payload: unknown }) => (JSON.parse(Buffer.from((f.payload as { bytes: string }).bytes, "base64").toString("utf8")) as { type: string }).type;
    const split = (bytes: Buffer) => {
      let at = 0;
      while (at + 4 <= bytes.length && at + bytes.readUInt32BE(at) <= bytes.length) at += bytes.readUInt32BE(at);
      return { whole: decodeEventStream(bytes.subarray(0, at)), rest: bytes.subarray(at) };
    };
    const cut = split(Buffer.from(await (await post(url, cloudBody, { authorization: sigV4 }, { kind: "truncate", at: { beforeMessageStop: true } })).arrayBuffer()));
    expect(cut.whole.map(typeOf)[0]).toBe("message_start");
    expect(cut.whole.map(typeOf).at(-1)).toBe("message_delta"); // every message up to message_delta, whole
    expect(cut.rest.length).toBeGreaterThan(0);
    expect(cut.rest.length).toBeLessThan(cut.rest.readUInt32BE(0)); // the message_stop message, begun and not finished
    expect(provider.requests.at(-1)).toMatchObject({ outcome: "truncate", faultFired: true });

    const held = post(url, cloudBody, { authorization: sigV4 }, { kind: "hold", at: { afterToolUseStop: 0 } });
    const hold = await provider.waitForHold(undefined, { timeoutMs: 5000 });
    provider.cutNow(hold.requestNumber, "truncate");
    const cutNow = split(Buffer.from(await (await held).arrayBuffer()));
    expect(cutNow.whole.map(typeOf).at(-1)).toBe("content_block_stop");
    expect(cutNow.rest.length).toBeLessThan(cutNow.rest.readUInt32BE(0));

    const sse = await post(`${provider.baseURL}/v1/messages`, { model: "claude-test", max_tokens: 200, messages, tools, stream: true }, { "x-api-key": "k", "anthropic-version": "2023-06-01" }, { kind: "truncate", at: { beforeMessageStop: true } });
    const text = await sse.text();
    expect(text).toContain("event: message_delta");
    expect(text.endsWith("\n\n")).toBe(false);
    expect(text.slice(text.lastIndexOf("\n\n") + 2)).toMatch(/^event: message_stop\n/);
  });

  it("answers /invoke with the whole message; refuses an unsigned request (403), a body without anthropic_version (400), and a status fault in Bedrock's envelope", async () => {
    const provider = await start();
    const url = `${provider.bedrockBaseURL}/model/claude-test/invoke`;
    const whole = await post(url, cloudBody, { authorization: sigV4 });
    expect(await whole.json()).toMatchObject({ type: "message", model: "claude-test", stop_reason: "tool_use" });
    const unsigned = await post(url, cloudBody, {});
    expect([unsigned.status, unsigned.headers.get("x-amzn-errortype"), await unsigned.json()]).toEqual([403, "AccessDeniedException", { message: "Missing Authentication Token" }]);
    const { anthropic_version: _, ...unversioned } = cloudBody;
    expect((await post(url, unversioned, { authorization: sigV4 })).status).toBe(400);
    const throttled = await post(url, cloudBody, { authorization: sigV4 }, { kind: "status", status: 429 });
    expect([throttled.status, throttled.headers.get("x-amzn-errortype"), await throttled.json()]).toEqual([429, "ThrottlingException", { message: "Number of request tokens has exceeded your per-minute rate limit" }]);
  });
});

describe("Amazon Bedrock Converse route", () => {
  const converseBody = {
    messages: [{ role: "user", content: [{ text: messages[0]!.content }] }],
    inferenceConfig: { maxTokens: 200 },
    toolConfig: { tools: [{ toolSpec: { name: tools[0]!.name, inputSchema: { json: tools[0]!.input_schema } } }], toolChoice: { auto: {} } },
  };

  it("streams the Messages events as Converse events at the same points (a text block starts with its delta, the stop reason is messageStop, metadata last): the same call as /v1/messages", async () => {
    const converse = await start();
    const response = await post(`${converse.bedrockBaseURL}/model/claude-test/converse-stream`, converseBody, { authorization: sigV4 });
    expect([response.status, response.headers.get("content-type")]).toEqual([200, "application/vnd.amazon.eventstream"]);
    const frames = decodeEventStream(Buffer.from(await response.arrayBuffer()));
    expect(new Set(frames.map((f) => `${f.headers[":message-type"]} ${f.headers[":content-type"]}`))).toEqual(new Set(["event application/json"]));
    const types = frames.map((f) => f.headers[":event-type"]);
    expect(types[0]).toBe("messageStart");
    expect(types.slice(-2)).toEqual(["messageStop", "metadata"]);
    expect(frames.at(-2)!.payload).toEqual({ stopReason: "tool_use" });
    const start0 = frames.find((f) => f.headers[":event-type"] === "contentBlockStart")!.payload as { contentBlockIndex: number; start: { toolUse: { toolUseId: string; name: string } } };
    expect(start0.start.toolUse.name).toBe("send_payment");
    const input = frames
      .filter((f) => f.headers[":event-type"] === "contentBlockDelta" && (f.payload as { contentBlockIndex: number }).contentBlockIndex === start0.contentBlockIndex)
      .map((f) => (f.payload as { delta: { toolUse: { input: string } } }).delta.toolUse.input)
      .join("");
    expect(JSON.parse(input)).toEqual({ to: "acme", amount_cents: 1200 });
    expect(converse.requests[0]).toMatchObject({ api: "converse", path: "/model/claude-test/converse-stream", stream: true, outcome: "complete" });
    expect(converse.requests[0]!.toolUses.map((t) => [t.id, t.name])).toEqual([[start0.start.toolUse.toolUseId, "send_payment"]]);
  });

  it("an error_event fault is an exception frame; /converse answers whole in Converse's shape; an unsigned request is 403 and a status fault is Bedrock's envelope", async () => {
    const provider = await start();
    const stream = await post(`${provider.bedrockBaseURL}/model/claude-test/converse-stream`, converseBody, { authorization: sigV4 }, { kind: "error_event", at: { afterToolUseStop: 0 }, error: { type: "throttlingException", message: "Too many tokens" } });
    const frames = decodeEventStream(Buffer.from(await stream.arrayBuffer()));
    expect(frames.at(-1)).toEqual({ headers: { ":exception-type": "throttlingException", ":content-type": "application/json", ":message-type": "exception" }, payload: { message: "Too many tokens" } });
    expect(frames.map((f) => f.headers[":event-type"])).not.toContain("messageStop");
    const url = `${provider.bedrockBaseURL}/model/claude-test/converse`;
    const whole = (await (await post(url, converseBody, { authorization: sigV4 })).json()) as { output: { message: { role: string; content: { toolUse?: { name: string; input: unknown } }[] } }; stopReason: string };
    expect([whole.stopReason, whole.output.message.role, whole.output.message.content.find((c) => c.toolUse)?.toolUse]).toMatchObject(["tool_use", "assistant", { name: "send_payment", input: { to: "acme", amount_cents: 1200 } }]);
    const unsigned = await post(url, converseBody, {});
    expect([unsigned.status, unsigned.headers.get("x-amzn-errortype"), await unsigned.json()]).toEqual([403, "AccessDeniedException", { message: "Missing Authentication Token" }]);
    const throttled = await post(url, converseBody, { authorization: sigV4 }, { kind: "status", status: 429 });
    expect([throttled.status, throttled.headers.get("x-amzn-errortype")]).toEqual([429, "ThrottlingException"]);
  });
});

describe("Google Gemini API route", () => {
  const geminiBody = {
    contents: [{ role: "user", parts: [{ text: messages[0]!.content }] }],
    generationConfig: { maxOutputTokens: 200 },
    tools: [{ functionDeclarations: [{ name: tools[0]!.name, parameters: tools[0]!.input_schema }] }],
  };
  const chunksOf = (text: string) => {
    // alt=sse: `data:` lines only, no `event:` names.
    expect(text).not.toMatch(/^event:/m);
    return text.split("\r\n\r\n").filter((e) => e !== "").map((e) => JSON.parse(e.replace(/^data: /, "")) as Record<string, any>);
  };

  it("streams the call whole in one functionCall chunk, finishReason last; every chunk names the response and the model; the same call as /v1/messages", async () => {
    const provider = await start();
    const response = await post(`${provider.geminiBaseURL}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, geminiBody, { "x-goog-api-key": "AIzaTest" });
    expect([response.status, response.headers.get("content-type")]).toEqual([200, "text/event-stream"]);
    const chunks = chunksOf(await response.text());
    expect(new Set(chunks.map((c) => `${String(c["responseId"])} ${String(c["modelVersion"])}`)).size).toBe(1);
    const calls = chunks.flatMap((c) => c["candidates"][0].content.parts).filter((p: Record<string, unknown>) => p["functionCall"]);
    expect(calls.map((p: any) => [p.functionCall.name, p.functionCall.args])).toEqual([["send_payment", { to: "acme", amount_cents: 1200 }]]);
    expect(chunks.map((c) => c["candidates"][0].finishReason ?? null).filter((r) => r !== null)).toEqual(["STOP"]);
    expect(chunks.at(-1)!["candidates"][0].finishReason).toBe("STOP");
    expect(chunks.at(-1)!["usageMetadata"].totalTokenCount).toBeGreaterThan(0);
    expect(provider.requests[0]).toMatchObject({ api: "gemini", path: "/v1beta/models/gemini-2.5-flash:streamGenerateContent", stream: true, outcome: "complete" });
    expect(provider.requests[0]!.toolUses.map((t) => [t.id, t.name])).toEqual([[calls[0].functionCall.id, "send_payment"]]);
  });

  it("an error_event fault is a data: line of Google's error envelope on the 200; :generateContent answers whole; no key is 403 and a status fault is Google's envelope", async () => {
    const provider = await start();
    const base = `${provider.geminiBaseURL}/models/gemini-2.5-flash`;
    const stream = await post(`${base}:streamGenerateContent?alt=sse`, geminiBody, { "x-goog-api-key": "k" }, { kind: "error_event", at: { afterToolUseStop: 0 }, error: { type: "overloaded_error", message: "The model is overloaded." } });
    const chunks = chunksOf(await stream.text());
    expect(stream.status).toBe(200);
    expect(chunks.at(-1)).toEqual({ error: { code: 503, message: "The model is overloaded.", status: "UNAVAILABLE" } });
    expect(chunks.some((c) => c["candidates"]?.[0]?.finishReason)).toBe(false);
    const whole = (await (await post(`${base}:generateContent`, geminiBody, { "x-goog-api-key": "k" })).json()) as Record<string, any>;
    expect([whole["candidates"][0].finishReason, whole["candidates"][0].content.parts.find((p: any) => p.functionCall)?.functionCall]).toMatchObject(["STOP", { name: "send_payment", args: { to: "acme", amount_cents: 1200 } }]);
    const keyless = await post(`${base}:generateContent`, geminiBody, {});
    expect([keyless.status, ((await keyless.json()) as any).error.status]).toEqual([403, "PERMISSION_DENIED"]);
    const throttled = await post(`${base}:generateContent`, geminiBody, { "x-goog-api-key": "k" }, { kind: "status", status: 429 });
    expect([throttled.status, ((await throttled.json()) as any).error]).toMatchObject([429, { code: 429, status: "RESOURCE_EXHAUSTED" }]);
  });
  it("takes a declaration as @google/genai sends it: `parameters` in the Schema's upper-case Type enum (OBJECT, STRING, INTEGER), or `parametersJsonSchema`", async () => {
    const provider = await start();
    const url = `${provider.geminiBaseURL}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`;
    // @google/genai 3.6.1 upper-cases every `type` of `parameters` (the API's Type enum) before sending.
    const upper = { type: "OBJECT", properties: { to: { type: "STRING" }, amount_cents: { type: "INTEGER" }, tags: { type: "ARRAY", items: { type: "STRING" } } }, required: ["to"] };
    const sdkBody = { ...geminiBody, tools: [{ functionDeclarations: [{ name: "send_payment", parameters: upper }] }] };
    const response = await post(url, sdkBody, { "x-goog-api-key": "k" });
    expect(response.status).toBe(200);
    const calls = chunksOf(await response.text()).flatMap((c) => c["candidates"][0].content.parts).filter((p: Record<string, unknown>) => p["functionCall"]);
    expect(calls.map((p: any) => p.functionCall.args)).toEqual([{ to: "acme", amount_cents: 1200 }]);
    expect((provider.requests[0]!.body as any).tools[0].functionDeclarations[0].parameters).toEqual(upper); // the log keeps the body as sent
    const jsonSchemaBody = { ...geminiBody, tools: [{ functionDeclarations: [{ name: "send_payment", parametersJsonSchema: tools[0]!.input_schema }] }] };
    expect((await post(url, jsonSchemaBody, { "x-goog-api-key": "k" })).status).toBe(200);
    const read = messagesFromGemini(sdkBody, "gemini-2.5-flash", true) as { tools: { input_schema: unknown }[] };
    expect(read.tools[0]!.input_schema).toEqual({ type: "object", properties: { to: { type: "string" }, amount_cents: { type: "integer" }, tags: { type: "array", items: { type: "string" } } }, required: ["to"] });
    // @google/genai 3.6.1's default apiVersion is `v1`: the API serves both, so does the mock.
    const v1 = await post(`${provider.url}/v1/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, sdkBody, { "x-goog-api-key": "k" });
    expect([v1.status, provider.requests.at(-1)!.api]).toEqual([200, "gemini"]);
    const fromJsonSchema = messagesFromGemini(jsonSchemaBody, "gemini-2.5-flash", true) as { tools: { input_schema: unknown }[] };
    expect(fromJsonSchema.tools[0]!.input_schema).toEqual(tools[0]!.input_schema);
  });
  it("a response whose output limit (or a refusal) cut a call's arguments: 200, the whole calls before it, no part for the cut call, MAX_TOKENS (SAFETY) last", async () => {
    const payment = { to: "acme", amount_cents: 1200, memo: "Invoice 1042, as asked by the user" };
    for (const [stopReason, finishReason] of [["max_tokens", "MAX_TOKENS"], ["refusal", "SAFETY"]] as const) {
      const provider = await startMockProvider({
        seed: 7,
        script: () => ({ content: [toolUse("send_payment", payment), toolUse("send_payment", { ...payment, to: "bob" })], stopReason, ...(stopReason === "refusal" ? { stopDetails: { category: "cyber", explanation: "no" } } : {}) }),
      });
      providers.push(provider);
      const response = await post(`${provider.geminiBaseURL}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, geminiBody, { "x-goog-api-key": "k" });
      expect(response.status).toBe(200);
      const chunks = chunksOf(await response.text());
      const calls = chunks.flatMap((c) => c["candidates"][0].content.parts).filter((p: Record<string, unknown>) => p["functionCall"]);
      expect(calls.map((p: any) => p.functionCall.args)).toEqual([payment]);
      expect(chunks.at(-1)!["candidates"][0].finishReason).toBe(finishReason);
    }
  });
});

describe("Gemini on Vertex AI route", () => {
  const vertexGemini = (model: string, method: string) => `/v1beta1/projects/acme-prod/locations/us-central1/publishers/google/models/${model}:${method}`;
  const body = (extra: Record<string, unknown>) => ({
    contents: [{ role: "user", parts: [{ text: messages[0]!.content }] }],
    tools: [{ functionDeclarations: [{ name: tools[0]!.name, parameters: tools[0]!.input_schema }] }],
    ...extra,
  });
  const partsOf = async (response: Response) =>
    (await response.text())
      .split("\r\n\r\n")
      .filter((e) => e !== "")
      .map((e) => JSON.parse(e.replace(/^data: /, "")) as Record<string, any>)
      .flatMap((c) => c["candidates"][0].content.parts as Record<string, any>[]);

  it("with streamFunctionCallArguments: the call's name (willContinue), its members as partialArgs (a string in two pieces), then the terminal functionCall {}; thoughts first, the thinking's signature on the call", async () => {
    const provider = await start();
    const request = body({ toolConfig: { functionCallingConfig: { streamFunctionCallArguments: true } }, generationConfig: { thinkingConfig: { includeThoughts: true } } });
    const response = await post(`${provider.url}${vertexGemini("gemini-3-pro-preview", "streamGenerateContent")}?alt=sse`, request, { authorization: "Bearer ya29.test" });
    expect(response.status).toBe(200);
    const parts = await partsOf(response);
    const thoughts = parts.filter((p) => p["thought"] === true);
    expect(thoughts.length).toBeGreaterThan(0);
    const calls = parts.filter((p) => p["functionCall"]).map((p) => p["functionCall"]);
    expect(calls[0]).toMatchObject({ name: "send_payment", willContinue: true });
    expect(calls.at(-1)).toEqual({});
    const partialArgs = calls.slice(1, -1).flatMap((c) => c.partialArgs);
    expect(calls.slice(1, -1).every((c) => c.willContinue === true && c.args === undefined)).toBe(true);
    expect(partialArgs).toEqual([
      { jsonPath: "$.to", stringValue: "ac", willContinue: true },
      { jsonPath: "$.to", stringValue: "me" },
      { jsonPath: "$.amount_cents", numberValue: 1200 },
    ]);
    // The thinking's signature rides on the step's first call, and vouches for the thoughts' text.
    const signed = parts.find((p) => p["functionCall"]?.name === "send_payment")!;
    expect(signed["thoughtSignature"]).toBe(signThinking(thoughts.map((p) => p["text"]).join("")));
    expect(provider.requests[0]).toMatchObject({ api: "gemini", stream: true, outcome: "complete" });
  });

  it("without it (or on the Gemini API's path) the call is whole; express mode takes x-goog-api-key at /v1/publishers/google; a request with neither a bearer token nor a key is refused", async () => {
    const provider = await start();
    const streamed = { toolConfig: { functionCallingConfig: { streamFunctionCallArguments: true } } };
    const whole = await partsOf(await post(`${provider.url}${vertexGemini("gemini-2.5-flash", "streamGenerateContent")}?alt=sse`, body({}), { authorization: "Bearer ya29.test" }));
    const gemini = await partsOf(await post(`${provider.geminiBaseURL}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, body(streamed), { "x-goog-api-key": "k" }));
    for (const parts of [whole, gemini]) expect(parts.filter((p) => p["functionCall"]).map((p) => p["functionCall"].args)).toEqual([{ to: "acme", amount_cents: 1200 }]);
    const express = await post(`${provider.url}/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, body({}), { "x-goog-api-key": "AQ.k" });
    expect(express.status).toBe(200);
    await express.text();
    const anonymous = await post(`${provider.url}${vertexGemini("gemini-2.5-flash", "generateContent")}`, body({}), {});
    expect([anonymous.status, ((await anonymous.json()) as any).error.code]).toEqual([403, 403]);
  });

  it("AISDK-16 streamed partialArgs name each leaf by its JSON path (RFC 9535: $.a[0].b): put back together they are the call's arguments, arrays and nested objects included", async () => {
    const provider = await start();
    const args = { to: "acme", lines: [{ sku: "A-1", qty: 2 }, { sku: "B", qty: 1 }], tags: ["x", "yz"], note: { text: "Für Zoë", urgent: true } };
    const request = {
      contents: [{ role: "user", parts: [{ text: `call send_payment ${JSON.stringify(args)}` }] }],
      tools: [{ functionDeclarations: [{ name: "send_payment", parameters: { type: "object" } }] }],
      toolConfig: { functionCallingConfig: { streamFunctionCallArguments: true } },
    };
    const parts = await partsOf(await post(`${provider.url}${vertexGemini("gemini-3-pro-preview", "streamGenerateContent")}?alt=sse`, request, { authorization: "Bearer ya29.test" }));
    const pieces = parts.flatMap((p) => (p["functionCall"]?.partialArgs ?? []) as { jsonPath: string; stringValue?: string; numberValue?: number; boolValue?: boolean }[]);
    // A reader of RFC 9535's normalized paths: a member is .name, an array element [n].
    const rebuilt: Record<string, unknown> = {};
    for (const piece of pieces) {
      const steps = [...piece.jsonPath.matchAll(/\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]/g)].map((m) => (m[2] !== undefined ? Number(m[2]) : m[1]!));
      expect(steps.map((s) => (typeof s === "number" ? `[${s}]` : `.${s}`)).join(""), piece.jsonPath).toBe(piece.jsonPath.slice(1));
      let at: Record<string | number, unknown> = rebuilt;
      steps.slice(0, -1).forEach((step, i) => (at = (at[step] ??= typeof steps[i + 1] === "number" ? [] : {}) as Record<string | number, unknown>));
      const leaf = steps.at(-1)!;
      const value = piece.stringValue ?? piece.numberValue ?? piece.boolValue;
      at[leaf] = typeof value === "string" && typeof at[leaf] === "string" ? (at[leaf] as string) + value : value;
    }
    expect(rebuilt).toEqual(args);
  });
});

describe("Vertex AI route", () => {
  it("streams the Messages API's SSE at :streamRawPredict, answers :rawPredict whole, and refuses a request without a bearer token (401) or anthropic_version (400)", async () => {
    const provider = await start();
    const auth = { authorization: "Bearer ya29.test" };
    const streamed = await post(`${provider.vertexBaseURL}${vertexPath("claude-test%40v1", "streamRawPredict")}`, { ...cloudBody, stream: true }, auth);
    expect(streamed.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    expect((await streamed.text()).trimEnd().endsWith('data: {"type":"message_stop"}')).toBe(true);
    expect(provider.requests[0]).toMatchObject({ api: "vertex", stream: true, outcome: "complete", body: { anthropic_version: "2026-10-21" } });
    expect(provider.requests[0]!.events[0]!.data).toMatchObject({ message: { model: "claude-test@v1" } });
    const whole = await post(`${provider.vertexBaseURL}${vertexPath("claude-test", "rawPredict")}`, cloudBody, auth);
    expect(await whole.json()).toMatchObject({ type: "message", stop_reason: "tool_use" });
    expect((await post(`${provider.vertexBaseURL}${vertexPath("claude-test", "rawPredict")}`, cloudBody, {})).status).toBe(401);
    const { anthropic_version: _, ...unversioned } = cloudBody;
    expect((await post(`${provider.vertexBaseURL}${vertexPath("claude-test", "rawPredict")}`, unversioned, auth)).status).toBe(400);
  });
});

describe("repeat_call on the cloud platforms (STREAM-10's whole repeat, CONF-2's relay repeat)", () => {
  type Event = { type: string; index?: number; content_block?: { type: string; id?: string } };
  const toolUses = (events: Event[]) => events.filter((e) => e.type === "content_block_start" && e.content_block?.type === "tool_use").map((e) => [e.index, e.content_block!.id]);
  const repeat = { kind: "repeat_call", call: 0 };

  it("Bedrock's and Vertex AI's Messages API streams deliver the call again at the next free index, as /v1/messages does; Converse and Gemini refuse it (fault_not_applicable)", async () => {
    const provider = await start();
    const bedrock = await post(`${provider.bedrockBaseURL}/model/claude-test/invoke-with-response-stream`, cloudBody, { authorization: sigV4 }, repeat);
    expect(bedrock.status).toBe(200);
    const bedrockEvents = decodeEventStream(Buffer.from(await bedrock.arrayBuffer())).map((f) => JSON.parse(Buffer.from((f.payload as { bytes: string }).bytes, "base64").toString("utf8")) as Event);
    const vertex = await post(`${provider.vertexBaseURL}${vertexPath("claude-test", "streamRawPredict")}`, { ...cloudBody, stream: true }, { authorization: "Bearer ya29.test" }, repeat);
    expect(vertex.status).toBe(200);
    const vertexEvents = (await vertex.text()).split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)) as Event);
    for (const events of [bedrockEvents, vertexEvents]) {
      const uses = toolUses(events);
      expect(uses).toHaveLength(2);
      // The one call (its id), delivered again at another index, before the response finishes.
      expect(uses[1]![1]).toBe(uses[0]![1]);
      expect(uses[1]![0]).not.toBe(uses[0]![0]);
      expect(events.at(-1)).toEqual({ type: "message_stop" });
    }
    expect(provider.requests.map((r) => [r.api, r.faultFired])).toEqual([
      ["bedrock", true],
      ["vertex", true],
    ]);
    const converse = await post(`${provider.bedrockBaseURL}/model/claude-test/converse-stream`, { messages: [{ role: "user", content: [{ text: messages[0]!.content }] }], toolConfig: { tools: [{ toolSpec: { name: "send_payment", inputSchema: { json: tools[0]!.input_schema } } }] } }, { authorization: sigV4 }, repeat);
    expect(converse.status).toBe(500);
    expect(await converse.text()).toContain("fault_not_applicable");
    const gemini = await post(`${provider.geminiBaseURL}/models/gemini-2.5-flash:streamGenerateContent?alt=sse`, { contents: [{ role: "user", parts: [{ text: messages[0]!.content }] }], tools: [{ functionDeclarations: [{ name: "send_payment", parameters: tools[0]!.input_schema }] }] }, { "x-goog-api-key": "AIzaTest" }, repeat);
    expect(gemini.status).toBe(500);
    expect(await gemini.text()).toContain("fault_not_applicable");
  });
});

describe("a Gemini model turn sent back, as the mock reads it", () => {
  it("AISDK-16 a turn's thought parts are its thinking block and nothing else: no text block of the thought, the signature on the block", () => {
    const thought = "The user wants acme paid.";
    const signature = signThinking(thought);
    const body = {
      contents: [
        { role: "user", parts: [{ text: "pay acme" }] },
        { role: "model", parts: [{ text: thought, thought: true }, { functionCall: { name: "send_payment", args: { to: "acme" } }, thoughtSignature: signature }] },
      ],
    };
    const read = messagesFromGemini(body, "gemini-3-pro-preview", true) as { messages: { role: string; content: { type: string; text?: string; thinking?: string; signature?: string }[] }[] };
    const turn = read.messages[1]!;
    expect(turn.role).toBe("assistant");
    expect(turn.content.map((b) => b.type)).toEqual(["thinking", "tool_use"]);
    expect(turn.content[0]).toMatchObject({ thinking: thought, signature });
  });
});
