import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { RunnerEventLog, providerPerTest, setup } from "./fixtures.js";

const provider = providerPerTest();

/** Small enough for a test, far above a loaded host's gap between two events the mock writes at once. */
const IDLE_MS = 400;

/** The stall positions of STREAM-2 on the Responses API, as mock-openai's `hold` fault places them. */
const STALLS = [
  { name: "before the first event (only the headers arrived)", at: { event: 0 }, position: "before_any_call" },
  { name: "after response.created, before any call", at: { event: 1 }, position: "before_any_call" },
  { name: "mid-arguments of the call", at: { call: 0, afterFragment: 0 }, position: "arguments_streaming" },
  { name: "after the call's output_item.done (dispatched and resolved)", at: { afterCallDone: 0 }, position: "after_dispatch_before_stop" },
  { name: "after the last event before response.completed", at: { beforeCompleted: true }, position: "after_dispatch_before_stop" },
] as const;

/** Resolves once the mock holds no stream (the runner's abort reached it); fails after 10 s. */
async function heldStreamsEnd(): Promise<void> {
  for (let waited = 0; provider().held.length > 0; waited += 50) {
    if (waited > 10_000) throw new Error(`the mock still holds ${JSON.stringify(provider().held)}: the request was not aborted`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe("STREAM-16 a stream that goes silent is a failed stream (openai SDK, Responses, over the mock)", () => {
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
      await heldStreamsEnd();
      // Attempt 1 is the stall. The mock runs in this process, so on a loaded host a retry the mock
      // never held can go IDLE_MS without an event too (the process was starved, nothing was
      // written): the bound doing its job, not the case under test. Then the turn takes one more
      // attempt; each failed attempt failed as idle, and the last one committed.
      const failures = log.events.filter((e) => e.type === "stream_failed");
      for (const failure of failures) expect(failure).toMatchObject({ error: expect.stringContaining(`idle for ${IDLE_MS} ms`) });
      expect(result.turns[0]).toMatchObject({ attempts: failures.length + 1 });
      expect(provider().requests.filter((r) => r.faultFired).map((r) => r.requestNumber)).toEqual([1]);
      expect(effects()).toHaveLength(1);
      expect(result.turns[0]!.calls[0]!.key).toBe(effects()[0]!.idempotencyKey);
    });
  }

  it("STREAM-16 STREAM-6 a stall while the payment is in flight: the runner awaits and records it, the retry replays it from the ledger; one payment, committed with its result", async () => {
    const log = new RunnerEventLog();
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: { afterCallDone: 0 } } : undefined));
    const { runner, effects, store } = await setup(provider(), { guarded: true, latencyMs: 2_000, runner: { onEvent: log.onEvent, streamIdleTimeoutMs: 300 } });
    const result = await runner.send("conv-idle-inflight", { id: "m1", content: "pay acme" });

    const types = log.events.map((e) => `${e.type}:${e.attempt}`);
    expect(log.events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position: "during_dispatch", error: expect.stringContaining("idle for 300 ms") });
    expect(types.indexOf("call_resolved:1")).toBeGreaterThan(-1);
    expect(types.indexOf("call_resolved:1")).toBeLessThan(types.indexOf("attempt_started:2"));
    expect(effects()).toHaveLength(1);
    const [payment] = effects();
    expect(result.turns[0]!.calls[0]!).toMatchObject({ replayed: true, key: payment!.idempotencyKey, result: { paymentId: payment!.paymentId, status: "accepted" } });
    const items = (await store.log("conv-idle-inflight")).flatMap((entry) => (Array.isArray(entry) ? entry : [entry])) as Record<string, unknown>[];
    const outputs = items.filter((i) => i.type === "function_call_output");
    expect(outputs).toHaveLength(1);
    expect(String(outputs[0]!.output)).toContain(payment!.paymentId);
  });

  it("STREAM-16 every attempt stalls: the turn fails with a record whose StreamIncompleteError names the idle bound", async () => {
    provider().setFaultPlan(() => ({ kind: "hold", at: { event: 1 } }));
    const { runner, effects } = await setup(provider(), { guarded: true, runner: { streamIdleTimeoutMs: IDLE_MS, retry: { attempts: 2, backoffMs: () => 10 } } });
    const error = await runner.send("conv-idle-fail", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnFailedError);
    const failed = error as TurnFailedError;
    expect(failed.record).toMatchObject({ position: "before_any_call", attempts: 2, retryable: true, error: { name: "StreamIncompleteError", code: "stream_incomplete" } });
    expect(failed.record.error.message).toContain(`the stream was idle for ${IDLE_MS} ms`);
    await heldStreamsEnd();
    expect(effects()).toEqual([]);
  });

  it("STREAM-16 control: with the bound turned off (Infinity) a stalled send is still pending after 2 s", async () => {
    provider().setFaultPlan((_r, info) => (info.requestNumber === 1 ? { kind: "hold", at: { event: 1 } } : undefined));
    const { runner } = await setup(provider(), { guarded: true, runner: { streamIdleTimeoutMs: Infinity } });
    let settled = false;
    const sent = runner.send("conv-no-bound", { id: "m1", content: "pay acme" }).finally(() => (settled = true));
    await provider().waitForHold(1, { timeoutMs: 20_000 });
    await new Promise((r) => setTimeout(r, 2_000));
    expect(settled).toBe(false);
    provider().cutNow(1, "reset");
    await expect(sent).resolves.toMatchObject({ status: "answered" });
  });
});
