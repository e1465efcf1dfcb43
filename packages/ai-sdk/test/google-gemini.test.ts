import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { toolUse, turn, type FaultPosition } from "@dispatch-once/mock-provider";
import { StreamIncompleteError } from "@dispatch-once/runner";
import { generateText, stepCountIs, streamText, wrapLanguageModel, type LanguageModel, type ModelMessage, type ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { providerToolsGuard, spliceGuard, type OnceTurn } from "../src/index.js";
import { billAcme, billed, drain, expectIncidentBillsOnce, invoiceTool, keepingApp, mocksPerTest } from "./helpers.js";

/*
 * The AI SDK over Google's Gemini API (`@ai-sdk/google`'s language model:
 * `POST /v1beta/models/{model}:streamGenerateContent?alt=sse`, server-sent `data:` chunks, each a
 * GenerateContentResponse), against the mock provider's Gemini route, which plays the same
 * scripts and faults as its Messages route. A call arrives whole in one chunk, at the point the
 * Messages route sends its `content_block_stop`; the finishReason comes in the last chunk.
 */

const ask = "pay acme 5 and bob 7";
const env = mocksPerTest("ai-sdk-google-gemini", {
  "bill acme": turn(toolUse("create_invoice", { customer: "acme", amount: 12_500 })),
  [ask]: turn(toolUse("create_invoice", { customer: "acme", amount: 5 }), toolUse("create_invoice", { customer: "bob", amount: 7 })),
});

const google = () => createGoogleGenerativeAI({ baseURL: env.provider.geminiBaseURL, apiKey: "AIzaSyExampleKey" });
const gemini = (): LanguageModel => google()("gemini-2.5-flash");
const guarded = (): LanguageModel => wrapLanguageModel({ model: gemini() as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: [providerToolsGuard(), spliceGuard()] });
const paid = () => billed(env.payments);

/** The app that keeps AISDK-8 (helpers.ts), on this file's conversation and model. */
const app = (model: () => LanguageModel = gemini) => keepingApp(env.payments, "chat_gemini", model);

const errorOf = (parts: readonly { type: string }[]) => (parts.find((p) => p.type === "error") as { error?: unknown } | undefined)?.error;

describe("through @ai-sdk/google (Gemini API) against the mock provider", () => {
  it("the route: a keyed streamGenerateContent request, a whole functionCall, its result, and a closing answer", async () => {
    const { request } = app();
    const sent = await request(billAcme, "step");
    expect(sent.steps).toEqual(["tool-calls", "stop"]);
    expect(sent.kept).toBe(true);
    expect(paid()).toEqual(["acme 12500"]);
    expect(env.provider.requests.map((r) => [r.api, r.path, r.stream])).toEqual([
      ["gemini", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", true],
      ["gemini", "/v1beta/models/gemini-2.5-flash:streamGenerateContent", true],
    ]);
    expect(env.provider.requests[0]!.headers["x-goog-api-key"]).toBe("AIzaSyExampleKey");
    // The second request carries the call and its functionResponse, paired by the call's id.
    const contents = (env.provider.requests[1]!.body as { contents: { role: string; parts: Record<string, { id?: string }>[] }[] }).contents;
    expect(contents.map((c) => [c.role, Object.keys(c.parts[0]!)[0]])).toEqual([["user", "text"], ["model", "functionCall"], ["user", "functionResponse"]]);
    expect(contents[2]!.parts[0]!["functionResponse"]!.id).toBe(contents[1]!.parts[0]!["functionCall"]!.id);
  });

  it("AISDK-2: generateText over :generateContent (the whole response): a regenerate of the turn bills once and answers the stored result", async () => {
    const { once, runs } = app();
    const outputs: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const forTurn = once.forTurn({ conversationId: "chat_gemini_whole", messages: billAcme }) as OnceTurn<ToolSet>;
      const result = await generateText({ model: gemini(), messages: billAcme, tools: forTurn.tools, stopWhen: stepCountIs(3), maxRetries: 0 });
      outputs.push(result.steps[0]!.toolResults.map((r) => r.output));
    }
    expect(env.provider.requests.map((r) => r.path.split(":").at(-1))).toEqual(["generateContent", "generateContent", "generateContent", "generateContent"]);
    expect(paid()).toEqual(["acme 12500"]);
    expect(runs).toHaveLength(1);
    expect(outputs[1]).toEqual(outputs[0]);
    expect(outputs[0]).toEqual([{ invoice: env.payments.effects()[0]!.resourceId, amount: 12_500 }]);
  });

  it("the route refuses a request without the key in Google's envelope, and @ai-sdk/google reports its message", async () => {
    const keyless = createGoogleGenerativeAI({ baseURL: env.provider.geminiBaseURL, apiKey: "x", headers: { "x-goog-api-key": "" } })("gemini-2.5-flash");
    const parts = await drain(streamText({ model: keyless, messages: billAcme, maxRetries: 0, onError: () => {} }).fullStream);
    expect(String((errorOf(parts) as Error | undefined)?.message)).toMatch(/unregistered callers/);
    expect(env.provider.requests[0]!.outcome).toBe("invalid_request");
  });

  for (const dispatchAt of ["tool-call", "step"] as const) {
    for (const [name, model] of [["unguarded", gemini], ["under spliceGuard()", guarded]] as const) {
      it(`the chapter's incident, ${name}, dispatch at ${dispatchAt}: the stream is cut after the call, before finishReason; the app's retry bills once and tells the truth`, async () => {
        await expectIncidentBillsOnce(env, app(model), dispatchAt);
      });
    }
  }

  for (const wrapped of [false, true]) {
    it(`the chapter's incident in the closing answer, ${wrapped ? "wrapped: paid once" : "the control, the app's tools unwrapped: acme is paid twice"}`, async () => {
      const { request, runs } = app();
      const unwrapped = { create_invoice: invoiceTool(env.payments) };
      const send = async () => {
        if (wrapped) return (await request(billAcme, "step")).kept;
        const parts = await drain(streamText({ model: gemini(), messages: billAcme, tools: unwrapped, stopWhen: stepCountIs(3), maxRetries: 0, onError: () => {} }).fullStream);
        return !parts.some((p) => p.type === "error");
      };
      // The first step (the call) plays whole and the invoice is made; the second request's body (the closing answer) dies after its first chunk.
      env.provider.faults.enqueue({ kind: "timing", timing: {} });
      env.provider.faults.enqueue({ kind: "reset", at: { event: 3 } });
      expect(await send()).toBe(false);
      expect(paid()).toEqual(["acme 12500"]);
      // The app sends the turn again (AISDK-6).
      expect(await send()).toBe(true);
      expect(paid()).toEqual(wrapped ? ["acme 12500"] : ["acme 12500", "acme 12500"]);
      expect(runs).toHaveLength(wrapped ? 1 : 0);
    });
  }

  it("AISDK-4: a stream cut before the functionCall chunk (in the call's arguments) dispatches nothing; the retry bills once", async () => {
    const { request, runs } = app();
    env.provider.faults.enqueue({ kind: "reset", at: { toolUse: 0, afterFragment: 1 } });
    const cut = await request(billAcme, "tool-call");
    expect(cut.kept).toBe(false);
    expect(cut.parts.filter((p) => p.type === "tool-call")).toEqual([]);
    expect(env.payments.effects()).toEqual([]);
    expect(runs).toEqual([]);
    const retried = await request(billAcme, "tool-call");
    expect(retried.kept).toBe(true);
    expect(paid()).toEqual(["acme 12500"]);
  });

  for (const [name, model] of [["unguarded", gemini], ["under spliceGuard()", guarded]] as const) {
    for (const dispatchAt of ["tool-call", "step"] as const) {
      it(`AISDK-8, AISDK-16, ${name}, dispatch at ${dispatchAt}: a body closed cleanly after the call, before finishReason, is not kept, and the re-send bills once`, async () => {
        const { request, settle } = app(model);
        env.provider.faults.enqueue({ kind: "clean_close", at: { afterToolUseStop: 0 } });
        const cut = await request(billAcme, dispatchAt);
        expect(cut.kept).toBe(false);
        // Unguarded, @ai-sdk/google finishes the step "other" with no error part: AISDK-8's app does not keep it.
        // The guard fails it as STREAM-20's unfinished response: an error part, a failed step.
        expect(cut.steps).toEqual([model === guarded ? "error" : "other"]);
        const error = errorOf(cut.parts);
        expect(StreamIncompleteError.isInstance(error), String(error)).toBe(model === guarded);
        if (model === guarded) expect((error as StreamIncompleteError).finishEvent).toBe("finishReason");
        if (dispatchAt === "tool-call") await settle();
        expect(env.payments.effects()).toHaveLength(dispatchAt === "tool-call" ? 1 : 0);
        const resent = await request(billAcme, dispatchAt);
        expect(resent.kept).toBe(true);
        expect(paid()).toEqual(["acme 12500"]);
      });
    }
  }

  for (const [name, model] of [["unguarded", gemini], ["under spliceGuard()", guarded]] as const) {
    it(`AISDK-8, ${name}: an in-stream error (a data: line of Google's error envelope on the 200) is not kept; the re-send bills once`, async () => {
      const { request, settle } = app(model);
      env.provider.faults.enqueue({ kind: "error_event", at: { afterToolUseStop: 0 }, error: { type: "overloaded_error", message: "The model is overloaded. Please try again later." } });
      const failed = await request(billAcme, "tool-call");
      expect(failed.kept).toBe(false);
      // @ai-sdk/google 3.0.129 parses the error chunk as a chunk of nothing (every field of its schema is optional):
      // unguarded, the step finishes "other" and nobody is told the error. The guard makes it the step's error part.
      const error = errorOf(failed.parts);
      if (model === guarded) {
        expect(failed.parts.filter((p) => p.type === "error")).toHaveLength(1);
        expect(failed.steps).toEqual(["error"]);
        expect(StreamIncompleteError.isInstance(error), String(error)).toBe(true);
        expect((error as StreamIncompleteError).streamError).toMatch(/^error chunk 503 UNAVAILABLE: The model is overloaded/);
      } else {
        expect(error).toBeUndefined();
        expect(failed.steps).toEqual(["other"]);
      }
      await settle();
      expect(paid()).toEqual(["acme 12500"]);
      const resent = await request(billAcme, "tool-call");
      expect(resent.kept).toBe(true);
      expect(paid()).toEqual(["acme 12500"]);
    });
  }
});

describe("AISDK-16: a response spliced into a Gemini body", () => {
  const messages: ModelMessage[] = [{ role: "user", content: ask }];
  const shapes: { shape: string; at: FaultPosition; messageStart: boolean; lead?: string; sign: RegExp }[] = [
    { shape: "with its own responseId", at: { afterToolUseStop: 0 }, messageStart: true, sign: /^responseId second_response: a second response \(\S+\) began in the stream of \S+/ },
    { shape: "headless: its chunks carry no responseId", at: { afterToolUseStop: 0 }, messageStart: false, sign: /^a chunk without the responseId the stream's chunks carried/ },
    { shape: "headless, led by a sentence", at: { afterToolUseStop: 0 }, messageStart: false, lead: "Sure, paying now.", sign: /^a chunk without the responseId/ },
    { shape: "headless, after the first response's finishReason", at: { beforeMessageStop: true }, messageStart: false, sign: /^a chunk after finishReason/ },
  ];
  for (const { shape, at, messageStart, lead, sign } of shapes) {
    it(`without the guard, ${shape}: @ai-sdk/google takes it in as one step, acme is paid twice`, async () => {
      const { request, settle } = app();
      env.provider.faults.enqueue({ kind: "splice", at, messageStart, ...(lead ? { lead } : {}) });
      const sent = await request(messages, "step");
      await settle();
      expect(sent.parts.filter((p) => p.type === "tool-call").length).toBeGreaterThanOrEqual(3);
      expect(paid().filter((p) => p === "acme 5")).toHaveLength(2);
    });

    for (const dispatchAt of ["step", "tool-call"] as const) {
      it(`under spliceGuard(), ${shape}, dispatch at ${dispatchAt}: the request fails at the splice, its re-send pays each once`, async () => {
        const { request, settle, runs } = app(guarded);
        env.provider.faults.enqueue({ kind: "splice", at, messageStart, ...(lead ? { lead } : {}) });
        const failed = await request(messages, dispatchAt);
        const error = errorOf(failed.parts);
        expect(StreamIncompleteError.isInstance(error), String(error)).toBe(true);
        expect((error as StreamIncompleteError).streamError).toMatch(sign);
        expect(failed.steps).toEqual(["error"]);
        expect(env.provider.requests).toHaveLength(1);
        if (dispatchAt === "tool-call") await settle();
        const calls = "afterToolUseStop" in at ? 1 : 2;
        expect(failed.parts.filter((p) => p.type === "tool-call")).toHaveLength(calls);
        expect(runs).toHaveLength(dispatchAt === "tool-call" ? calls : 0);
        const resent = await request(messages, dispatchAt);
        expect(resent.kept).toBe(true);
        await settle();
        expect(paid().sort()).toEqual(["acme 5", "bob 7"]);
      });
    }
  }
});

describe("AISDK-15: providerToolsGuard() on the Gemini model", () => {
  const tools = () => google().tools;
  const send = async (extra: ToolSet, providerTools?: "allow-reads") => {
    const { once } = app();
    const forTurn = once.forTurn({ conversationId: "chat_gemini_tools", messages: billAcme });
    // A Gemini 3 model: @ai-sdk/google sends provider tools beside function declarations only to Gemini 3 (to 2.x it drops the functions, with a warning).
    const model = wrapLanguageModel({ model: google()("gemini-3-flash-preview") as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: [providerToolsGuard(providerTools ? { providerTools } : {}), spliceGuard()] });
    const parts = await drain(streamText({ model, messages: billAcme, tools: { ...forTurn.tools, ...extra }, stopWhen: stepCountIs(1), maxRetries: 0, onError: () => {} }).fullStream);
    return errorOf(parts) as { code?: string; field?: string } | undefined;
  };
  // @ai-sdk/google 3.0.129 builds its tools with its own @ai-sdk/provider-utils (4.0.56): the types differ, not the objects.
  const as = (t: unknown) => t as ToolSet[string];

  it("refuses google.code_execution (it runs code: it acts) under either policy, before anything is sent", async () => {
    for (const policy of [undefined, "allow-reads"] as const) {
      const error = await send({ code_execution: as(tools().codeExecution({})) }, policy);
      expect([error?.code, error?.field]).toEqual(["invalid_argument", "params.tools[1] (code_execution)"]);
    }
    expect(env.provider.requests).toHaveLength(0);
  });

  for (const [name, make] of [
    ["google.google_search", () => as(tools().googleSearch({}))],
    ["google.url_context", () => as(tools().urlContext({}))],
  ] as const) {
    it(`refuses ${name} (a read the provider runs) by default, before anything is sent; passes it under providerTools: "allow-reads"`, async () => {
      const refused = await send({ [name.slice(7)]: make() });
      expect([refused?.code, refused?.field]).toEqual(["invalid_argument", `params.tools[1] (${name.slice(7)})`]);
      expect(env.provider.requests).toHaveLength(0);
      expect(await send({ [name.slice(7)]: make() }, "allow-reads")).toBeUndefined();
      expect(env.provider.requests).toHaveLength(1);
      // @ai-sdk/google sends it as its own entry of `tools`, beside the function declarations.
      const sentTools = (env.provider.requests[0]!.body as { tools?: Record<string, unknown>[] }).tools ?? [];
      expect(sentTools.flatMap((t) => Object.keys(t)).sort()).toEqual(["functionDeclarations", name === "google.google_search" ? "googleSearch" : "urlContext"]);
    });
  }
});
