import { createAmazonBedrock } from "@ai-sdk/amazon-bedrock";
import { converseFrame, toolUse, turn } from "@dispatch-once/mock-provider";
import { StreamIncompleteError } from "@dispatch-once/runner";
import { generateText, stepCountIs, streamText, wrapLanguageModel, type LanguageModel, type ModelMessage, type ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { providerToolsGuard, spliceGuard, type OnceTurn } from "../src/index.js";
import { billAcme, billed, drain, expectIncidentBillsOnce, keepingApp, mocksPerTest } from "./helpers.js";

/*
 * The AI SDK over Amazon Bedrock's Converse API (`@ai-sdk/amazon-bedrock`'s language model:
 * `POST /model/{id}/converse-stream`, answered in the AWS event-stream framing), against the mock
 * provider's Converse route, which plays the same scripts and faults as its Messages route.
 */

const ask = "pay acme 5 and bob 7";
const env = mocksPerTest("ai-sdk-bedrock-converse", {
  "bill acme": turn(toolUse("create_invoice", { customer: "acme", amount: 12_500 })),
  [ask]: turn(toolUse("create_invoice", { customer: "acme", amount: 5 }), toolUse("create_invoice", { customer: "bob", amount: 7 })),
});

/** Static AWS credentials: the provider signs each request (SigV4); the mock checks that it is signed. */
const bedrock = (): LanguageModel =>
  createAmazonBedrock({ baseURL: env.provider.bedrockBaseURL, region: "us-east-1", accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" })(
    "anthropic.claude-sonnet-4-5-20250929-v1:0",
  );
const guarded = (): LanguageModel => wrapLanguageModel({ model: bedrock() as Parameters<typeof wrapLanguageModel>[0]["model"], middleware: [providerToolsGuard(), spliceGuard()] });
const paid = () => billed(env.payments);

/** The app that keeps AISDK-8 (helpers.ts), on this file's conversation and model. */
const app = (model: () => LanguageModel = bedrock) => keepingApp(env.payments, "chat_bedrock", model);


describe("through @ai-sdk/amazon-bedrock (Converse) against the mock provider", () => {
  it("the route: a signed converse-stream request, a tool call, its result, and a closing answer", async () => {
    const { request } = app();
    const sent = await request(billAcme, "step");
    expect(sent.kept).toBe(true);
    expect(sent.steps).toEqual(["tool-calls", "stop"]);
    expect(paid()).toEqual(["acme 12500"]);
    expect(env.provider.requests.map((r) => [r.api, r.path, r.stream])).toEqual([
      ["converse", "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream", true],
      ["converse", "/model/anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream", true],
    ]);
    expect(env.provider.requests[0]!.headers["authorization"]).toMatch(/^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\//);
  });

  it("AISDK-2: generateText over /converse (the whole response): a regenerate of the turn bills once and answers the stored result", async () => {
    const { once, runs } = app();
    const outputs: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      const forTurn = once.forTurn({ conversationId: "chat_bedrock_whole", messages: billAcme }) as OnceTurn<ToolSet>;
      const result = await generateText({ model: bedrock(), messages: billAcme, tools: forTurn.tools, stopWhen: stepCountIs(3), maxRetries: 0 });
      outputs.push(result.steps[0]!.toolResults.map((r) => r.output));
    }
    expect(env.provider.requests.map((r) => r.path.split("/").at(-1))).toEqual(["converse", "converse", "converse", "converse"]);
    expect(paid()).toEqual(["acme 12500"]);
    expect(runs).toHaveLength(1);
    expect(outputs[1]).toEqual(outputs[0]);
    expect(outputs[0]).toEqual([{ invoice: env.payments.effects()[0]!.resourceId, amount: 12_500 }]);
  });

  for (const dispatchAt of ["tool-call", "step"] as const) {
    it(`the chapter's incident, dispatch at ${dispatchAt}: the stream is cut after the invoice, the app's retry bills once and tells the truth`, async () => {
      await expectIncidentBillsOnce(env, app(), dispatchAt);
    });
  }

  it("AISDK-4: a stream cut in the call's input is no dispatch of partial input; the retry bills once", async () => {
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

  it("AISDK-4: a body closed cleanly in the call's input makes no tool-call part and the step finishes other, not kept", async () => {
    const { request } = app();
    env.provider.faults.enqueue({ kind: "clean_close", at: { toolUse: 0, afterFragment: 1 } });
    const cut = await request(billAcme, "tool-call");
    expect(cut.parts.filter((p) => p.type === "tool-call")).toEqual([]);
    expect(cut.steps).toEqual(["other"]);
    expect(cut.kept).toBe(false);
    expect(env.payments.effects()).toEqual([]);
  });

  for (const [name, model] of [["unguarded", bedrock], ["under spliceGuard()", guarded]] as const) {
  it(`AISDK-8, ${name}: an exception frame mid-stream is the step's error part; the app does not keep the response and its re-send bills once`, async () => {
    const { request, settle } = app(model);
    env.provider.faults.enqueue({ kind: "error_event", at: { afterToolUseStop: 0 }, error: { type: "throttlingException", message: "Too many requests, please wait before trying again." } });
    const failed = await request(billAcme, "tool-call");
    const error = failed.parts.find((p) => p.type === "error") as { error?: unknown } | undefined;
    expect(JSON.stringify(error?.error)).toContain("Too many requests");
    // The provider's own error part, and no second one from the guard.
    expect(failed.parts.filter((p) => p.type === "error")).toHaveLength(1);
    expect(failed.steps).toEqual(["error"]);
    expect(failed.kept).toBe(false);
    await settle();
    expect(paid()).toEqual(["acme 12500"]);
    const resent = await request(billAcme, "tool-call");
    expect(resent.kept).toBe(true);
    expect(paid()).toEqual(["acme 12500"]);
  });
  }

  for (const [name, model] of [["unguarded", bedrock], ["under spliceGuard()", guarded]] as const) {
    for (const dispatchAt of ["tool-call", "step"] as const) {
      it(`AISDK-8, AISDK-16, ${name}, dispatch at ${dispatchAt}: a body that ends after the call without messageStop is not kept, and the re-send bills once`, async () => {
        const { request, settle } = app(model);
        // A proxy closes the body cleanly after the call's contentBlockStop: no messageStop, no metadata.
        env.provider.faults.enqueue({ kind: "clean_close", at: { afterToolUseStop: 0 } });
        const cut = await request(billAcme, dispatchAt);
        expect(cut.kept).toBe(false);
        // Unguarded, @ai-sdk/amazon-bedrock finishes the step "other" (no error part): AISDK-8's app does not keep it.
        // The guard fails it as STREAM-20's unfinished response: an error part, a failed step.
        expect(cut.steps).toEqual([model === guarded ? "error" : "other"]);
        const error = cut.parts.find((p) => p.type === "error") as { error?: unknown } | undefined;
        expect(StreamIncompleteError.isInstance(error?.error), String(error?.error)).toBe(model === guarded);
        if (model === guarded) expect((error!.error as StreamIncompleteError).finishEvent).toBe("messageStop");
        if (dispatchAt === "tool-call") await settle();
        expect(env.payments.effects()).toHaveLength(dispatchAt === "tool-call" ? 1 : 0);
        const resent = await request(billAcme, dispatchAt);
        expect(resent.kept).toBe(true);
        expect(paid()).toEqual(["acme 12500"]);
      });
    }
  }
});

describe("AISDK-16: a response spliced into a Converse body", () => {
  const messages: ModelMessage[] = [{ role: "user", content: ask }];
  const shapes = [
    { shape: "headless: its first toolUse at contentBlockIndex 0", messageStart: false, sign: /^contentBlockStart at contentBlockIndex 0, whose block already stopped/ },
    { shape: "with its own messageStart", messageStart: true, sign: /^messageStart second_response/ },
    // Converse starts no text block: the spliced sentence begins with its first delta, at index 0.
    { shape: "headless, led by a sentence at contentBlockIndex 0", messageStart: false, lead: "Sure, paying now.", sign: /^contentBlockDelta at contentBlockIndex 0, whose block already stopped/ },
  ];
  for (const { shape, messageStart, lead, sign } of shapes) {
    it(`without the guard, ${shape}: @ai-sdk/amazon-bedrock takes it in as one step, acme is paid twice`, async () => {
      const { request, settle } = app();
      env.provider.faults.enqueue({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart, ...(lead ? { lead } : {}) });
      const parts = await request(messages, "step");
      await settle();
      expect(parts.parts.filter((p) => p.type === "tool-call")).toHaveLength(3);
      expect(paid().sort()).toEqual(["acme 5", "acme 5", "bob 7"]);
    });

    for (const dispatchAt of ["step", "tool-call"] as const) {
      it(`under spliceGuard(), ${shape}, dispatch at ${dispatchAt}: the request fails at the splice, its re-send pays each once`, async () => {
        const { request, settle, runs } = app(guarded);
        env.provider.faults.enqueue({ kind: "splice", at: { afterToolUseStop: 0 }, messageStart, ...(lead ? { lead } : {}) });
        const failed = await request(messages, dispatchAt);
        const error = failed.parts.find((p) => p.type === "error") as { error?: unknown } | undefined;
        expect(StreamIncompleteError.isInstance(error?.error), String(error?.error)).toBe(true);
        expect((error!.error as StreamIncompleteError).streamError).toMatch(sign);
        expect(failed.parts.filter((p) => p.type === "tool-call")).toHaveLength(1);
        expect(failed.steps).toEqual(["error"]);
        expect(env.provider.requests).toHaveLength(1);
        if (dispatchAt === "tool-call") await settle();
        expect(runs).toHaveLength(dispatchAt === "tool-call" ? 1 : 0);
        const resent = await request(messages, dispatchAt);
        expect(resent.kept).toBe(true);
        await settle();
        expect(paid().sort()).toEqual(["acme 5", "bob 7"]);
      });
    }
  }
});

/*
 * A proxy that resumes: its upstream died after sending part of a response, it sent the request
 * again, skipped as many events of the new response as it had already passed on, and spliced the
 * rest into the body. The spliced part begins inside a block the first response left open, with
 * a delta at its contentBlockIndex: no messageStart, no position restarting at 0.
 */
describe("AISDK-16: a resumed response spliced into a Converse body, continuing its open block by a delta", () => {
  const messages: ModelMessage[] = [{ role: "user", content: ask }];
  type Event = [string, Record<string, unknown>];
  const call = (index: number, id: string, input: object, json = JSON.stringify(input)): Event[] => [
    ["contentBlockStart", { contentBlockIndex: index, start: { toolUse: { toolUseId: id, name: "create_invoice" } } }],
    ["contentBlockDelta", { contentBlockIndex: index, delta: { toolUse: { input: json } } }],
    ["contentBlockStop", { contentBlockIndex: index }],
  ];
  const text = (index: number, words: string): Event => ["contentBlockDelta", { contentBlockIndex: index, delta: { text: words } }];
  const end: Event[] = [["messageStop", { stopReason: "tool_use" }], ["metadata", { usage: { inputTokens: 20, outputTokens: 40, totalTokens: 60 }, metrics: { latencyMs: 1 } }]];
  const cases: { shape: string; body: Event[]; guardSees: RegExp | undefined }[] = [
    {
      // The first response paid acme and began a sentence at index 1; the second (which thought first, so its
      // sentence is at index 1 too) goes on with it, then calls for acme and bob at 2 and 3. Every event is one a
      // response may send: a stream-reading guard cannot tell it from a model that bills acme twice.
      shape: "a text delta into the open text block",
      body: [["messageStart", { role: "assistant" }], ...call(0, "tooluse_first_acme", { customer: "acme", amount: 5 }), text(1, "Billed acme, now "), text(1, "I will bill acme and bob."), ["contentBlockStop", { contentBlockIndex: 1 }], ...call(2, "tooluse_second_acme", { customer: "acme", amount: 5 }), ...call(3, "tooluse_second_bob", { customer: "bob", amount: 7 }), ...end],
      guardSees: undefined,
    },
    {
      // The first response paid acme and was streaming bob's call at index 1; the second had a sentence there.
      // @ai-sdk/amazon-bedrock ends the call at its stop with the half input (a tool error) and runs the second's calls.
      shape: "a text delta into the open toolUse block",
      body: [["messageStart", { role: "assistant" }], ...call(0, "tooluse_first_acme", { customer: "acme", amount: 5 }), ...call(1, "tooluse_first_bob", {}, '{"customer":"bo').slice(0, 2), text(1, "I will bill acme and bob."), ["contentBlockStop", { contentBlockIndex: 1 }], ...call(2, "tooluse_second_acme", { customer: "acme", amount: 5 }), ...call(3, "tooluse_second_bob", { customer: "bob", amount: 7 }), ...end],
      guardSees: /^contentBlockDelta of text at contentBlockIndex 1, whose block is a toolUse: another response in the stream/,
    },
    {
      // The reverse: the first response's sentence at index 1 is open; the second's call there goes on (its start skipped).
      shape: "a toolUse delta into the open text block",
      body: [["messageStart", { role: "assistant" }], ...call(0, "tooluse_first_acme", { customer: "acme", amount: 5 }), text(1, "Billed acme, now "), ["contentBlockDelta", { contentBlockIndex: 1, delta: { toolUse: { input: '"amount":5}' } } }], ["contentBlockStop", { contentBlockIndex: 1 }], ...call(2, "tooluse_second_acme", { customer: "acme", amount: 5 }), ...call(3, "tooluse_second_bob", { customer: "bob", amount: 7 }), ...end],
      guardSees: /^contentBlockDelta of toolUse at contentBlockIndex 1, whose block is a text: another response in the stream/,
    },
  ];
  /** The first request gets the spliced body; every later one goes to the mock. */
  const spliced = (body: Event[]) => {
    let served = false;
    const fetchOnce: typeof fetch = async (input, init) => {
      if (served) return fetch(input, init);
      served = true;
      return new Response(Buffer.concat(body.map(([name, payload]) => converseFrame(name, payload))), { status: 200, headers: { "content-type": "application/vnd.amazon.eventstream" } });
    };
    const bedrock = createAmazonBedrock({ baseURL: env.provider.bedrockBaseURL, region: "us-east-1", accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", fetch: fetchOnce });
    return bedrock("anthropic.claude-sonnet-4-5-20250929-v1:0") as Parameters<typeof wrapLanguageModel>[0]["model"];
  };
  for (const { shape, body, guardSees } of cases) {
    it(`${shape}: without the guard, acme is paid twice; under spliceGuard(), ${guardSees ? "the request fails at the delta and its re-send pays each once" : "nothing shows it: acme is paid twice (the README names the limit)"}`, async () => {
      const unguarded = app(() => spliced(body));
      await unguarded.request(messages, "step");
      await unguarded.settle();
      expect(paid().filter((p) => p === "acme 5")).toHaveLength(2);
      const before = paid().length;
      const model = spliced(body);
      const { request, settle } = app(() => wrapLanguageModel({ model, middleware: [providerToolsGuard(), spliceGuard()] }));
      const failed = await request(messages, "step");
      const error = failed.parts.find((p) => p.type === "error") as { error?: unknown } | undefined;
      if (guardSees === undefined) {
        expect(error).toBeUndefined();
        await settle();
        expect(paid().slice(before).filter((p) => p === "acme 5")).toHaveLength(2);
        return;
      }
      expect(StreamIncompleteError.isInstance(error?.error), String(error?.error)).toBe(true);
      expect((error!.error as StreamIncompleteError).streamError).toMatch(guardSees);
      expect(failed.kept).toBe(false);
      expect(paid()).toHaveLength(before);
      const resent = await request(messages, "step");
      expect(resent.kept).toBe(true);
      await settle();
      expect(paid().slice(before).sort()).toEqual(["acme 5", "bob 7"]);
    });
  }
});

describe("AISDK-15: providerToolsGuard() on the Bedrock model", () => {
  it("refuses a provider tool of @ai-sdk/amazon-bedrock's set that the provider runs (code execution) before anything is sent; an app-run one (bash) is sent", async () => {
    const { once } = app();
    const forTurn = once.forTurn({ conversationId: "chat_bedrock_tools", messages: billAcme });
    const tools = createAmazonBedrock({ region: "us-east-1", accessKeyId: "AKIDEXAMPLE", secretAccessKey: "secret" }).tools;
    const refused = await drain(
      streamText({ model: guarded(), messages: billAcme, tools: { ...forTurn.tools, code_execution: tools.codeExecution_20250825({}) as unknown as ToolSet[string] }, stopWhen: stepCountIs(1), maxRetries: 0, onError: () => {} }).fullStream,
    );
    const error = refused.find((p) => p.type === "error") as { error?: { code?: string; field?: string } } | undefined;
    expect([error?.error?.code, error?.error?.field]).toEqual(["invalid_argument", "params.tools[1] (code_execution)"]);
    expect(env.provider.requests).toHaveLength(0);
    // @ai-sdk/amazon-bedrock 4.0.186 builds its tools with its own @ai-sdk/provider-utils (4.0.56): the types differ, not the objects.
    const bash = tools.bash_20250124({ execute: async () => "" }) as unknown as ToolSet[string];
    const sent = await drain(streamText({ model: guarded(), messages: billAcme, tools: { ...forTurn.tools, bash }, stopWhen: stepCountIs(1), maxRetries: 0, onError: () => {} }).fullStream);
    expect(sent.filter((p) => p.type === "error")).toEqual([]);
    const toolNames = ((env.provider.requests[0]!.body as { toolConfig?: { tools?: { toolSpec?: { name?: string } }[] } }).toolConfig?.tools ?? []).map((t) => t.toolSpec?.name);
    expect(toolNames.sort()).toEqual(["bash", "create_invoice"]);
  });
});
