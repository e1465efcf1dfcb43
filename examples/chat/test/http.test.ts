import { request } from "node:http";
import { TurnFailedError, type FailedTurnRecord } from "@dispatch-once/anthropic";
import { ConversationBusyError, InvalidKeyInputError, tenantConversationId } from "@dispatch-once/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { problemForSendError } from "../src/problem.js";
import { TENANT, startWorld, type World } from "./harness.js";

let world: World;
beforeAll(async () => {
  world = await startWorld();
});
afterAll(async () => {
  await world?.close();
});

const CONVERSATION = `http-${process.pid}`;

/** A raw request: header values as given (arrays are sent as separate header lines). */
function post(path: string, headers: Record<string, string | string[]>, body: string): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const url = new URL(path, world.url);
    const req = request(url, { agent: false, method: "POST", headers: { "content-type": "application/json", ...headers } }, (res) => {
      let data = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (data += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: data }));
    });
    req.on("error", reject);
    req.end(body);
  });
}

const send = (id: string | string[] | undefined, text: string, conversation = CONVERSATION) =>
  post(`/api/conversations/${conversation}/messages`, id === undefined ? {} : { "idempotency-key": id }, JSON.stringify({ text }));

describe("the chat backend over HTTP (JSON answers)", () => {
  it("refuses a message without one well-formed Idempotency-Key, with problem+json and before any model call", async () => {
    const requests = world.provider.requests.length;
    for (const [id, code] of [
      [undefined, "message_id_missing"],
      [["m-dup", "m-dup"], "message_id_malformed"], // two header lines are not one id
      ["m-nbsp\u00a0", "message_id_malformed"], // no trimming: a trailing 0xA0 is not the same id
      ["m 1", "message_id_malformed"],
    ] as const) {
      const res = await send(id as string | string[] | undefined, "pay acme 1.00 EUR for INV-x");
      expect(res.status, String(id)).toBe(400);
      expect(res.headers["content-type"]).toMatch(/^application\/problem\+json/);
      expect(JSON.parse(res.body)).toMatchObject({ status: 400, code, retryable: "no" });
    }
    expect((await post(`/api/conversations/${CONVERSATION}/messages`, { "idempotency-key": "m-bad-json" }, "{")).status).toBe(400);
    expect(world.provider.requests.length).toBe(requests);
  });

  it("a failed turn answers 503 + Retry-After saying to re-send the same id; the re-send pays nothing more; a re-sent answer comes from the store", async () => {
    world.provider.setFaultRules([{ bodyContains: "INV-http", times: 3, fault: { kind: "reset", at: { beforeMessageStop: true } } }]);
    const failed = await send("m-http-1", "pay acme 9.00 EUR for INV-http");
    expect(failed.status).toBe(503);
    expect(failed.headers["retry-after"]).toBe("1");
    expect(failed.headers["content-type"]).toMatch(/^application\/problem\+json/);
    const problem = JSON.parse(failed.body) as Record<string, unknown>;
    expect(problem).toMatchObject({ status: 503, code: "turn_failed", retryable: "same_message", effect: "yes", messageId: "m-http-1" });
    expect(problem["effects"]).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened" })]);
    expect(world.paymentsFor("INV-http")).toHaveLength(1);
    const conversationId = tenantConversationId(TENANT, CONVERSATION);
    expect((await world.backend.store.message(conversationId, "m-http-1"))?.state).toBe("failed");

    world.provider.setFaultRules([]);
    const resent = await send("m-http-1", "pay acme 9.00 EUR for INV-http");
    expect(resent.status).toBe(200);
    const answer = JSON.parse(resent.body) as { appended: boolean; fromStore: boolean; text: string; turns: { calls: { replayed?: boolean }[] }[] };
    const [payment] = world.paymentsFor("INV-http");
    expect(world.paymentsFor("INV-http")).toHaveLength(1);
    expect(answer).toMatchObject({ appended: false, fromStore: false, text: `Sending 9.00 EUR to acme. Done: payment ${payment!.resourceId} was sent.` });
    expect(answer.turns[0]!.calls[0]!.replayed).toBe(true); // answered from the ledger

    const requests = world.provider.requests.length;
    const again = await send("m-http-1", "pay acme 9.00 EUR for INV-http");
    expect(again.status).toBe(200);
    expect(JSON.parse(again.body)).toMatchObject({ appended: false, fromStore: true, text: answer.text });
    expect(world.provider.requests.length).toBe(requests);
    expect(world.paymentsFor("INV-http")).toHaveLength(1);
  });

  it("an id reused for different text is 422, and the stored message is untouched", async () => {
    const first = await send("m-reuse", "hello");
    expect(first.status).toBe(200);
    const reused = await send("m-reuse", "pay acme 5.00 EUR for INV-reuse");
    expect(reused.status).toBe(422);
    expect(JSON.parse(reused.body)).toMatchObject({ code: "message_id_reused", retryable: "no" });
    expect(world.paymentsFor("INV-reuse")).toHaveLength(0);
    const stored = await world.backend.store.message(tenantConversationId(TENANT, CONVERSATION), "m-reuse");
    expect(stored?.content).toEqual({ role: "user", content: "hello" });
  });
});

