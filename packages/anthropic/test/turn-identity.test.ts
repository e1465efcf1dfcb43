import { describe, expect, it } from "vitest";
import { MemoryConversationStore, MemoryLedger, type Ledger } from "@dispatch-once/core";
import { ConversationRunner, TurnAccumulator, TurnFailedError, type RunnerEvent } from "../src/index.js";
import { providerPerTest, setup } from "./fixtures.js";

/** Issue 11 through the real SDK and the mock provider: one turn in flight per conversation. */
const provider = providerPerTest();

const lastUserText = (messages: { role: string; content: unknown }[]) => {
  const users = messages.filter((m) => m.role === "user" && typeof m.content === "string");
  return users.at(-1)?.content;
};

describe("distinct messages in one conversation (TURN-9, TURN-11)", () => {
  it("TURN-9 'pay alice' and 'pay bob' sent together by two workers: one payment each, both answered, distinct turns", async () => {
    const { runner, worker, effects, store, server } = await setup(provider(), { guarded: true, latencyMs: 60 });
    const second = worker();
    const [alice, bob] = await Promise.all([
      runner.send("conv-race", { id: "m-alice", content: "pay alice" }),
      second.send("conv-race", { id: "m-bob", content: "pay bob" }),
    ]);
    expect(effects()).toHaveLength(2);
    const payees = server.effects().filter((e) => e.kind === "payment_created").map((e) => e.resourceId);
    expect(new Set(payees).size).toBe(2);
    expect(alice.status).toBe("answered");
    expect(bob.status).toBe("answered");
    const indexes = [...alice.turns, ...bob.turns].map((t) => t.turnIndex).sort();
    expect(indexes).toEqual([0, 1, 2, 3]);
    // Each payment is the one its message asked for.
    expect(alice.turns[0]!.calls[0]!.result).toMatchObject({ paymentId: expect.any(String) });
    expect(alice.turns[0]!.calls[0]!.result).not.toEqual(bob.turns[0]!.calls[0]!.result);
    // No request ever showed the model a message other than the one it answered, unanswered.
    for (const request of provider().requests) {
      const msgs = (request.body as { messages: { role: string; content: unknown }[] }).messages;
      const text = lastUserText(msgs);
      const earlierPrompts = msgs.filter((m) => m.role === "user" && typeof m.content === "string").slice(0, -1);
      for (const prompt of earlierPrompts) {
        // An earlier prompt is in the input only with its answer after it.
        const at = msgs.indexOf(prompt);
        expect(msgs[at + 1]?.role).toBe("assistant");
      }
      expect(["pay alice", "pay bob"]).toContain(text);
    }
    expect((await store.log("conv-race")).length).toBe(8);
    expect(await store.message("conv-race", "m-alice")).toMatchObject({ state: "answered" });
    expect(await store.message("conv-race", "m-bob")).toMatchObject({ state: "answered" });
  });

  it("TURN-9 'hello' then 'pay bob' close together: bob is paid once, by an answered turn, and a re-send returns the stored answer", async () => {
    const { runner, worker, effects } = await setup(provider(), { guarded: true, latencyMs: 30 });
    const [hello, bob] = await Promise.all([
      runner.send("conv-hello", { id: "m-hello", content: "hello" }),
      worker().send("conv-hello", { id: "m-bob", content: "pay bob" }),
    ]);
    expect(hello.turns.map((t) => t.text)).toEqual(["Hi."]);
    expect(effects()).toHaveLength(1);
    const paid = bob.turns[0]!.calls[0]!.result;
    const resent = await runner.send("conv-hello", { id: "m-bob", content: "pay bob" });
    expect(resent).toMatchObject({ appended: false, fromStore: true, status: "answered" });
    expect(resent.turns[0]!.calls[0]!.result).toEqual(paid);
    expect(effects()).toHaveLength(1);
  });
});

