import { createVertex } from "@ai-sdk/google-vertex";
import { toolUse, turn, type FaultPosition } from "@dispatch-once/mock-provider";
import { StreamIncompleteError } from "@dispatch-once/runner";
import { defaultSettingsMiddleware, stepCountIs, streamText, wrapLanguageModel, type LanguageModel, type LanguageModelMiddleware, type ModelMessage, type ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { providerToolsGuard, spliceGuard } from "../src/index.js";
import { billAcme, billed, drain, expectIncidentBillsOnce, invoiceTool, keepingApp, mocksPerTest } from "./helpers.js";

/*
 * The AI SDK over Gemini on Vertex AI (`@ai-sdk/google-vertex` 4.0.208, which runs @ai-sdk/google
 * 3.0.129's language model against `POST /v1beta1/projects/{p}/locations/{l}/publishers/google/models/{m}:streamGenerateContent?alt=sse`),
 * against the mock provider's Vertex Gemini route: the same scripts and faults as its Gemini route,
 * and what only Vertex AI sends: a call's arguments streamed (`streamFunctionCallArguments`: a part
 * with the call's name and `willContinue`, `partialArgs` as its members become whole, a terminal
 * `functionCall: {}`) and thought parts (`thought: true`, the turn's `thoughtSignature` on its first call).
 * Authentication: google-auth-library given an auth client that hands out a fixed token (no token is
 * fetched), and a fetch that sends Vertex AI's host to the mock and refuses every other.
 */

const ask = "pay acme 5 and bob 7";
const env = mocksPerTest("ai-sdk-google-vertex", {
  "bill acme": turn(toolUse("create_invoice", { customer: "acme", amount: 12_500 })),
  [ask]: turn(toolUse("create_invoice", { customer: "acme", amount: 5 }), toolUse("create_invoice", { customer: "bob", amount: 7 })),
});

const VERTEX_HOST = "https://us-central1-aiplatform.googleapis.com";
const toMock: typeof fetch = async (input, init) => {
  const url = input instanceof Request ? input.url : String(input);
  if (!url.startsWith(`${VERTEX_HOST}/`)) throw new Error(`this test sends nothing but to Vertex AI's host (the mock), not to ${url}`);
  return fetch(`${env.provider.url}${url.slice(VERTEX_HOST.length)}`, init);
};
const authClient = { getAccessToken: async () => ({ token: "ya29.mock-token" }) };
const vertex = (viaFetch: typeof fetch = toMock) => createVertex({ project: "acme-prod", location: "us-central1", googleAuthOptions: { authClient: authClient as never }, fetch: viaFetch });

/** A proxy that passes the chunks on without their `responseId` (it re-serialises them with a schema of its own). */
const stripsIds: typeof fetch = async (input, init) => {
  const response = await toMock(input, init);
  if (response.body === null) return response;
  let rest = "";
  const strip = (line: string) => line.replace(/"responseId":"[^"]*",?/g, "");
  const body = response.body.pipeThrough(new TextDecoderStream()).pipeThrough(
    new TransformStream<string, string>({
      transform(text, controller) {
        const lines = (rest + text).split("\n");
        rest = lines.pop()!;
        controller.enqueue(lines.map((l) => `${strip(l)}\n`).join(""));
      },
      flush(controller) {
        if (rest !== "") controller.enqueue(strip(rest));
      },
    }),
  );
  return new Response(body.pipeThrough(new TextEncoderStream()), { status: response.status, headers: response.headers });
};

/** Vertex AI's own: arguments streamed, thoughts included (a Gemini 3 model, which streams arguments). */
const vertexOnly: LanguageModelMiddleware = defaultSettingsMiddleware({
  settings: { providerOptions: { google: { streamFunctionCallArguments: true, thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } } } },
});
const argsOnly: LanguageModelMiddleware = defaultSettingsMiddleware({ settings: { providerOptions: { google: { streamFunctionCallArguments: true } } } });
type Model = Parameters<typeof wrapLanguageModel>[0]["model"];
const gemini3 = (): LanguageModel => wrapLanguageModel({ model: vertex()("gemini-3-pro-preview") as Model, middleware: [vertexOnly] });
const guarded = (): LanguageModel => wrapLanguageModel({ model: vertex()("gemini-3-pro-preview") as Model, middleware: [vertexOnly, providerToolsGuard(), spliceGuard()] });
const paid = () => billed(env.payments);
const app = (model: () => LanguageModel = gemini3) => keepingApp(env.payments, "chat_vertex", model);

