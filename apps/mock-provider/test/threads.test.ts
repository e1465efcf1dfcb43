import Anthropic from "@anthropic-ai/sdk";
import { describe, expect, it } from "vitest";
import type { MessagesRequest, Script } from "../src/index.js";
import { rejection, setup } from "./helpers.js";

/**
 * Message threads (beta message-threads-2026-08-12): a `create` stores the conversation with its
 * completed reply under the reply's id; a `continue` sends only the new messages and the mock
 * rebuilds the full conversation before the script sees it. The script below answers with what
 * it saw, so each reply shows the conversation the model was given.
 */
const BETA = "message-threads-2026-08-12";
const seen: Script = (request: MessagesRequest) => ({
  content: [{ type: "text", text: `saw ${request.messages.length} messages, system=${String(request.system)}, tools=${(request.tools ?? []).map((t) => t.name).join("+")}` }],
  stopReason: "end_turn",
});
const tool = { name: "lookup", description: "Look up", input_schema: { type: "object" as const, properties: {} } };

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-api-key": "sk-test", "anthropic-version": "2023-06-01", "anthropic-beta": BETA, ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as any };
}

const create = (messages: unknown[], extra: Record<string, unknown> = {}) => ({
  model: "claude-mock-1",
  max_tokens: 64,
  system: "Be brief.",
  tools: [tool],
  messages,
  thread: { type: "create" },
  ...extra,
});
const cont = (previous: string, messages: unknown[], extra: Record<string, unknown> = {}) => ({
  model: "claude-mock-1",
  max_tokens: 64,
  messages,
  thread: { type: "continue", previous_message_id: previous },
  ...extra,
});

