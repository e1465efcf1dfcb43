import { describe, expect, it } from "vitest";
import { ConversationRunner, TurnFailedError } from "../src/index.js";
import { providerPerTest, setup } from "./fixtures.js";

const roles = (log: unknown[]) => log.map((m) => (m as { role: string }).role);

const provider = providerPerTest();

describe("every replay route performs the effect once", () => {
  it("TURN-2 client re-send after a failed turn: same message id, same turn index, no second payment", async () => {
    // The first send's only attempt dies after the payment; the client re-sends its pending message.
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects, store } = await setup(provider(), { guarded: true, runner: { retry: { attempts: 1 } } });
    await expect(runner.send("conv-resend", { id: "m1", content: "pay acme" })).rejects.toBeInstanceOf(TurnFailedError);
    const again = await runner.send("conv-resend", { id: "m1", content: "pay acme" });
    expect(again.appended).toBe(false);
    expect(again.turns[0]).toMatchObject({ turnIndex: 0, committed: true });
    expect(again.turns[0]!.calls[0]).toMatchObject({ replayed: true, result: { paymentId: effects()[0]!.paymentId } });
    expect(effects()).toHaveLength(1);
    // One user message, one assistant turn, one tool result, one closing turn.
    expect(roles(await store.log("conv-resend"))).toEqual(["user", "assistant", "user", "assistant"]);
  });

  it("TURN-5 queue redelivery run concurrently by two workers: one payment, one committed history", async () => {
    const first = await setup(provider(), { guarded: true, latencyMs: 80 });
    // A second worker process: its own runner and SDK client, the same ledger and conversation store.
    const second = new ConversationRunner({
      client: first.client,
      dispatcher: (first.runner as unknown as { options: { dispatcher: never } }).options.dispatcher,
      store: first.store,
      model: "claude-test",
      tools: first.tools.providerSchemas(),
    });
    const message = { id: "m1", content: "pay acme" };
    const [a, b] = await Promise.all([first.runner.send("conv-redeliver", message), second.send("conv-redeliver", message)]);
    expect(first.effects()).toHaveLength(1);
    expect([a.appended, b.appended].sort()).toEqual([false, true]);
    expect(roles(await first.store.log("conv-redeliver"))).toEqual(["user", "assistant", "user", "assistant"]);
  });

  it("TURN-2 a double-clicked send: the second click resolves to the first message", async () => {
    const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 40 });
    const message = { id: "m-click", content: "pay acme" };
    const first = runner.send("conv-click", message);
    await new Promise((r) => setTimeout(r, 5));
    const second = runner.send("conv-click", message);
    await Promise.all([first, second]);
    expect(effects()).toHaveLength(1);
    expect((await store.log("conv-click")).filter((m) => typeof (m as { content: unknown }).content === "string")).toHaveLength(1);
    // A click after the answer is complete asks the model nothing and runs nothing.
    const requestsBefore = provider().requests.length;
    const late = await runner.send("conv-click", message);
    // TURN-7: the stored answer, not an empty list.
    expect(late).toMatchObject({ appended: false, fromStore: true });
    expect(late.turns.map((t) => t.turnIndex)).toEqual([0, 1]);
    expect(late.turns[0]!.calls[0]).toMatchObject({ name: "send_payment", result: { paymentId: effects()[0]!.paymentId } });
    expect(provider().requests).toHaveLength(requestsBefore);
    expect(effects()).toHaveLength(1);
  });

  it("TURN-1 a legitimate second payment in a later turn is made", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true });
    await runner.send("conv-repeat", { id: "m1", content: "pay acme" });
    const second = await runner.send("conv-repeat", { id: "m2", content: "pay acme" });
    expect(effects()).toHaveLength(2);
    expect(second.turns[0]).toMatchObject({ turnIndex: 2 });
    expect(second.turns[0]!.calls[0]).toMatchObject({ replayed: false, result: { paymentId: effects()[1]!.paymentId } });
    expect(effects()[0]!.paymentId).not.toBe(effects()[1]!.paymentId);
  });
});