describe("the chat backend under double clicks and restarts", () => {
  it("two concurrent sends of one message id (a double click): one payment, both answered with it", async () => {
    const [a, b] = await Promise.all([send("m-double", "pay acme 3.00 EUR for INV-double"), send("m-double", "pay acme 3.00 EUR for INV-double")]);
    expect([a.status, b.status]).toEqual([200, 200]);
    const effects = world.paymentsFor("INV-double");
    expect(effects).toHaveLength(1);
    const answers = [JSON.parse(a.body), JSON.parse(b.body)] as { appended: boolean; text: string }[];
    expect(answers.map((x) => x.appended).sort()).toEqual([false, true]);
    for (const answer of answers) expect(answer.text).toContain(effects[0]!.resourceId);
    const turns = await world.backend.store.turnsOf(tenantConversationId(TENANT, CONVERSATION), "m-double");
    expect(turns).toHaveLength(2); // one committed answer, not two
  });

  it("TURN-14 after a restart over the same SQLite file, a re-sent answered message comes from the store and a new one pays anew", async () => {
    const first = await send("m-restart", "pay acme 4.00 EUR for INV-restart");
    expect(first.status).toBe(200);
    await world.restart();
    const requests = world.provider.requests.length;
    const again = await send("m-restart", "pay acme 4.00 EUR for INV-restart");
    expect(again.status).toBe(200);
    expect(JSON.parse(again.body)).toMatchObject({ appended: false, fromStore: true, text: (JSON.parse(first.body) as { text: string }).text });
    expect(world.provider.requests.length).toBe(requests);
    expect(world.paymentsFor("INV-restart")).toHaveLength(1);
    // A new message after the restart takes the next turn index: a new payment, not the old one replayed.
    const next = await send("m-restart-2", "pay acme 4.00 EUR for INV-restart");
    expect(next.status).toBe(200);
    expect(world.paymentsFor("INV-restart")).toHaveLength(2);
  });
});

describe("problemForSendError reads core's error catalogue", () => {
  const ids = { conversationId: "c", messageId: "m" };
  const record = (retryable: boolean, effect: "happened" | "may_have_happened" | "not_happened"): FailedTurnRecord => ({
    kind: "failed_turn",
    conversationId: "demo:c",
    messageId: "m",
    turnIndex: 0,
    attempts: 3,
    position: "call_unresolved",
    error: { name: "Error", message: "x" },
    calls: [],
    effects: [{ key: "k", name: "send_payment", effect }],
    retryable,
    at: new Date(0).toISOString(),
  });

  it("a failed turn whose record says a re-send helps: 503, re-send the same id", () => {
    expect(problemForSendError(new TurnFailedError(record(true, "not_happened")), ids)).toMatchObject({ status: 503, retryable: "same_message", effect: "no" });
  });
  it("a failed turn with an effect a person must settle: 500, no re-send", () => {
    expect(problemForSendError(new TurnFailedError(record(false, "may_have_happened")), ids)).toMatchObject({ status: 500, retryable: "no", effect: "possibly" });
  });
  it("a busy conversation: 503, re-send the same id (the message is queued)", () => {
    expect(problemForSendError(new ConversationBusyError("demo:c", "m", 30_000), ids)).toMatchObject({ status: 503, code: "conversation_busy", retryable: "same_message", effect: "no" });
  });
  it("TURN-10 a busy conversation running this message's own turn (inProgress): 503, re-send the same id, and the effect possibly happened (never 'no')", () => {
    const answer = problemForSendError(new ConversationBusyError("demo:c", "m", 30_000, { inProgress: true }), ids);
    expect(answer).toMatchObject({ status: 503, code: "conversation_busy", retryable: "same_message", effect: "possibly" });
    expect(answer.detail).toContain("in progress under another holder");
  });
  it("TURN-25 a busy conversation running this message tells which of its calls the ledger holds: a payment made is effect yes, still 503 with the same id", () => {
    const effects = [
      { key: "k1", name: "send_payment", turnIndex: 0, ordinal: 0, state: "completed" as const, effect: "happened" as const, input: { payee: "bob", amount: 2100 } },
      { key: "k2", name: "send_payment", turnIndex: 0, ordinal: 0, state: "in_flight" as const, effect: "may_have_happened" as const, input: { payee: "carol", amount: 500 } },
    ];
    const answer = problemForSendError(new ConversationBusyError("demo:c", "m", 30_000, { inProgress: true, effects }), ids);
    expect(answer).toMatchObject({ status: 503, code: "conversation_busy", retryable: "same_message", effect: "yes", effects });
    const unknown = problemForSendError(new ConversationBusyError("demo:c", "m", 30_000, { inProgress: true, effectsUnknown: "the dispatcher's ledger does not list rows" }), ids);
    expect(unknown).toMatchObject({ status: 503, effect: "possibly" });
    expect(unknown.effects).toBeUndefined();
    expect(unknown.detail).toContain("does not list rows");
  });
  it("a bad input: 422, asking again cannot help", () => {
    expect(problemForSendError(new InvalidKeyInputError("conversationId", "bad"), ids)).toMatchObject({ status: 422, code: "invalid_key_input", retryable: "no" });
  });
  it("an error nobody classified: 503 (a re-send of the same id is safe), the effect possibly happened", () => {
    expect(problemForSendError(new Error("boom"), ids)).toMatchObject({ status: 503, code: "internal_error", retryable: "same_message", effect: "possibly" });
  });
});