describe("message threads in the mock provider", () => {
  it("create stores the conversation with its reply; continue rebuilds it (system and tools kept) before the script sees it", async () => {
    const { provider } = await setup({ script: seen });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    expect(first.status).toBe(200);
    expect(first.json.content[0].text).toBe("saw 1 messages, system=Be brief., tools=lookup");
    const second = await post(provider.url, cont(first.json.id, [{ role: "user", content: "and then?" }]));
    expect(second.status).toBe(200);
    // user, assistant (the stored reply), user: three messages, with the create's system and tools.
    expect(second.json.content[0].text).toBe("saw 3 messages, system=Be brief., tools=lookup");
    const record = provider.requests[1]!;
    expect(record.thread).toMatchObject({ type: "continue", previousMessageId: first.json.id, stored: true });
    expect(record.thread!.conversation.messages[1]).toEqual({ role: "assistant", content: first.json.content });
    // The log keeps the delta as sent.
    expect((record.body as { messages: unknown[] }).messages).toHaveLength(1);
    // A continue of the continue: the chain grows.
    const third = await post(provider.url, cont(second.json.id, [{ role: "user", content: "ok" }]));
    expect(third.json.content[0].text).toMatch(/^saw 5 messages/);
  });

  it("the attempt count is the conversation's: a replay under a new create counts as attempt 2 of the same input", async () => {
    const { provider } = await setup({ script: seen });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    await post(provider.url, cont(first.json.id, [{ role: "user", content: "next" }]));
    await post(provider.url, create([{ role: "user", content: "hi" }, { role: "assistant", content: first.json.content }, { role: "user", content: "next" }]));
    expect(provider.requests.map((r) => r.attempt)).toEqual([1, 1, 2]);
    expect(provider.requests[1]!.bodyHash).toBe(provider.requests[2]!.bodyHash);
  });

  it("a continue may not carry system or tools (400), and a thread field needs the beta header", async () => {
    const { provider } = await setup({ script: seen });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    for (const extra of [{ system: "Other." }, { tools: [tool] }]) {
      const r = await post(provider.url, cont(first.json.id, [{ role: "user", content: "x" }], extra));
      expect(r.status).toBe(400);
      expect(r.json.error.type).toBe("invalid_request_error");
      expect(r.json.error.message).toMatch(new RegExp(`^${Object.keys(extra)[0]}:`));
    }
    // The refused continues did not use up the reply: it can still be continued.
    expect(provider.continuableThreads).toEqual([first.json.id]);
    const noBeta = await post(provider.url, create([{ role: "user", content: "hi" }]), { "anthropic-beta": "" });
    expect(noBeta.status).toBe(400);
    expect(noBeta.json.error.message).toMatch(/^thread:/);
  });

  it("an unknown, forgotten or expired id is 404 not_found_error thread_not_found; the SDK raises NotFoundError with the details", async () => {
    const { provider, client } = await setup({ script: seen, threads: { ttlMs: 1 } });
    const unknown = await post(provider.url, cont("msg_01unknown", [{ role: "user", content: "x" }]));
    expect(unknown.status).toBe(404);
    expect(unknown.json.error).toMatchObject({ type: "not_found_error", details: { error_code: "thread_not_found" } });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    await new Promise((r) => setTimeout(r, 20)); // past the 1 ms time to live
    const expired = await post(provider.url, cont(first.json.id, [{ role: "user", content: "x" }]));
    expect(expired.json.error.details).toEqual({ error_code: "thread_not_found" });
    const error = await rejection(
      client.beta.messages.create({ ...cont("msg_01unknown", [{ role: "user", content: "x" }]), betas: [BETA] } as never),
    );
    expect(error).toBeInstanceOf(Anthropic.NotFoundError);
    expect(error.error.error.details.error_code).toBe("thread_not_found");
  });

  it("threads.unsupported: an organization setting refuses every thread request, a request field only a body that has it; 400 thread_unsupported_request naming them; the SDK's thread helper raises ThreadUnsupportedRequestError", async () => {
    const org = await setup({ script: seen, threads: { unsupported: ["hipaa"] } });
    const refused = await post(org.provider.url, create([{ role: "user", content: "hi" }]));
    expect(refused.status).toBe(400);
    expect(refused.json.error).toMatchObject({ type: "invalid_request_error", details: { error_code: "thread_unsupported_request", unsupported: ["hipaa"] } });
    const { thread: _thread, ...unthreaded } = create([{ role: "user", content: "hi" }]);
    expect((await post(org.provider.url, unthreaded)).status).toBe(200);
    const error = await rejection(org.client.beta.messages.thread({ model: "claude-mock-1", max_tokens: 64 }).send({ role: "user", content: "hi" }));
    expect((error as Error).constructor.name).toBe("ThreadUnsupportedRequestError");
    const field = await setup({ script: seen, threads: { unsupported: ["thinking"] } });
    expect((await post(field.provider.url, create([{ role: "user", content: "hi" }]))).status).toBe(200);
    const thinking = await post(field.provider.url, create([{ role: "user", content: "hi" }], { thinking: { type: "enabled", budget_tokens: 1024 } }));
    expect(thinking.json.error.details).toEqual({ error_code: "thread_unsupported_request", unsupported: ["thinking"] });
  });

  it("threads.unsupported must be an array of names (invalid_option)", async () => {
    await expect(setup({ script: seen, threads: { unsupported: "hipaa" as never } })).rejects.toMatchObject({ code: "invalid_option" });
  });

  it("forgetThreads drops stored replies: the next continue is thread_not_found", async () => {
    const { provider } = await setup({ script: seen });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    provider.forgetThreads();
    const r = await post(provider.url, cont(first.json.id, [{ role: "user", content: "x" }]));
    expect(r.status).toBe(404);
  });

  it("a reply can be continued once: a second continue of it is 400 thread_already_continued", async () => {
    const { provider } = await setup({ script: seen });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    expect((await post(provider.url, cont(first.json.id, [{ role: "user", content: "a" }]))).status).toBe(200);
    const again = await post(provider.url, cont(first.json.id, [{ role: "user", content: "b" }]));
    expect(again.status).toBe(400);
    expect(again.json.error).toMatchObject({ type: "invalid_request_error", details: { error_code: "thread_already_continued" } });
  });

  it("a continue while another continue of the same reply is in flight is 400 thread_continue_in_flight; a failed continue frees the reply", async () => {
    const { provider } = await setup({ script: seen });
    const first = await post(provider.url, create([{ role: "user", content: "hi" }]));
    provider.faults.enqueue({ kind: "hold", at: { event: 1 } });
    const held = post(provider.url, { ...cont(first.json.id, [{ role: "user", content: "a" }]), stream: true });
    await provider.waitForHold();
    const meanwhile = await post(provider.url, cont(first.json.id, [{ role: "user", content: "b" }]));
    expect(meanwhile.json.error.details).toEqual({ error_code: "thread_continue_in_flight" });
    provider.cutNow(undefined, "reset");
    await held.catch(() => undefined);
    await provider.waitForEnd(2);
    // The cut continue stored nothing, so the reply it continued is free again.
    expect(provider.continuableThreads).toEqual([first.json.id]);
    // A status fault on a continue stores nothing either.
    provider.faults.enqueue({ kind: "status", status: 529 });
    expect((await post(provider.url, cont(first.json.id, [{ role: "user", content: "c" }]))).status).toBe(529);
    expect((await post(provider.url, cont(first.json.id, [{ role: "user", content: "c" }]))).status).toBe(200);
  });

  it("a reply whose stream was cut before message_stop is not stored (none of it): a continue from its id is thread_not_found", async () => {
    const { provider, client } = await setup({ script: seen });
    provider.faults.enqueue({ kind: "reset", at: { event: 3 } });
    const stream = client.beta.messages.stream({ ...create([{ role: "user", content: "hi" }]), betas: [BETA] } as never);
    let id: string | undefined;
    stream.on("streamEvent", (event) => {
      if (event.type === "message_start") id = event.message.id;
    });
    await rejection(stream.finalMessage());
    await provider.waitForEnd(1);
    expect(id).toBe(provider.requests[0]!.messageId);
    expect(provider.requests[0]!.thread!.stored).toBe(false);
    const r = await post(provider.url, cont(id!, [{ role: "user", content: "x" }]));
    expect(r.json.error.details).toEqual({ error_code: "thread_not_found" });
  });

  it("with storeCutReplies a cut reply is stored whole: the continue sees the complete reply, not the part the client got", async () => {
    const { provider } = await setup({ script: seen, threads: { storeCutReplies: true } });
    provider.faults.enqueue({ kind: "reset", at: { event: 2 } });
    await post(provider.url, { ...create([{ role: "user", content: "hi" }]), stream: true }).catch(() => undefined);
    await provider.waitForEnd(1);
    const cutRecord = provider.requests[0]!;
    expect(cutRecord.outcome).toBe("reset");
    expect(cutRecord.thread!.stored).toBe(true);
    const r = await post(provider.url, cont(cutRecord.messageId!, [{ role: "user", content: "x" }]));
    expect(r.status).toBe(200);
    expect(provider.requests[1]!.thread!.conversation.messages[1]).toMatchObject({
      role: "assistant",
      content: [{ type: "text", text: "saw 1 messages, system=Be brief., tools=lookup" }],
    });
  });

  it("the SDK's thread helper: create then continue with only the new message; after the mock loses the thread it replays the full conversation", async () => {
    const { provider, client } = await setup({ script: seen });
    const thread = client.beta.messages.thread({ model: "claude-mock-1", max_tokens: 64, system: "Be brief.", tools: [tool] });
    const one = await thread.send({ role: "user", content: "hi" });
    const two = await thread.send({ role: "user", content: "next" });
    expect((two.content[0] as { text: string }).text).toMatch(/^saw 3 messages, system=Be brief., tools=lookup/);
    const bodies = provider.requests.map((r) => r.body as { thread: { type: string; previous_message_id?: string }; messages: unknown[]; system?: unknown; tools?: unknown });
    expect(bodies[0]!.thread).toEqual({ type: "create" });
    expect(bodies[1]!.thread).toEqual({ type: "continue", previous_message_id: one.id });
    expect(bodies[1]!.messages).toEqual([{ role: "user", content: "next" }]);
    expect(bodies[1]!.system).toBeUndefined();
    expect(bodies[1]!.tools).toBeUndefined();
    expect(provider.requests[1]!.headers["anthropic-beta"]).toContain(BETA);

    provider.forgetThreads();
    const three = await thread.send({ role: "user", content: "again" });
    expect((three.content[0] as { text: string }).text).toMatch(/^saw 5 messages/);
    // The continue got 404 thread_not_found; the SDK replayed all five messages under a new create.
    expect(provider.requests.slice(2).map((r) => [r.status, (r.body as { thread: { type: string } }).thread.type, (r.body as { messages: unknown[] }).messages.length])).toEqual([
      [404, "continue", 1],
      [200, "create", 5],
    ]);
    expect(thread.previousMessageId).toBe(three.id);
  });

  it("the SDK's thread helper after a stream cut mid-reply: the next turn is a create with the full conversation, never a continue from the cut reply", async () => {
    const { provider, client } = await setup({ script: seen });
    const thread = client.beta.messages.thread({ model: "claude-mock-1", max_tokens: 64 });
    await thread.send({ role: "user", content: "hi" });
    provider.faults.enqueue({ kind: "reset", at: { event: 3 } });
    await rejection(thread.stream({ role: "user", content: "next" }).finalMessage());
    await provider.waitForEnd(2);
    const after = await thread.send({ role: "user", content: "retry" });
    expect((after.content[0] as { text: string }).text).toMatch(/^saw \d+ messages/);
    const last = provider.requests.at(-1)!;
    expect((last.body as { thread: { type: string } }).thread).toEqual({ type: "create" });
    expect(provider.requests.filter((r) => r.status === 404)).toHaveLength(0);
  });
});