const errorOf = (parts: readonly { type: string }[]) => (parts.find((p) => p.type === "error") as { error?: unknown } | undefined)?.error;
const streamErrorOf = (parts: readonly { type: string }[]) => {
  const error = errorOf(parts);
  expect(StreamIncompleteError.isInstance(error), String(error)).toBe(true);
  return (error as StreamIncompleteError).streamError;
};
const models = [
  ["unguarded", gemini3],
  ["under spliceGuard()", guarded],
] as const;

describe("through @ai-sdk/google-vertex (Gemini on Vertex AI) against the mock provider", () => {
  it("the route, guarded (no false alarm): a bearer-token request, thoughts, a call streamed in partialArgs, its result, and a closing answer that carries the thought back signed", async () => {
    const { request, runs } = app(guarded);
    const sent = await request(billAcme, "tool-call");
    expect(errorOf(sent.parts)).toBeUndefined();
    expect(sent.steps).toEqual(["tool-calls", "stop"]);
    expect(sent.kept).toBe(true);
    expect(paid()).toEqual(["acme 12500"]);
    expect(runs).toHaveLength(1);
    expect(env.provider.requests.map((r) => [r.api, r.path])).toEqual([
      ["gemini", "/v1beta1/projects/acme-prod/locations/us-central1/publishers/google/models/gemini-3-pro-preview:streamGenerateContent"],
      ["gemini", "/v1beta1/projects/acme-prod/locations/us-central1/publishers/google/models/gemini-3-pro-preview:streamGenerateContent"],
    ]);
    expect(env.provider.requests[0]!.headers["authorization"]).toBe("Bearer ya29.mock-token");
    expect((env.provider.requests[0]!.body as { toolConfig?: unknown }).toolConfig).toMatchObject({ functionCallingConfig: { streamFunctionCallArguments: true } });
    // The call came in pieces (its name, then partialArgs), and the model thought first.
    expect(sent.parts.filter((p) => p.type === "tool-input-delta").length).toBeGreaterThan(1);
    expect(sent.parts.some((p) => p.type === "reasoning-delta")).toBe(true);
    // The second request carries the thought and the call's signature back (the mock refuses a thought it did not sign).
    const model = (env.provider.requests[1]!.body as { contents: { role: string; parts: Record<string, unknown>[] }[] }).contents[1]!;
    expect(model.parts.map((p) => Object.keys(p).filter((k) => k !== "text").sort().join("+"))).toEqual(["thought", "functionCall+thoughtSignature"]);
    expect(env.provider.requests[1]!.status).toBe(200);
  });

  it("express mode (an API key, no project): /v1/publishers/google/models/..., the key in x-goog-api-key", async () => {
    const express = createVertex({ apiKey: "AQ.express-key", baseURL: `${VERTEX_HOST}/v1/publishers/google`, fetch: toMock });
    const tools = { create_invoice: invoiceTool(env.payments) };
    const parts = await drain(streamText({ model: express("gemini-2.5-flash"), messages: billAcme, tools, stopWhen: stepCountIs(1), maxRetries: 0, onError: () => {} }).fullStream);
    expect(errorOf(parts)).toBeUndefined();
    expect(env.provider.requests.map((r) => r.path)).toEqual(["/v1/publishers/google/models/gemini-2.5-flash:streamGenerateContent"]);
    expect(env.provider.requests[0]!.headers["x-goog-api-key"]).toBe("AQ.express-key");
  });

  for (const dispatchAt of ["tool-call", "step"] as const) {
    for (const [name, model] of models) {
      it(`the chapter's incident, ${name}, dispatch at ${dispatchAt}: cut after the streamed call's terminal part, before finishReason; the retry bills once and tells the truth`, async () => {
        await expectIncidentBillsOnce(env, app(model), dispatchAt);
      });
    }
  }

  it("the control, the app's tools unwrapped: a cut in the closing answer and the app's re-send pay acme twice", async () => {
    const tools = { create_invoice: invoiceTool(env.payments) };
    const send = () => drain(streamText({ model: gemini3(), messages: billAcme, tools, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
    // The first step (the streamed call) plays whole and the invoice is made; the closing answer's body dies after its first chunks.
    env.provider.faults.enqueue({ kind: "timing", timing: {} });
    env.provider.faults.enqueue({ kind: "reset", at: { event: 6 } });
    await send();
    expect(paid()).toEqual(["acme 12500"]);
    await send();
    expect(paid()).toEqual(["acme 12500", "acme 12500"]);
  });

  for (const [cutKind, name, model] of [
    ["reset", ...models[0]],
    ["clean_close", ...models[0]],
    ["clean_close", ...models[1]],
  ] as const) {
    it(`AISDK-4, ${name}: a body ${cutKind === "reset" ? "reset" : "closed cleanly"} inside the call's streamed arguments makes no tool-call and pays nothing; the retry bills once`, async () => {
      const { request, runs } = app(model);
      env.provider.faults.enqueue({ kind: cutKind, at: { toolUse: 0, afterFragment: 2 } });
      const cut = await request(billAcme, "tool-call");
      expect(cut.kept).toBe(false);
      // The call was begun (its name, a member): @ai-sdk/google drops a call its body never ended.
      expect(cut.parts.some((p) => p.type === "tool-input-start")).toBe(true);
      expect(cut.parts.filter((p) => p.type === "tool-call")).toEqual([]);
      if (cutKind === "clean_close") {
        expect(cut.steps).toEqual([model === guarded ? "error" : "other"]);
        if (model === guarded) expect(streamErrorOf(cut.parts)).toMatch(/ended without a finishReason/);
      }
      expect(env.payments.effects()).toEqual([]);
      expect(runs).toEqual([]);
      const retried = await request(billAcme, "tool-call");
      expect(retried.kept).toBe(true);
      expect(paid()).toEqual(["acme 12500"]);
    });
  }

  for (const [name, model] of models) {
    it(`AISDK-8, ${name}: an in-stream error chunk after the streamed call is not kept; the re-send bills once`, async () => {
      const { request, settle } = app(model);
      env.provider.faults.enqueue({ kind: "error_event", at: { afterToolUseStop: 0 }, error: { type: "overloaded_error", message: "The model is overloaded." } });
      const failed = await request(billAcme, "tool-call");
      expect(failed.kept).toBe(false);
      if (model === guarded) expect(streamErrorOf(failed.parts)).toMatch(/^error chunk 503 UNAVAILABLE/);
      else expect([errorOf(failed.parts), failed.steps]).toEqual([undefined, ["other"]]);
      await settle();
      const resent = await request(billAcme, "tool-call");
      expect(resent.kept).toBe(true);
      expect(paid()).toEqual(["acme 12500"]);
    });
  }
});

describe("AISDK-16: a response spliced into a Vertex AI body with streamed arguments and thoughts", () => {
  const messages: ModelMessage[] = [{ role: "user", content: ask }];
  const shapes: { shape: string; at: FaultPosition; messageStart: boolean; sign: RegExp }[] = [
    { shape: "after a completed call, with its own responseId", at: { afterToolUseStop: 0 }, messageStart: true, sign: /^responseId second_response/ },
    { shape: "after a completed call, headless", at: { afterToolUseStop: 0 }, messageStart: false, sign: /^a chunk without the responseId/ },
    { shape: "inside the second call's partialArgs, with its own responseId", at: { toolUse: 1, afterFragment: 2 }, messageStart: true, sign: /^responseId second_response/ },
    { shape: "inside the second call's partialArgs, headless", at: { toolUse: 1, afterFragment: 2 }, messageStart: false, sign: /^a chunk without the responseId/ },
  ];
  for (const { shape, at, messageStart, sign } of shapes) {
    it(`without the guard, ${shape}: the spliced response's calls run beside the first's, acme is paid twice`, async () => {
      const { request, settle } = app();
      env.provider.faults.enqueue({ kind: "splice", at, messageStart });
      await request(messages, "step");
      await settle();
      expect(paid().filter((p) => p === "acme 5")).toHaveLength(2);
    });

    for (const dispatchAt of ["step", "tool-call"] as const) {
      it(`under spliceGuard(), ${shape}, dispatch at ${dispatchAt}: the request fails at the splice, its re-send pays each once`, async () => {
        const { request, settle } = app(guarded);
        env.provider.faults.enqueue({ kind: "splice", at, messageStart });
        const failed = await request(messages, dispatchAt);
        expect(streamErrorOf(failed.parts)).toMatch(sign);
        expect(failed.steps).toEqual(["error"]);
        expect(failed.parts.filter((p) => p.type === "tool-call")).toHaveLength(1);
        if (dispatchAt === "tool-call") await settle();
        const resent = await request(messages, dispatchAt);
        expect(resent.kept).toBe(true);
        await settle();
        expect(paid().sort()).toEqual(["acme 5", "bob 7"]);
      });
    }
  }
});

describe("AISDK-16: a response spliced into a Vertex AI body whose chunks lost their responseId", () => {
  const messages: ModelMessage[] = [{ role: "user", content: ask }];
  const stripped = (guard: boolean) => (): LanguageModel =>
    wrapLanguageModel({ model: vertex(stripsIds)("gemini-3-pro-preview") as Model, middleware: guard ? [vertexOnly, providerToolsGuard(), spliceGuard()] : [vertexOnly] });

  it("a legitimate stream (thoughts, two streamed calls) passes the guard without its ids: no false alarm", async () => {
    const { request } = app(stripped(true));
    const sent = await request(messages, "tool-call");
    expect(errorOf(sent.parts)).toBeUndefined();
    expect(sent.kept).toBe(true);
    expect(paid().sort()).toEqual(["acme 5", "bob 7"]);
  });

  for (const [thoughts, sign] of [
    [true, /^a thought part while the arguments of create_invoice were streaming/],
    [false, /^functionCall create_invoice began while the arguments of create_invoice were streaming/],
  ] as const) {
    it(`spliced inside the second call's partialArgs, ${thoughts ? "thoughts on" : "no thoughts"}: unguarded, acme is paid twice; under spliceGuard() the streamed call's order shows it, and the re-send pays each once`, async () => {
      const settings = thoughts ? vertexOnly : argsOnly;
      const model = (guard: boolean) => (): LanguageModel => wrapLanguageModel({ model: vertex(stripsIds)("gemini-3-pro-preview") as Model, middleware: guard ? [settings, spliceGuard()] : [settings] });
      const unguarded = app(model(false));
      env.provider.faults.enqueue({ kind: "splice", at: { toolUse: 1, afterFragment: 2 }, messageStart: false });
      await unguarded.request(messages, "step");
      await unguarded.settle();
      expect(paid().filter((p) => p === "acme 5")).toHaveLength(2);
      const before = paid().length;
      const { request, settle } = app(model(true));
      env.provider.faults.enqueue({ kind: "splice", at: { toolUse: 1, afterFragment: 2 }, messageStart: false });
      const failed = await request(messages, "step");
      expect(streamErrorOf(failed.parts)).toMatch(sign);
      expect(paid()).toHaveLength(before);
      const resent = await request(messages, "step");
      expect(resent.kept).toBe(true);
      await settle();
      expect(paid().slice(before).sort()).toEqual(["acme 5", "bob 7"]);
    });
  }
});

/*
 * Hand-made Vertex AI bodies (one response id throughout): what a body cut short, or a response
 * resumed into it by a proxy that skipped the events it had already passed on, looks like.
 */
describe("AISDK-8, AISDK-16: a Vertex AI body whose streamed call does not end, or ends twice", () => {
  const chunk = (parts: Record<string, unknown>[], extra: Record<string, unknown> = {}) => ({ candidates: [{ content: { role: "model", parts }, index: 0, ...extra }], responseId: "resp_1", modelVersion: "gemini-3-pro-preview" });
  const call = (id: string, customer: string, amount: number) => [
    chunk([{ functionCall: { id, name: "create_invoice", willContinue: true } }]),
    chunk([{ functionCall: { partialArgs: [{ jsonPath: "$.customer", stringValue: customer }], willContinue: true } }]),
    chunk([{ functionCall: { partialArgs: [{ jsonPath: "$.amount", numberValue: amount }], willContinue: true } }]),
    chunk([{ functionCall: {} }]),
  ];
  const finish = chunk([{ text: "" }], { finishReason: "STOP" });
  const cases = [
    {
      // The call's name and a member, then the last chunk: a body cut short by a proxy that closed it well-formed.
      shape: "finishReason while a call's arguments stream",
      chunks: [...call("call_1", "acme", 12_500).slice(0, 2), finish],
      unguarded: { paid: [] as string[], step: "stop", kept: true },
      sign: "finishReason while the arguments of create_invoice were streaming: the call never ended",
    },
    {
      // The first response billed acme and bob; the resumed second goes on inside its own acme call (its name
      // skipped), whose continuation @ai-sdk/google ignores with no call open, then bills bob again.
      shape: "a call's partialArgs with no call streaming (a resumed response)",
      chunks: [...call("call_1", "acme", 5), ...call("call_2", "bob", 7), ...call("call_3", "acme", 5).slice(2), ...call("call_4", "bob", 7), finish],
      unguarded: { paid: ["acme 5", "bob 7", "bob 7"], step: "tool-calls", kept: true },
      sign: "a functionCall's partialArgs with no call streaming: another response in the Gemini stream",
    },
  ];
  it("a legitimate call that ends by its last partialArgs and then sends the terminal part too passes the guard: no false alarm", async () => {
    const ends = [...call("call_1", "acme", 12_500).slice(0, 2), chunk([{ functionCall: { partialArgs: [{ jsonPath: "$.amount", numberValue: 12_500 }] } }]), chunk([{ functionCall: {} }]), finish];
    let served = false;
    const model = vertex(async (input, init) => {
      if (served) return toMock(input, init);
      served = true;
      return new Response(ends.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`).join(""), { status: 200, headers: { "content-type": "text/event-stream" } });
    })("gemini-3-pro-preview") as Model;
    const { request } = app(() => wrapLanguageModel({ model, middleware: [argsOnly, spliceGuard()] }));
    const sent = await request(billAcme, "step");
    expect(errorOf(sent.parts)).toBeUndefined();
    expect([sent.kept, paid()]).toEqual([true, ["acme 12500"]]);
  });

  for (const { shape, chunks, unguarded, sign } of cases) {
    const once: typeof fetch = async (input, init) => {
      if (env.provider.requests.length > 0 || (once as { served?: boolean }).served) return toMock(input, init);
      (once as { served?: boolean }).served = true;
      return new Response(chunks.map((c) => `data: ${JSON.stringify(c)}\r\n\r\n`).join(""), { status: 200, headers: { "content-type": "text/event-stream" } });
    };
    for (const guard of [false, true]) {
      it(`${shape}, ${guard ? "under spliceGuard(): the step fails at it, nothing is paid" : `unguarded: ${unguarded.paid.length === 0 ? "the call vanishes from a kept response" : "bob is paid twice"}`}`, async () => {
        delete (once as { served?: boolean }).served;
        const model = vertex(once)("gemini-3-pro-preview") as Model;
        const { request } = app(() => wrapLanguageModel({ model, middleware: guard ? [argsOnly, spliceGuard()] : [argsOnly] }));
        const sent = await request([{ role: "user", content: ask }], "step");
        if (guard) {
          expect(streamErrorOf(sent.parts)).toBe(sign);
          expect([sent.kept, paid()]).toEqual([false, []]);
        } else {
          expect({ paid: paid().sort(), step: sent.steps[0], kept: sent.kept }).toEqual(unguarded);
        }
      });
    }
  }
});

describe("AISDK-15: providerToolsGuard() on Vertex AI's tools", () => {
  const as = (t: unknown) => t as ToolSet[string];
  const send = async (extra: ToolSet, providerTools?: "allow-reads") => {
    const { once } = app();
    const forTurn = once.forTurn({ conversationId: "chat_vertex_tools", messages: billAcme });
    const model = wrapLanguageModel({ model: vertex()("gemini-3-pro-preview") as Model, middleware: [providerToolsGuard(providerTools ? { providerTools } : {}), spliceGuard()] });
    const parts = await drain(streamText({ model, messages: billAcme, tools: { ...forTurn.tools, ...extra }, stopWhen: stepCountIs(1), maxRetries: 0, onError: () => {} }).fullStream);
    return errorOf(parts) as { code?: string; field?: string } | undefined;
  };

  it("refuses code_execution under either policy; refuses Vertex AI's reads (enterprise web search, a RAG store) by default and passes them under allow-reads", async () => {
    const tools = vertex().tools;
    for (const policy of [undefined, "allow-reads"] as const) {
      expect(await send({ code_execution: as(tools.codeExecution({})) }, policy)).toMatchObject({ code: "invalid_argument", field: "params.tools[1] (code_execution)" });
    }
    const reads = { enterprise_web_search: as(tools.enterpriseWebSearch({})), vertex_rag_store: as(tools.vertexRagStore({ ragCorpus: "projects/acme-prod/locations/us-central1/ragCorpora/1" })) };
    for (const [name, tool] of Object.entries(reads)) expect(await send({ [name]: tool })).toMatchObject({ code: "invalid_argument", field: `params.tools[1] (${name})` });
    expect(env.provider.requests).toHaveLength(0);
    expect(await send(reads, "allow-reads")).toBeUndefined();
    const sentTools = (env.provider.requests[0]!.body as { tools?: Record<string, unknown>[] }).tools ?? [];
    expect(sentTools.flatMap((t) => Object.keys(t)).sort()).toEqual(["enterpriseWebSearch", "functionDeclarations", "retrieval"]);
  });
});
