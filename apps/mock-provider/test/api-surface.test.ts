import { spawn } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import Anthropic, { AuthenticationError, BadRequestError } from "@anthropic-ai/sdk";
import { compiledEntry } from "@dispatch-once/test-processes";
import { describe, expect, it } from "vitest";
import { defaultScript, MockProviderError, scriptFromPlans, say, startMockProvider, toolUse, turn } from "../src/index.js";
import { body, payment, rejection, setup, tools } from "./helpers.js";

describe("request validation, like the API", () => {
  it("answers 401 without a key and accepts x-api-key as well as Bearer", async () => {
    const { provider } = await setup();
    const post = (headers: Record<string, string>) =>
      fetch(`${provider.url}/v1/messages`, {
        method: "POST",
        headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", ...headers },
        body: JSON.stringify(body("hello")),
      });
    const none = await post({});
    expect(none.status).toBe(401);
    expect(await none.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
    expect((await post({ "x-api-key": "k" })).status).toBe(200);
    expect((await post({ authorization: "Bearer k" })).status).toBe(200);
    const noVersion = await fetch(`${provider.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": "k" },
      body: JSON.stringify(body("hello")),
    });
    expect(noVersion.status).toBe(400);
    const broken = await post({ "x-api-key": "k", "content-type": "application/json" }).then(() =>
      fetch(`${provider.url}/v1/messages`, { method: "POST", headers: { "content-type": "application/json", "x-api-key": "k", "anthropic-version": "2023-06-01" }, body: "{not json" }),
    );
    expect(broken.status).toBe(400);
    expect(await broken.json()).toMatchObject({ error: { type: "invalid_request_error" } });
  });

  it("enforces a configured key through the SDK", async () => {
    const provider = await startMockProvider({ apiKey: "right" });
    try {
      const wrong = new Anthropic({ baseURL: provider.baseURL, apiKey: "wrong", maxRetries: 0 });
      expect(await rejection(wrong.messages.create(body("hello")))).toBeInstanceOf(AuthenticationError);
      const right = new Anthropic({ baseURL: provider.baseURL, apiKey: "right", maxRetries: 0 });
      expect((await right.messages.create(body("hello"))).stop_reason).toBe("end_turn");
    } finally {
      await provider.close();
    }
  });

  it("rejects a tool_result the previous assistant turn did not call, and a call left without result", async () => {
    const { client } = await setup();
    const orphanResult = await rejection(
      client.messages.create({
        ...body("x"),
        messages: [
          { role: "user", content: "pay" },
          { role: "assistant", content: [{ type: "text", text: "ok" }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01synthetic", content: "could not be created" }] },
        ],
      }),
    );
    expect(orphanResult).toBeInstanceOf(BadRequestError);
    expect(orphanResult.error.error.message).toBe(
      "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_01synthetic. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
    );
    const unanswered = await rejection(
      client.messages.create({
        ...body("x"),
        messages: [
          { role: "user", content: "pay" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_01a", name: "send_payment", input: payment }] },
          { role: "user", content: "and?" },
        ],
      }),
    );
    expect(unanswered.status).toBe(400);
    expect(unanswered.error.error.message).toContain("`tool_use` ids were found without `tool_result` blocks immediately after: toolu_01a");
    const noTools = await rejection(
      client.messages.create({
        model: "m",
        max_tokens: 10,
        messages: [
          { role: "user", content: "pay" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_01a", name: "send_payment", input: payment }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_01a", content: "ok" }] },
        ],
      }),
    );
    expect(noTools.error.error.message).toBe("Requests which include `tool_use` or `tool_result` blocks must define tools.");
    const emptyMessages = await rejection(client.messages.create({ ...body("x"), messages: [] }));
    expect(emptyMessages.status).toBe(400);
  });

  it("fails loudly when the script calls a tool the request does not declare", async () => {
    const { client, provider } = await setup({ script: scriptFromPlans({ go: turn(toolUse("launch_rocket", {})) }) });
    const error = await rejection(client.messages.create(body("go")));
    expect(error.status).toBe(500);
    expect(error.message).toContain("unknown_tool");
    expect(provider.requests[0]!.outcome).toBe("script_error");
  });
});

describe("scripts", () => {
  it("the default script follows directives and closes the loop after tool results", async () => {
    const { client } = await setup();
    const first = await client.messages.create(
      body(`say Paying twice, as asked.\ncall send_payment ${JSON.stringify(payment)}\nreword memo\ncall search_orders {"query":"acme","limit":5}`),
    );
    expect(first.stop_reason).toBe("tool_use");
    expect(first.content).toMatchObject([
      { type: "text", text: "Paying twice, as asked." },
      { type: "tool_use", name: "send_payment", input: payment },
      { type: "tool_use", name: "search_orders", input: { query: "acme", limit: 5 } },
    ]);
    const calls = first.content.filter((b) => b.type === "tool_use") as Anthropic.ToolUseBlock[];
    const followUp = await client.messages.create({
      ...body("unused"),
      messages: [
        { role: "user", content: "pay" },
        { role: "assistant", content: first.content.map((b) => (b.type === "tool_use" ? { type: "tool_use" as const, id: b.id, name: b.name, input: b.input } : { type: "text" as const, text: (b as Anthropic.TextBlock).text })) },
        {
          role: "user",
          content: calls.map((c, i) => ({ type: "tool_result" as const, tool_use_id: c.id, content: i === 0 ? '{"payment_id":"pay_1"}' : "[]" })),
        },
      ],
    });
    expect(followUp.stop_reason).toBe("end_turn");
    expect(followUp.content).toEqual([{ type: "text", text: 'Done. send_payment: {"payment_id":"pay_1"}; search_orders: []', citations: null }]);
  });

  it("scriptFromPlans walks a multi-step plan through the tool-use loop and fails loudly on an unplanned message", async () => {
    const script = scriptFromPlans({
      "pay then void": [
        turn(toolUse("send_payment", payment)),
        (request) => {
          const last = request.messages.at(-1)!;
          const result = (last.content as Array<{ type: string; content?: string }>).find((b) => b.type === "tool_result")!;
          return turn(toolUse("void_payment", { payment_id: JSON.parse(result.content!).payment_id }));
        },
      ],
    });
    const { client } = await setup({ script });
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "pay then void" }];
    const stops: string[] = [];
    for (let i = 0; i < 4; i++) {
      const message = await client.messages.stream({ model: "m", max_tokens: 100, tools, messages }).finalMessage();
      stops.push(`${message.stop_reason}:${message.content.map((b) => (b.type === "tool_use" ? b.name : b.type)).join(",")}`);
      if (message.stop_reason !== "tool_use") break;
      messages.push({ role: "assistant", content: message.content.map((b) => (b.type === "tool_use" ? { type: "tool_use" as const, id: b.id, name: b.name, input: b.input } : { type: "text" as const, text: (b as Anthropic.TextBlock).text })) });
      messages.push({
        role: "user",
        content: message.content
          .filter((b): b is Anthropic.ToolUseBlock => b.type === "tool_use")
          .map((b) => ({ type: "tool_result" as const, tool_use_id: b.id, content: JSON.stringify({ payment_id: "pay_42", ok: true }) })),
      });
    }
    expect(stops).toEqual(["tool_use:send_payment", "tool_use:void_payment", "end_turn:text"]);
    // The second step read the first call's result: the void names the payment it returned.
    expect((messages[3]!.content as any[])[0]).toMatchObject({ type: "tool_use", name: "void_payment", input: { payment_id: "pay_42" } });

    const unplanned = await rejection(client.messages.create(body("something else")));
    expect(unplanned.message).toContain("no_plan");
  });

  it("the script errors are typed", async () => {
    await expect(
      Promise.resolve().then(() =>
        defaultScript({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "call send_payment {oops" }] }),
      ),
    ).rejects.toBeInstanceOf(MockProviderError);
    await expect(
      scriptFromPlans({})({ model: "m", max_tokens: 1, messages: [{ role: "user", content: "hi" }] }),
    ).rejects.toMatchObject({ code: "no_plan" });
    expect(say("x")).toEqual({ type: "text", text: "x" });
  });
});

describe("control endpoints", () => {
  it("enqueue faults, set timing, read and clear the log, cut a held stream over HTTP", async () => {
    const { provider, client } = await setup();
    const control = (path: string, init: { method?: string; body?: unknown } = {}) =>
      fetch(`${provider.url}/_control${path}`, {
        method: init.method ?? (init.body === undefined ? "GET" : "POST"),
        headers: { "content-type": "application/json" },
        ...(init.body !== undefined && { body: JSON.stringify(init.body) }),
      }).then(async (r) => ({ status: r.status, json: (await r.json()) as any }));

    expect((await control("/health")).json.ok).toBe(true);
    const queued = await control("/faults", { body: { enqueue: [{ kind: "reset", at: { afterToolUseStop: 0 } }] } });
    expect(queued.json.pending).toHaveLength(1);
    expect((await control("/faults", { body: { kind: "explode" } })).status).toBe(400);
    expect((await control("/timing", { body: { beforeMessageStopMs: 5 } })).json.timing.beforeMessageStopMs).toBe(5);
    expect(provider.timing.beforeMessageStopMs).toBe(5);

    const error = await rejection(client.messages.stream(body("call send_payment {}")).finalMessage());
    expect(error.message).toBe("terminated");

    // Rules: fail the first attempt of any body containing "void".
    await control("/faults", { body: { rules: [{ attempt: 1, bodyContains: "void", fault: { kind: "hold", at: { beforeMessageStop: true } } }] } });
    const pending = client.messages.stream(body('call void_payment {"payment_id":"p1"}')).finalMessage();
    await provider.waitForHold(2);
    expect((await control("/holds")).json.held).toEqual([{ requestNumber: 2, beforeEvent: expect.any(Number), nextEventType: "message_stop" }]);
    expect((await control("/cut", { body: { requestNumber: 2, kind: "error_event" } })).status).toBe(200);
    expect((await rejection(pending)).error.error.type).toBe("overloaded_error");
    expect((await control("/release", { body: {} })).status).toBe(400);

    const log = await control("/requests");
    expect(log.json.requests.map((r: any) => [r.requestNumber, r.outcome, r.faultSource])).toEqual([
      [1, "reset", "queue"],
      [2, "error_event", "rules"],
    ]);
    expect(log.json.requests[0].events.length).toBeGreaterThan(0);
    await control("/requests", { method: "DELETE" });
    await control("/faults", { method: "DELETE" });
    expect((await control("/requests")).json.requests).toEqual([]);
    expect((await control("/faults")).json).toEqual({ pending: [], rules: [] });
  });
});

describe("lifecycle", () => {
  it("close() ends held streams as resets and frees the port", async () => {
    const provider = await startMockProvider({ faultRules: [{ fault: { kind: "hold", at: { event: 2 } } }] });
    const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "k", maxRetries: 0 });
    const pending = client.messages.stream(body("hello")).finalMessage();
    await provider.waitForHold();
    await provider.close();
    const error = await rejection(pending);
    expect(error.message).toBe("terminated");
    expect(await rejection(fetch(`${provider.url}/_control/health`))).toBeInstanceOf(TypeError);
  });

  it("the CLI serves the SDK on the port it prints and stops on SIGTERM", async () => {
    const cli = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
    const child = spawn(process.execPath, [compiledEntry(cli), "--port", "0", "--seed", "9", "--gap-before-stop-ms", "1"], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      let out = "";
      const url = await new Promise<string>((resolve, reject) => {
        child.stdout.on("data", (chunk: Buffer) => {
          out += chunk.toString();
          const match = /listening on (http:\/\/\S+)/.exec(out);
          if (match) resolve(match[1]!);
        });
        child.once("exit", (code) => reject(new Error(`cli exited with ${code}: ${out}`)));
      });
      const client = new Anthropic({ baseURL: url, apiKey: "k", maxRetries: 0 });
      const message = await client.messages.stream(body(`call send_payment ${JSON.stringify(payment)}`)).finalMessage();
      expect((message.content[0] as Anthropic.ToolUseBlock).input).toEqual(payment);
      const timing = (await (await fetch(`${url}/_control/timing`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" })).json()) as any;
      expect(timing.timing.beforeMessageStopMs).toBe(1);
    } finally {
      const exited = once(child, "exit");
      child.kill("SIGTERM");
      const [code] = await exited;
      expect(code).toBe(0);
    }
  });
});