describe("after a failed turn (TURN-12)", () => {
  it("TURN-12 a re-ask in a new message takes the failed turn's index: answered from the ledger, no second payment", async () => {
    // Every response to "pay acme" for the first message dies after the payment.
    provider().setFaultPlan((request) =>
      request.messages.length === 1 && request.messages[0]!.content === "pay acme" && !reasked
        ? { kind: "reset", at: { beforeMessageStop: true } }
        : undefined,
    );
    let reasked = false;
    const { runner, effects, store } = await setup(provider(), { guarded: true });
    const failed = (await runner.send("conv-reask", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(failed).toBeInstanceOf(TurnFailedError);
    expect(failed.record.effects).toEqual([expect.objectContaining({ effect: "happened" })]);
    expect(effects()).toHaveLength(1);
    reasked = true;

    // The user asks again in a new message: same index 0 (nothing was committed), same key.
    const reask = await runner.send("conv-reask", { id: "m2", content: "pay acme" });
    expect(reask.turns[0]).toMatchObject({ turnIndex: 0 });
    expect(reask.turns[0]!.calls[0]).toMatchObject({ replayed: true, result: { paymentId: effects()[0]!.paymentId } });
    expect(effects()).toHaveLength(1);
    expect(await store.message("conv-reask", "m2")).toMatchObject({ state: "answered", turnIndex: 0 });

    // The failed message can no longer be retried at index 0: it says so, and runs nothing.
    const stale = await runner.send("conv-reask", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(stale).toMatchObject({ code: "turn_failed", replayed: true });
    expect(effects()).toHaveLength(1);

    // A genuinely new identical request, once the conversation moved on, pays again.
    const repeat = await runner.send("conv-reask", { id: "m3", content: "pay acme" });
    expect(repeat.turns[0]).toMatchObject({ turnIndex: 2 });
    expect(repeat.turns[0]!.calls[0]).toMatchObject({ replayed: false });
    expect(effects()).toHaveLength(2);
  });
});

describe("conversation ids and stores (KEY-2, TURN-14)", () => {
  it("KEY-2 an invalid conversation id is refused at send(), before any model request, and is not retryable", async () => {
    const { runner } = await setup(provider(), { guarded: true });
    for (const bad of ["a|b", "", "x".repeat(257), 42 as unknown as string]) {
      await expect(runner.send(bad, { id: "m1", content: "pay acme" })).rejects.toMatchObject({ code: "invalid_key_input", field: "conversationId" });
    }
    expect(provider().requests).toHaveLength(0);
  });

  it("TURN-14 a volatile conversation store beside a durable ledger is refused unless explicitly allowed", async () => {
    const { client, tools } = await setup(provider(), { guarded: true });
    const base = new MemoryLedger();
    const durable: Ledger = Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" } });
    const { Dispatcher } = await import("@dispatch-once/core");
    const dispatcher = new Dispatcher({ tools, ledger: durable });
    const options = { client, dispatcher, store: new MemoryConversationStore(), model: "claude-test", tools: tools.providerSchemas() };
    expect(() => new ConversationRunner(options)).toThrow(expect.objectContaining({ code: "durability_mismatch" }));
    expect(() => new ConversationRunner({ ...options, allowVolatileConversationStore: true })).not.toThrow();
  });
});

describe("turn lease (TURN-10, TURN-13)", () => {
  it("TURN-13 a worker that lost the conversation mid-turn cannot commit; its payment is recorded beside the conversation, once", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const events: RunnerEvent[] = [];
    const { runner, worker, effects, server } = await setup(provider(), {
      guarded: true,
      latencyMs: 0,
      store,
      runner: { turnLeaseMs: 60_000, onEvent: (e) => events.push(e) },
    });
    // Worker A's payment hangs downstream; meanwhile its lease lapses (a long pause) and B takes over.
    server.injectFault({ latencyMs: 400 }, { times: 1 });
    const a = runner.send("conv-lease", { id: "m1", content: "pay acme" });
    while (server.inFlight().length === 0) await new Promise((r) => setTimeout(r, 5));
    now += 61_000;
    const b = await worker().send("conv-lease", { id: "m1", content: "pay acme" });
    const aResult = await a;
    expect(effects()).toHaveLength(1);
    expect(b.status).toBe("answered");
    expect(aResult.status).toBe("answered"); // A reads the answer B committed
    const superseded = (await store.records("conv-lease")).filter((r) => (r as { kind: string }).kind === "superseded_attempt");
    expect(superseded).toHaveLength(1);
    expect(superseded[0]).toMatchObject({ messageId: "m1", turnIndex: 0, calls: [expect.objectContaining({ effect: "happened" })] });
    expect((await store.log("conv-lease")).length).toBe(4);
  });
});

describe("stream rules (STREAM-1, STREAM-2)", () => {
  it("STREAM-1 a transport error after message_stop commits the turn without asking the model again", async () => {
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { afterMessageStop: true } } : undefined));
    const events: RunnerEvent[] = [];
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { onEvent: (e) => events.push(e) } });
    const result = await runner.send("conv-after-stop", { id: "m1", content: "pay acme" });
    expect(result.turns[0]).toMatchObject({ attempts: 1, committed: true });
    expect(events.filter((e) => e.type === "stream_failed")).toEqual([]);
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-2 a dispatched call still running outranks an open call: the position is during_dispatch", () => {
    const acc = new TurnAccumulator();
    const start = (index: number, id: string) =>
      acc.apply({ type: "content_block_start", index, content_block: { type: "tool_use", id, name: "send_payment", input: {} } } as never);
    acc.apply({ type: "message_start", message: { id: "msg_1" } } as never);
    start(0, "toolu_a");
    const done = acc.apply({ type: "content_block_stop", index: 0 } as never);
    done!.phase = "dispatched";
    start(1, "toolu_b");
    acc.apply({ type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '{"pay' } } as never);
    expect(acc.failurePosition()).toBe("during_dispatch");
  });
});
