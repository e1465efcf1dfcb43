import { InvalidArgumentError, MemoryConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { StreamIncompleteError, TurnFailedError, type ConversationRunnerOptions } from "../src/index.js";
import { RunnerEventLog, providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();

/** Small enough for a test, far above a loaded host's gap between two events the mock writes at once. */
const IDLE_MS = 400;

/** The stall positions of STREAM-2 on the Messages API, as the mock's `hold` fault places them. */
const STALLS = [
  { name: "before the first event (only the headers arrived)", at: { event: 0 }, position: "before_any_call", paid: 1 },
  { name: "after message_start, before any call", at: { event: 1 }, position: "before_any_call", paid: 1 },
  { name: "mid-arguments of the call", at: { toolUse: 0, afterFragment: 0 }, position: "arguments_streaming", paid: 1 },
  { name: "after the call's content_block_stop (dispatched and resolved)", at: { afterToolUseStop: 0 }, position: "after_dispatch_before_stop", paid: 1 },
  { name: "after the last event before message_stop", at: { beforeMessageStop: true }, position: "after_dispatch_before_stop", paid: 1 },
] as const;

/** Resolves once the mock holds no stream (the runner's abort reached it); fails after 10 s. */
async function heldStreamsEnd(): Promise<void> {
  for (let waited = 0; provider().held.length > 0; waited += 50) {
    if (waited > 10_000) throw new Error(`the mock still holds ${JSON.stringify(provider().held)}: the request was not aborted`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const pending = (promise: Promise<unknown>) => {
  let settled = false;
  void promise.then(
    () => (settled = true),
    () => (settled = true),
  );
  return () => settled;
};

describe("STREAM-16 a stream that goes silent is a failed stream (Anthropic SDK over the mock)", () => {
  for (const stall of STALLS) {
    it(`STREAM-16 a stall ${stall.name}: the attempt fails at ${stall.position} after the idle bound, the request is aborted, the retry commits, one payment`, async () => {
      const log = new RunnerEventLog();
      provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: stall.at } : undefined));
      const { runner, effects } = await setup(provider(), { guarded: true, runner: { onEvent: log.onEvent, streamIdleTimeoutMs: IDLE_MS, retry: { attempts: 5, backoffMs: () => 10 } } });
      const result = await runner.send("conv-idle", { id: "m1", content: "pay acme" });

      expect(result.status).toBe("answered");
      expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({
        attempt: 1,
        position: stall.position,
        error: expect.stringContaining(`idle for ${IDLE_MS} ms`),
      });
      // The runner aborted the held request: the mock sees the client leave (no hold is left).
      await heldStreamsEnd();
      // Attempt 1 is the stall. The mock runs in this process, so on a loaded host a retry the mock
      // never held can go IDLE_MS without an event too (the process was starved, nothing was
      // written): the bound doing its job, not the case under test. Then the turn takes one more
      // attempt; each failed attempt failed as idle, and the last one committed.
      const failures = log.events.filter((e) => e.type === "stream_failed");
      for (const failure of failures) expect(failure).toMatchObject({ error: expect.stringContaining(`idle for ${IDLE_MS} ms`) });
      expect(result.turns[0]).toMatchObject({ attempts: failures.length + 1 });
      expect(provider().requests.filter((r) => r.faultFired).map((r) => r.requestNumber)).toEqual([1]);
      expect(effects()).toHaveLength(stall.paid);
      expect(result.turns[0]!.calls[0]!.key).toBe(effects()[0]!.idempotencyKey);
    });
  }

  it("STREAM-16 STREAM-6 a stall while the payment is in flight: the runner awaits and records it, the retry replays it from the ledger; one payment, committed with its result", async () => {
    const log = new RunnerEventLog();
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: { afterToolUseStop: 0 } } : undefined));
    // The payment takes far longer than the idle bound: the bound expires while it runs.
    const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 2_000, runner: { onEvent: log.onEvent, streamIdleTimeoutMs: 300 } });
    const result = await runner.send("conv-idle-inflight", { id: "m1", content: "pay acme" });

    const types = log.events.map((e) => `${e.type}:${e.attempt}`);
    expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position: "during_dispatch", error: expect.stringContaining("idle for 300 ms") });
    // Not cancelled: the first attempt's payment resolved before the second attempt started (STREAM-6).
    expect(types.indexOf("call_resolved:1")).toBeGreaterThan(-1);
    expect(types.indexOf("call_resolved:1")).toBeLessThan(types.indexOf("attempt_started:2"));
    expect(log.events).toContainEqual(expect.objectContaining({ type: "call_resolved", attempt: 1, ok: true, replayed: false }));

    // The oracle: one payment in the payments API's effect log, the one the conversation holds.
    expect(effects()).toHaveLength(1);
    const [payment] = effects();
    const call = result.turns[0]!.calls[0]!;
    expect(call).toMatchObject({ replayed: true, key: payment!.idempotencyKey, result: { paymentId: payment!.paymentId, status: "accepted" } });
    // Exactly one tool_result in the conversation, carrying that payment's result.
    const committed = JSON.stringify(await store.log("conv-idle-inflight"));
    expect(committed.split('"type":"tool_result"').length - 1).toBe(1);
    expect(committed).toContain(payment!.paymentId);
  });

  it("STREAM-16 a slow stream that is alive (an event every 150 ms, bound 1 s) is never cut", async () => {
    const log = new RunnerEventLog();
    provider().setFaultPlan(() => ({ kind: "timing", timing: { firstEventMs: 150, betweenEventsMs: 150, afterBlockStopMs: 150, beforeMessageStopMs: 150 } }));
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { onEvent: log.onEvent, streamIdleTimeoutMs: 1_000 } });
    const result = await runner.send("conv-slow", { id: "m1", content: "pay acme" });
    expect(log.events.filter((e) => e.type === "stream_failed")).toEqual([]);
    expect(result.turns.map((t) => t.attempts)).toEqual([1, 1]);
    expect(effects()).toHaveLength(1);
  });

  it("STREAM-16 every attempt stalls: the turn fails with a record whose StreamIncompleteError names the idle bound", async () => {
    const log = new RunnerEventLog();
    provider().setFaultPlan(() => ({ kind: "hold", at: { event: 1 } }));
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { onEvent: log.onEvent, streamIdleTimeoutMs: IDLE_MS, retry: { attempts: 2, backoffMs: () => 10 } } });
    const error = await runner.send("conv-idle-fail", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const failed = error as TurnFailedError;
    expect(failed.record).toMatchObject({ position: "before_any_call", attempts: 2, retryable: true, error: { name: "StreamIncompleteError", code: "stream_incomplete" } });
    expect(failed.record.error.message).toContain(`the stream was idle for ${IDLE_MS} ms`);
    expect(failed.message).toContain(`idle for ${IDLE_MS} ms`);
    expect(log.events.filter((e) => e.type === "stream_failed")).toHaveLength(2);
    await heldStreamsEnd();
    expect(effects()).toEqual([]);
    expect(new StreamIncompleteError(3, "message_stop", undefined, undefined, IDLE_MS).idleMs).toBe(IDLE_MS);
  });

  it("STREAM-16 control: with the bound turned off (Infinity) a stalled send is still pending after 2 s, its turn lease still renewed; it ends only when the stream does", async () => {
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: { event: 1 } } : undefined));
    // The hazard the bound removes: the runner keeps renewing the turn lease of a send that never returns.
    const store = new MemoryConversationStore();
    let renewals = 0;
    const renewLease = store.renewLease.bind(store);
    store.renewLease = (...args) => {
      renewals += 1;
      return renewLease(...args);
    };
    const { runner } = await setup(provider(), { guarded: true, store, runner: { streamIdleTimeoutMs: Infinity, turnLeaseMs: 300, allowVolatileConversationStore: true } });
    const sent = runner.send("conv-no-bound", { id: "m1", content: "pay acme" });
    const settled = pending(sent);
    await provider().waitForHold(1, { timeoutMs: 20_000 });
    const before = renewals;
    await new Promise((r) => setTimeout(r, 2_000));
    expect(settled()).toBe(false);
    expect(renewals).toBeGreaterThan(before);
    provider().cutNow(1, "reset");
    await expect(sent).resolves.toMatchObject({ status: "answered" });
  });

  it("STREAM-16 a bound that is not a positive number of ms (or Infinity) is refused when the runner is built", async () => {
    const { runnerOptions } = await setup(provider(), { guarded: true });
    const { ConversationRunner } = await import("../src/index.js");
    for (const bad of [0, -1, Number.NaN, "5000", 2 ** 31, null]) {
      const build = () => new ConversationRunner({ ...runnerOptions, streamIdleTimeoutMs: bad } as unknown as ConversationRunnerOptions);
      expect(build).toThrow(InvalidArgumentError);
      expect(build).toThrow(/options\.streamIdleTimeoutMs/);
    }
    expect(() => new ConversationRunner({ ...runnerOptions, streamIdleTimeoutMs: Infinity })).not.toThrow();
  });
});
