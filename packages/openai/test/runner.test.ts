import { describe, expect, it } from "vitest";
import type { Fault } from "@dispatch-once/mock-openai";
import { StreamIncompleteError, TurnFailedError } from "../src/index.js";
import { PAY_ACME, RunnerEventLog, cutAfterDispatch, isPaymentRequest, providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();

type Cut = "during_dispatch" | "after_dispatch_before_stop";

/**
 * The chapter's cut on the payment request's first attempt: after the call's output_item.done, before
 * response.completed. After the dispatch, the cut waits for the payment's call_resolved (the returned
 * log is the runner's onEvent), so the position is the one named however slow the payment is.
 */
function cutFirstAttempt(at: Cut, kind: "reset" | "clean_close" | "error_event" | "failed_event" = "reset"): RunnerEventLog {
  const log = new RunnerEventLog();
  const gate = cutAfterDispatch(provider(), log, kind);
  const during: Fault = { kind, at: { afterCallDone: 0 } };
  provider().setFaultPlan((request, info) => (info.attempt === 1 && isPaymentRequest(request) ? (at === "during_dispatch" ? during : gate.hold(info)) : undefined));
  return log;
}

describe("ConversationRunner over the real openai SDK (Responses streaming) against the mock", () => {
  it("STREAM-5 control: a naive handler (keyed on nothing stable) pays twice on the runner's retry", async () => {
    const log = cutFirstAttempt("after_dispatch_before_stop");
    const { runner, effects } = await setup(provider(), { guarded: false, latencyMs: 100, runner: { onEvent: log.onEvent } });
    const result = await runner.send("conv-naive", { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(effects()).toHaveLength(2);
  });

  for (const position of ["during_dispatch", "after_dispatch_before_stop"] as const) {
    it(`STREAM-5 the chapter's incident: a reset ${position} pays once; the conversation holds one function_call_output with that payment`, async () => {
      const { events, onEvent } = cutFirstAttempt(position);
      const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 100, runner: { onEvent } });
      const result = await runner.send("conv-incident", { id: "m1", content: "pay acme" });

      // The oracle: one payment in the payments API's effect log.
      expect(effects()).toHaveLength(1);
      const [payment] = effects();
      expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position, error: expect.stringContaining("terminated") });
      // The first attempt dispatched at output_item.done, before response.completed (STREAM-4).
      expect(events).toContainEqual(expect.objectContaining({ type: "call_resolved", attempt: 1, ok: true }));

      // The retry re-emitted the call with a new call_id and a re-worded memo; the ledger answered it.
      const [first, retry] = provider().requests;
      expect(retry!.bodyHash).toBe(first!.bodyHash);
      expect(retry!.calls[0]!.callId).not.toBe(first!.calls[0]!.callId);
      expect(JSON.parse(retry!.calls[0]!.json).memo).not.toBe(JSON.parse(first!.calls[0]!.json).memo);
      const paymentTurn = result.turns[0]!;
      expect(paymentTurn).toMatchObject({ attempts: 2, stopReason: "function_call" });
      expect(paymentTurn.calls).toEqual([expect.objectContaining({ callId: retry!.calls[0]!.callId, replayed: true, result: { paymentId: payment!.paymentId, status: "accepted" } })]);
      expect(paymentTurn.calls[0]!.key).toBe(payment!.idempotencyKey);

      // The committed conversation: the user message, the retried response's function_call, and
      // exactly one function_call_output, under that call_id, with the one payment's result.
      const log = (await store.log("conv-incident")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Record<string, unknown>[];
      const calls = log.filter((i) => i.type === "function_call");
      const outputs = log.filter((i) => i.type === "function_call_output");
      expect(calls).toEqual([{ type: "function_call", call_id: retry!.calls[0]!.callId, name: "send_payment", arguments: retry!.calls[0]!.json }]);
      expect(outputs).toHaveLength(1);
      expect(outputs[0]!.call_id).toBe(retry!.calls[0]!.callId);
      expect(JSON.parse(outputs[0]!.output as string)).toEqual({ paymentId: payment!.paymentId, status: "accepted" });

      // The follow-up request sent exactly that log, and the model answered it.
      const followUp = provider().requests.at(-1)!;
      expect((followUp.body as { input: unknown[] }).input).toEqual(log.slice(0, 3));
      expect(result.turns.map((t) => t.text)).toEqual(["", "Payment sent."]);
      expect(result.turns[1]).toMatchObject({ stopReason: "completed", calls: [] });
    });
  }

  for (const kind of ["clean_close", "error_event", "failed_event"] as const) {
    it(`STREAM-1 a ${kind} before response.completed (the SDK raises nothing) is a failed stream: retried, one payment`, async () => {
      const { events, onEvent } = cutFirstAttempt("after_dispatch_before_stop", kind);
      const { runner, effects } = await setup(provider(), { guarded: true, latencyMs: 100, runner: { onEvent } });
      const result = await runner.send("conv-close", { id: "m1", content: "pay acme" });
      const failed = events.find((e) => e.type === "stream_failed");
      expect(failed).toMatchObject({ position: "after_dispatch_before_stop", error: expect.stringContaining("StreamIncompleteError") });
      expect(failed).toMatchObject({ error: expect.stringContaining("without response.completed") });
      // An in-band error's words reach the error (the SDK yielded it as an event).
      if (kind === "error_event") expect(failed).toMatchObject({ error: expect.stringContaining("(error ") });
      if (kind === "failed_event") expect(failed).toMatchObject({ error: expect.stringContaining("(response.failed ") });
      expect(result.turns[0]!.attempts).toBe(2);
      expect(effects()).toHaveLength(1);
    });
  }

  it("STREAM-3 a cut before the call's output_item.done dispatches nothing: no payment, no ledger row, a failed-turn record", async () => {
    provider().setFaultPlan((request) => (isPaymentRequest(request) ? { kind: "reset", at: { call: 0, afterFragment: 2 } } : undefined));
    const { runner, effects, ledger, store } = await setup(provider(), { guarded: true });
    const error = await runner.send("conv-args", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const record = (error as TurnFailedError).record;
    expect(record).toMatchObject({ kind: "failed_turn", position: "arguments_streaming", attempts: 3, turnIndex: 0, retryable: true });
    expect(record.calls).toHaveLength(3);
    for (const [i, call] of record.calls.entries()) {
      expect(call).toMatchObject({ attempt: i + 1, name: "send_payment", status: "not_run", effect: "not_happened", callId: provider().requests[i]!.calls[0]!.callId });
      expect(() => JSON.parse(call.partialArguments!)).toThrow();
    }
    expect(record.effects).toEqual([]);
    expect(effects()).toHaveLength(0);
    expect(ledger.size).toBe(0);
    // RECORD-1: nothing of the failed turn is in the conversation; the record is beside it.
    expect(await store.log("conv-args")).toEqual([]);
    expect(await store.message("conv-args", "m1")).toMatchObject({ state: "failed", turnIndex: 0 });
    expect(await store.records("conv-args")).toEqual([expect.objectContaining({ kind: "failed_turn", messageId: "m1" })]);
  });

  it("RECORD-2 a turn that fails after its payment ran reports it as happened, with its result, and commits nothing", async () => {
    // Every attempt is cut after its call resolved: the record's position is the last attempt's.
    const log = new RunnerEventLog();
    const gate = cutAfterDispatch(provider(), log);
    provider().setFaultPlan((request, info) => (isPaymentRequest(request) ? gate.hold(info) : undefined));
    const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 20, runner: { retry: { attempts: 2, backoffMs: () => 1 }, onEvent: log.onEvent } });
    const error = (await runner.send("conv-ran", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record.position).toBe("after_dispatch_before_stop");
    const paid = { paymentId: effects()[0]!.paymentId, status: "accepted" };
    expect(error.record.calls).toEqual([
      expect.objectContaining({ attempt: 1, status: "completed", effect: "happened", replayed: false, result: paid }),
      expect.objectContaining({ attempt: 2, status: "completed", effect: "happened", replayed: true, result: paid }),
    ]);
    expect(error.record.effects).toEqual([{ key: error.record.calls[0]!.key, name: "send_payment", effect: "happened", input: expect.objectContaining({ payee: "acme" }) }]);
    expect(effects()).toHaveLength(1);
    expect(await store.log("conv-ran")).toEqual([]);
    // A re-send of the same id reopens it (TURN-12: no later message was bound) and this send runs
    // the turn again (so it is not a replayed failure); the payment is answered from the ledger.
    const again = await runner.send("conv-ran", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(again).toMatchObject({ replayed: false, record: { messageId: "m1" } });
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-13 response.incomplete (the output limit) after the call completed is not retried: one attempt, the payment stated, retryable false", async () => {
    const log = new RunnerEventLog();
    const gate = cutAfterDispatch(provider(), log, "incomplete_event");
    provider().setFaultPlan((request, info) => (isPaymentRequest(request) ? gate.hold(info) : undefined));
    const { runner, effects } = await setup(provider(), { guarded: true, latencyMs: 20, runner: { onEvent: log.onEvent } });
    const error = (await runner.send("conv-limit", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(provider().requests).toHaveLength(1);
    expect(error.record).toMatchObject({ attempts: 1, position: "after_dispatch_before_stop", retryable: false, error: { name: "StreamIncompleteError" } });
    expect(error.record.error.message).toContain("max_output_tokens");
    // The call completed before the limit was dispatched and paid: the record says so (RECORD-2).
    expect(error.record.calls).toEqual([expect.objectContaining({ attempt: 1, status: "completed", effect: "happened" })]);
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-13 a call cut by the output limit is abandoned, never run, and the turn is not retried; a clean close at the same place is", async () => {
    provider().setFaultPlan((request) =>
      isPaymentRequest(request) ? { kind: "incomplete_event", at: { call: 0, afterFragment: 1 } } : undefined,
    );
    const { runner, effects } = await setup(provider(), { guarded: true });
    const error = (await runner.send("conv-limit-args", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record).toMatchObject({ attempts: 1, position: "arguments_streaming", retryable: false });
    expect(error.record.calls).toEqual([expect.objectContaining({ status: "not_run", effect: "not_happened" })]);
    expect(effects()).toHaveLength(0);
    // The control: the same position without the provider's final word is a transient failure, retried.
    let closed = false;
    provider().setFaultPlan((request) => {
      if (closed || !isPaymentRequest(request)) return undefined;
      closed = true;
      return { kind: "clean_close", at: { call: 0, afterFragment: 1 } };
    });
    const { runner: again } = await setup(provider(), { guarded: true });
    const result = await again.send("conv-close-args", { id: "m1", content: "pay acme" });
    expect(result.turns[0]!.attempts).toBe(2);
  });

  it("TURN-7 a re-sent message id is answered from the store: the turns read back, nothing run", async () => {
    const { runner, effects } = await setup(provider(), { guarded: true });
    const first = await runner.send("conv-resend", { id: "m1", content: "pay acme" });
    const requests = provider().requests.length;
    const again = await runner.send("conv-resend", { id: "m1", content: "pay acme" });
    expect(again).toMatchObject({ appended: false, fromStore: true, status: "answered" });
    expect(provider().requests).toHaveLength(requests);
    expect(effects()).toHaveLength(1);
    expect(again.turns.map((t) => ({ text: t.text, calls: t.calls.map((c) => ({ callId: c.callId, result: c.result })) }))).toEqual(
      first.turns.map((t) => ({ text: t.text, calls: t.calls.map((c) => ({ callId: c.callId, result: c.result })) })),
    );
  });

  it("DISPATCH-6 two identical calls in one response both pay, and a retry of that response pays nothing more", async () => {
    provider().setFaultPlan((request, info) => (info.attempt === 1 && isPaymentRequest(request) ? { kind: "reset", at: { beforeCompleted: true }, timing: { beforeCompletedMs: 300 } } : undefined));
    const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 20 });
    const result = await runner.send("conv-twice", { id: "m1", content: "pay acme twice" });
    expect(effects()).toHaveLength(2);
    expect(result.turns[0]!.calls.map((c) => c.ordinal)).toEqual([0, 1]);
    expect(result.turns[0]!.calls.every((c) => c.replayed)).toBe(true);
    const outputs = (await store.log("conv-twice")).flat().filter((i) => (i as { type?: string }).type === "function_call_output");
    expect(outputs).toHaveLength(2);
  });

  it("a 500 before the stream is retried by the runner; a permanent 400 is not, and fails the turn with a record", async () => {
    provider().queueFault({ kind: "status", status: 500 });
    const { runner, effects } = await setup(provider(), { guarded: true });
    const result = await runner.send("conv-500", { id: "m1", content: "pay acme" });
    expect(result.turns[0]!.attempts).toBe(2);
    expect(effects()).toHaveLength(1);

    provider().queueFault({ kind: "status", status: 400 });
    const error = (await runner.send("conv-400", { id: "m1", content: "hello" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record).toMatchObject({ attempts: 1, position: "before_any_call", calls: [] });
  });

  it("STREAM-1 the error a clean close raises is the shared StreamIncompleteError, naming response.completed", async () => {
    provider().setFaultPlan((request) => (isPaymentRequest(request) ? { kind: "clean_close", at: { event: 1 } } : undefined));
    const { runner } = await setup(provider(), { guarded: true, runner: { retry: { attempts: 1 } } });
    const error = (await runner.send("conv-incomplete", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record).toMatchObject({ position: "before_any_call", error: { name: "StreamIncompleteError", code: "stream_incomplete" } });
    expect(error.record.error.message).toContain("without response.completed");
    expect(new StreamIncompleteError(3, "response.completed").code).toBe("stream_incomplete");
    expect(PAY_ACME.payee).toBe("acme");
  });
});
