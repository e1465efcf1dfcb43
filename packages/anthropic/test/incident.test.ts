import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { PAY_ACME, RunnerEventLog, cutAfterDispatch, providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();

/**
 * The chapter's cut: reset after the call's content_block_stop, before message_stop, first attempt
 * only. After the dispatch, the cut waits for the payment's call_resolved (the returned log is the
 * runner's onEvent), so the position is the one named however slow the payment is.
 */
function cutFirstAttempt(at: "during_dispatch" | "after_dispatch_before_stop"): RunnerEventLog {
  const log = new RunnerEventLog();
  const gate = cutAfterDispatch(provider(), log);
  provider().setFaultPlan((_request, info) => {
    if (info.attempt !== 1) return undefined;
    return at === "during_dispatch" ? { kind: "reset", at: { afterToolUseStop: 0 }, timing: { afterBlockStopMs: 20 } } : gate.hold(info);
  });
  return log;
}

describe("the chapter's incident over the real SDK", () => {
  it("STREAM-5 naive handler: the automatic retry pays twice", async () => {
    const log = cutFirstAttempt("after_dispatch_before_stop");
    const { runner, effects } = await setup(provider(), { guarded: false, latencyMs: 100, runner: { onEvent: log.onEvent } });
    const result = await runner.send("conv-incident", { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(effects()).toHaveLength(2);
    // The retry's call carried a fresh toolu_ id: the naive key changed with it.
    expect(new Set(effects().map((e) => e.idempotencyKey)).size).toBe(2);
  });

  for (const position of ["during_dispatch", "after_dispatch_before_stop"] as const) {
    it(`STREAM-5 guarded: a reset ${position} pays once and the retry gets the first payment's result`, async () => {
      const { events, onEvent } = cutFirstAttempt(position);
      const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 100, runner: { onEvent } });
      const result = await runner.send("conv-incident", { id: "m1", content: "pay acme" });
      expect(effects()).toHaveLength(1);
      const failed = events.find((e) => e.type === "stream_failed");
      expect(failed).toMatchObject({ position });
      const paymentTurn = result.turns[0]!;
      expect(paymentTurn.attempts).toBe(2);
      const [payment] = effects();
      expect(paymentTurn.calls[0]).toMatchObject({ replayed: true, result: { paymentId: payment!.paymentId, status: "accepted" } });

      // What the conversation holds: the retried response's toolu_ id, the first payment's result.
      const log = (await store.log("conv-incident")) as { role: string; content: unknown }[];
      const toolResults = log[2]!.content as { tool_use_id: string; content: string }[];
      const assistant = log[1]!.content as { id: string }[];
      expect(toolResults[0]!.tool_use_id).toBe(assistant[0]!.id);
      expect(JSON.parse(toolResults[0]!.content)).toEqual({ paymentId: payment!.paymentId, status: "accepted" });
      expect(provider().requests[1]!.toolUses[0]!.id).toBe(assistant[0]!.id);
      expect(provider().requests[0]!.toolUses[0]!.id).not.toBe(assistant[0]!.id);
    });
  }

  it("STREAM-1 a clean close without message_stop is a failed stream, and is retried", async () => {
    const log = new RunnerEventLog();
    const { events } = log;
    const gate = cutAfterDispatch(provider(), log, "clean_close");
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? gate.hold(info) : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { onEvent: log.onEvent } });
    await runner.send("conv-close", { id: "m1", content: "pay acme" });
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({
      position: "after_dispatch_before_stop",
      error: expect.stringContaining("StreamIncompleteError"),
    });
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-2 an overloaded error event mid-stream is a failed stream, and is retried", async () => {
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "error_event", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true });
    const result = await runner.send("conv-err", { id: "m1", content: "pay acme" });
    expect(result.turns[0]!.attempts).toBe(2);
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-12 an error event mid-stream (the SDK throws it as an APIError) fails the turn with stream_incomplete saying what the provider said: event, type, message", async () => {
    provider().setFaultPlan(() => ({ kind: "error_event", at: { beforeMessageStop: true } }));
    const { runner, effects } = await setup(provider(), { guarded: true });
    const error = await runner.send("conv-err-said", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const record = (error as TurnFailedError).record;
    expect(record.error).toMatchObject({ code: "stream_incomplete" });
    expect(record.error!.message).toContain("error overloaded_error: Overloaded");
    expect(effects()).toHaveLength(1);
    expect(record.effects).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened" })]);
  });

  it("STREAM-3 a cut while arguments stream: nothing dispatched, no ledger row, the call is not run", async () => {
    provider().setFaultPlan(() => ({ kind: "reset", at: { toolUse: 0, afterFragment: 2 } }));
    const { runner, effects, ledger, store } = await setup(provider(), { guarded: true });
    const error = await runner.send("conv-args", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const record = (error as TurnFailedError).record;
    expect(record).toMatchObject({ position: "arguments_streaming", attempts: 3, turnIndex: 0 });
    // RECORD-5: every attempt's call is listed, each never run.
    expect(record.calls).toHaveLength(3);
    for (const [i, call] of record.calls.entries()) {
      expect(call).toMatchObject({ attempt: i + 1, name: "send_payment", status: "not_run", effect: "not_happened", summary: "not run (connection lost)" });
    }
    expect(record.effects).toEqual([]);
    expect(record.calls[0]!.partialArguments!.length).toBeGreaterThan(0);
    expect(() => JSON.parse(record.calls[0]!.partialArguments!)).toThrow();
    expect(effects()).toHaveLength(0);
    expect(ledger.size).toBe(0);
    // RECORD-1: nothing of the failed turn is in the conversation; the record lives beside it,
    // and the message waits, failed, for a re-send of its id (TURN-12).
    expect(await store.log("conv-args")).toEqual([]);
    expect(await store.message("conv-args", "m1")).toMatchObject({ state: "failed", turnIndex: 0 });
    expect(await store.records("conv-args")).toEqual([expect.objectContaining({ kind: "failed_turn", messageId: "m1" })]);
  });

  it("RECORD-2 a failed turn reports calls that ran with their stored result, and writes nothing", async () => {
    // Every attempt is cut after its call resolved: the record's position is the last attempt's.
    const log = new RunnerEventLog();
    const gate = cutAfterDispatch(provider(), log);
    provider().setFaultPlan((_r, info) => gate.hold(info));
    const { runner, effects, store } = await setup(provider(), { guarded: true, runner: { retry: { attempts: 2, backoffMs: () => 1 }, onEvent: log.onEvent } });
    const error = (await runner.send("conv-ran", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record.position).toBe("after_dispatch_before_stop");
    const paid = { paymentId: effects()[0]!.paymentId, status: "accepted" };
    expect(error.record.calls).toEqual([
      expect.objectContaining({ attempt: 1, status: "completed", effect: "happened", replayed: false, result: paid }),
      expect.objectContaining({ attempt: 2, status: "completed", effect: "happened", replayed: true, result: paid }),
    ]);
    expect(error.record.effects).toEqual([{ key: error.record.calls[0]!.key, name: "send_payment", effect: "happened", input: expect.objectContaining({ payee: "acme", amount: 125000 }) }]);
    expect(effects()).toHaveLength(1);
    expect(await store.log("conv-ran")).toHaveLength(0);
  });

  it("IDENT-1 a memo re-worded by the retried response still pays once", async () => {
    const log = cutFirstAttempt("after_dispatch_before_stop");
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { onEvent: log.onEvent } });
    await runner.send("conv-memo", { id: "m1", content: "pay acme" });
    const memos = provider().requests.slice(0, 2).map((r) => r.toolUses[0]!.input.memo);
    expect(memos[0]).not.toBe(memos[1]);
    expect(effects()).toHaveLength(1);
  });

  it("DISPATCH-6 two identical calls in one turn both pay, and a retry of that turn pays nothing more", async () => {
    provider().setFaultPlan((_r, info) => (info.attempt === 1 ? { kind: "reset", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true });
    const result = await runner.send("conv-twice", { id: "m1", content: "pay acme twice" });
    expect(effects()).toHaveLength(2);
    expect(result.turns[0]!.calls.map((c) => c.ordinal)).toEqual([0, 1]);
    expect(result.turns[0]!.calls.every((c) => c.replayed)).toBe(true);
  });

  it("STREAM-4 dispatch happens at content_block_stop, before message_stop", async () => {
    // message_stop is withheld until the payment's call resolved (a sleep before it only guessed
    // the payment would be quicker): a runner that dispatched at message_stop never resolves it.
    const log = new RunnerEventLog();
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: { beforeMessageStop: true } } : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true, latencyMs: 10, runner: { onEvent: log.onEvent } });
    const sent = runner.send("conv-early", { id: "m1", content: "pay acme" });
    await provider().waitForHold(1, { timeoutMs: 20_000 });
    await log.waitForResolved(provider().requests[0]!.toolUses.map((t) => t.id));
    // The payment is in the payments API's log while message_stop has not been sent.
    const paidWhileHeld = effects().length;
    provider().release(1);
    await sent;
    expect(paidWhileHeld).toBe(1);
    const messageStop = await provider().waitForEvent((e) => e.type === "message_stop");
    const received = provider().requests[0]!.receivedAt;
    // Milliseconds on both sides: the order is the causal one above, the clock may read them equal.
    expect(effects()[0]!.at).toBeLessThanOrEqual(received + messageStop.atMs);
    expect(PAY_ACME.payee).toBe("acme");
  });
});
