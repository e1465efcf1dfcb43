import { SpanStatusCode } from "@opentelemetry/api";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, OutcomeUnknownError, defineTool, type Ledger } from "@dispatch-once/core";
import type { RunnerEvent } from "@dispatch-once/runner";
import { ATTR, METRIC, SPAN, dispatchTelemetry } from "../src/index.js";
import { sdk } from "./otel-sdk.js";

const turn0 = { conversationId: "conv-otel", turnIndex: 0 };

function durable(ledger: MemoryLedger): Ledger {
  return Object.assign(Object.create(ledger), { capabilities: { ...ledger.capabilities, durability: "durable" as const } }) as Ledger;
}

let cleanup: (() => Promise<unknown>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

describe("dispatcher events -> spans and metrics (OTEL-1)", () => {
  it("OTEL-1 a claimed run is one span ending in its ledger outcome; a replay and claims are counted", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    let runs = 0;
    const tool = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: `pay_${++runs}` }) });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), onEvent: s.telemetry.onDispatchEvent });
    const call = { name: "send_payment", input: { amount: 1 } };
    const first = await dispatcher.turn(turn0).dispatch(call);
    await dispatcher.turn(turn0).dispatch(call);

    const finished = s.spans.getFinishedSpans();
    expect(finished.map((x) => x.name)).toEqual([SPAN.RUN]);
    expect(finished[0]!.attributes).toMatchObject({
      [ATTR.TOOL_NAME]: "send_payment",
      [ATTR.KEY]: first.key,
      [ATTR.ORDINAL]: 0,
      [ATTR.FENCE]: 1,
      [ATTR.TAKEOVER]: false,
      [ATTR.OUTCOME]: "completed",
    });
    expect(finished[0]!.events.map((e) => e.name)).toEqual(["dispatch_once.run_started", "dispatch_once.run_finished"]);
    expect(await s.metric(METRIC.CLAIMS, { [ATTR.TOOL_NAME]: "send_payment" })).toBe(1);
    expect(await s.metric(METRIC.REPLAYS, { [ATTR.REPLAY_STATE]: "completed" })).toBe(1);
    expect(await s.metric(METRIC.OUTCOMES, { [ATTR.OUTCOME]: "completed" })).toBe(1);
    expect(await s.metric(METRIC.RUN_DURATION, { [ATTR.RUN_OK]: true })).toBe(1);
    expect(runs).toBe(1);
  });

  it("OTEL-1 unknowns and reconciliations are counted; the run span carries the probe's answer and ends in error", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    let verdict: "performed" | "not_performed" = "not_performed";
    const tool = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ n: z.number() }),
      run: () => {
        throw new Error("socket hang up");
      },
      reconcile: () => (verdict === "performed" ? { outcome: "performed", result: { id: "inv_1" } } : { outcome: "not_performed" }),
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: durable(new MemoryLedger()), onEvent: s.telemetry.onDispatchEvent });
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { n: 1 } })).rejects.toBeInstanceOf(OutcomeUnknownError);
    verdict = "performed";
    await expect(dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { n: 2 } })).resolves.toMatchObject({ result: { id: "inv_1" } });

    const [unknown, settled] = s.spans.getFinishedSpans();
    expect(unknown!.attributes[ATTR.OUTCOME]).toBe("unknown");
    expect(unknown!.status.code).toBe(2); // ERROR
    expect(unknown!.events.find((e) => e.name === "dispatch_once.reconciled")?.attributes).toMatchObject({
      [ATTR.RECONCILE_CAUSE]: "tool_error",
      [ATTR.RECONCILE_VERDICT]: "not_performed",
      [ATTR.RECONCILE_SETTLED]: "unknown",
    });
    expect(settled!.attributes[ATTR.OUTCOME]).toBe("completed");
    expect(await s.metric(METRIC.UNKNOWNS)).toBe(1);
    expect(await s.metric(METRIC.RECONCILIATIONS)).toBe(2);
    expect(await s.metric(METRIC.RECONCILIATIONS, { [ATTR.RECONCILE_SETTLED]: "completed" })).toBe(1);
    expect(await s.metric(METRIC.RUN_DURATION, { [ATTR.RUN_OK]: false })).toBe(2);
  });

  it("OTEL-2 metric points never carry a key or a conversation id (bounded cardinality)", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const tool = defineTool({ name: "t", effect: "keyed_write", input: z.object({ n: z.number() }), run: () => 1 });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), onEvent: s.telemetry.onDispatchEvent });
    for (let n = 0; n < 5; n++) await dispatcher.turn(turn0).dispatch({ name: "t", input: { n } });
    expect(await s.metric(METRIC.CLAIMS)).toBe(5);
    expect(await s.metric(METRIC.CLAIMS, { [ATTR.TOOL_NAME]: "t", [ATTR.TAKEOVER]: false })).toBe(5);
  });

  it("OTEL-2 every instrument's points carry only its bounded attributes (the README's table), never a key: claims, replays, outcomes, unknowns, reconciliations, durations", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    let verdict: "performed" | "not_performed" = "not_performed";
    const invoice = defineTool({
      name: "create_invoice",
      effect: "unkeyed_write",
      input: z.object({ n: z.number() }),
      run: () => {
        throw new Error("socket hang up");
      },
      reconcile: () => (verdict === "performed" ? { outcome: "performed", result: { id: "inv_1" } } : { outcome: "not_performed" }),
    });
    const pay = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: "pay_1" }) });
    const dispatcher = new Dispatcher({ tools: [invoice, pay], ledger: durable(new MemoryLedger()), onEvent: s.telemetry.onDispatchEvent });
    const keys: string[] = [];
    await dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { n: 1 } }).catch(() => undefined);
    keys.push(dispatcher.keyFor({ name: "create_invoice", input: { n: 1 } }, turn0));
    verdict = "performed";
    keys.push((await dispatcher.turn(turn0).dispatch({ name: "create_invoice", input: { n: 2 } })).key);
    // An on-demand probe of the unknown row (RECON-9): reported, counted.
    await dispatcher.reconcile(keys[0]!);
    keys.push((await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } })).key);
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    const allowed: Record<string, string[]> = {
      [METRIC.CLAIMS]: [ATTR.TOOL_NAME, ATTR.TAKEOVER],
      [METRIC.REPLAYS]: [ATTR.TOOL_NAME, ATTR.REPLAY_STATE, ATTR.EFFECT],
      [METRIC.OUTCOMES]: [ATTR.TOOL_NAME, ATTR.OUTCOME, ATTR.EFFECT],
      [METRIC.UNKNOWNS]: [ATTR.TOOL_NAME],
      [METRIC.RECONCILIATIONS]: [ATTR.TOOL_NAME, ATTR.RECONCILE_CAUSE, ATTR.RECONCILE_VERDICT, ATTR.RECONCILE_SETTLED],
      [METRIC.RUN_DURATION]: [ATTR.TOOL_NAME, ATTR.RUN_OK],
    };
    for (const [name, attributes] of Object.entries(allowed)) {
      const shape = await s.metricShape(name);
      expect(shape.attributeNames.length, `${name} was recorded`).toBeGreaterThan(0);
      expect(shape.attributeNames.filter((a) => !attributes.includes(a)), `${name}'s points carry only ${attributes.join(", ")}`).toEqual([]);
    }
    expect(await s.metric(METRIC.RECONCILIATIONS)).toBe(3);
    for (const key of keys) expect(await s.metric(METRIC.RECONCILIATIONS, { [ATTR.KEY]: key })).toBe(0);
  });

  it("OTEL-3 a broken meter or tracer never changes a dispatch", async () => {
    const broken = new Proxy({}, { get: () => () => { throw new Error("exporter down"); } });
    const counterOk = { add: () => undefined, record: () => undefined };
    const meter = { createCounter: () => counterOk, createHistogram: () => counterOk } as never;
    const telemetry = dispatchTelemetry({ tracer: broken as never, meter });
    const tool = defineTool({ name: "t", effect: "keyed_write", input: z.object({}), run: () => 7 });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), onEvent: telemetry.onDispatchEvent });
    await expect(dispatcher.turn(turn0).dispatch({ name: "t", input: {} })).resolves.toMatchObject({ result: 7 });
  });

  it("OTEL-3 without an SDK the global API is a no-op: nothing recorded, the dispatch unchanged", async () => {
    const telemetry = dispatchTelemetry();
    const tool = defineTool({ name: "t", effect: "keyed_write", input: z.object({}), run: () => 7 });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), onEvent: telemetry.onDispatchEvent });
    await expect(dispatcher.turn(turn0).dispatch({ name: "t", input: {} })).resolves.toMatchObject({ result: 7 });
    telemetry.endAll();
  });
});

describe("a released run says whether its effect may have happened (OTEL-1)", () => {
  it("OTEL-1 a run released after a refusal that did not perform it ends released, its span saying whether the call as a whole may have happened: no on a first durable run, yes in a resumed turn", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const { ToolError } = await import("@dispatch-once/core");
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      input: z.object({ amount: z.number() }),
      run: () => {
        throw new ToolError("503 before accepting", { disposition: "not_performed" });
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: durable(new MemoryLedger()), onEvent: s.telemetry.onDispatchEvent });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } }).catch(() => undefined);
    // A resumed turn (TURN-15): an earlier holder's run may still perform the call after this release.
    await dispatcher.turn({ ...turn0, turnIndex: 1, resumed: true }).dispatch({ name: "send_payment", input: { amount: 2 } }).catch(() => undefined);
    const runs = s.spans.getFinishedSpans();
    expect(runs.map((r) => r.attributes[ATTR.OUTCOME])).toEqual(["released", "released"]);
    expect(runs.map((r) => r.attributes["dispatch_once.released.effect_may_have_happened"])).toEqual([false, true]);
  });
});

describe("a record sent again (OTEL-1, DISPATCH-10)", () => {
  it("OTEL-1 a completion that met ledger_unavailable and was sent again is a record_retry event on the run's span, which ends completed", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const { LedgerUnavailableError } = await import("@dispatch-once/core");
    const base = new MemoryLedger();
    let down = 1;
    const flaky: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      complete: (key: string, fence: number, result: string) =>
        down-- > 0 ? Promise.reject(new LedgerUnavailableError("connection reset")) : base.complete(key, fence, result),
    });
    const tool = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: "pay_1" }) });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: flaky, pollMs: 1, onEvent: s.telemetry.onDispatchEvent });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    const [run] = s.spans.getFinishedSpans();
    expect(run!.attributes).toMatchObject({ [ATTR.OUTCOME]: "completed" });
    expect(run!.events.find((e) => e.name === "dispatch_once.record_retry")?.attributes).toEqual({ [ATTR.RECORD_WRITE]: "complete", [ATTR.ATTEMPT]: 1 });
  });
});

describe("a ledger out of reach is counted (OTEL-1, DISPATCH-10, DISPATCH-16)", () => {
  it("OTEL-4 a run whose effect happened and whose record never reached the ledger ends its span at once, not_recorded, naming the outcome it could not record", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const { LedgerUnavailableError } = await import("@dispatch-once/core");
    const base = new MemoryLedger();
    const down: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      complete: () => Promise.reject(new LedgerUnavailableError("connection reset")),
    });
    let paid = 0;
    const tool = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: `pay_${++paid}` }) });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: down, pollMs: 1, recordRetryMs: 5, onEvent: s.telemetry.onDispatchEvent });
    await expect(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } })).rejects.toMatchObject({ code: "ledger_unavailable" });
    expect(paid).toBe(1);
    // Exported now (a span still open is exported by nobody), and not as a clean run.
    const [run] = s.spans.getFinishedSpans();
    expect(run?.attributes).toMatchObject({ [ATTR.OUTCOME]: "not_recorded", [ATTR.RECORD_WRITE]: "complete", [ATTR.RECORD_OUTCOME]: "completed" });
    expect(run?.status).toMatchObject({ code: SpanStatusCode.ERROR });
    expect(await s.metric(METRIC.OUTCOMES, { [ATTR.OUTCOME]: "not_recorded" })).toBe(1);
  });


  it("OTEL-1 a claim and a record sent again after ledger_unavailable count in dispatch_once.ledger_retries by operation", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const { LedgerUnavailableError } = await import("@dispatch-once/core");
    const base = new MemoryLedger();
    let claimsDown = 2;
    let completesDown = 1;
    const flaky: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      claim: (request: Parameters<Ledger["claim"]>[0]) => (claimsDown-- > 0 ? Promise.reject(new LedgerUnavailableError("connection reset")) : base.claim(request)),
      complete: (key: string, fence: number, result: string) =>
        completesDown-- > 0 ? Promise.reject(new LedgerUnavailableError("connection reset")) : base.complete(key, fence, result),
    });
    const tool = defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ amount: z.number() }), run: () => ({ id: "pay_1" }) });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: flaky, pollMs: 1, onEvent: s.telemetry.onDispatchEvent });
    await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 1 } });
    expect(await s.metric(METRIC.LEDGER_RETRIES, { [ATTR.TOOL_NAME]: "send_payment", [ATTR.LEDGER_OPERATION]: "claim" })).toBe(2);
    expect(await s.metric(METRIC.LEDGER_RETRIES, { [ATTR.TOOL_NAME]: "send_payment", [ATTR.LEDGER_OPERATION]: "complete" })).toBe(1);
  });

  it("OTEL-4 a lost claim's late lease_lost, run_finished, record_retry, reconciled and record_failed stay off the span of the takeover that now holds its key", () => {
    const s = sdk();
    cleanup = s.shutdown;
    const run = { key: "k".repeat(32), toolName: "send_payment", ordinal: 0 };
    s.telemetry.onDispatchEvent({ type: "claimed", ...run, fence: 1, takeover: false });
    s.telemetry.onDispatchEvent({ type: "claimed", ...run, fence: 2, takeover: true });
    s.telemetry.onDispatchEvent({ type: "run_started", ...run });
    s.telemetry.onDispatchEvent({ type: "lease_lost", ...run, fence: 1, reason: "stale_claim" });
    s.telemetry.onDispatchEvent({ type: "run_finished", ...run, fence: 1, ok: false });
    s.telemetry.onDispatchEvent({ type: "record_retry", ...run, fence: 1, write: "complete", attempt: 1, error: "connection reset" });
    s.telemetry.onDispatchEvent({ type: "reconciled", ...run, fence: 1, cause: "lease_lost", verdict: "performed", settled: "completed" });
    s.telemetry.onDispatchEvent({ type: "record_failed", ...run, fence: 1, write: "complete", state: "completed", error: "stale claim" });
    s.telemetry.onDispatchEvent({ type: "recorded", ...run, state: "completed" });
    expect(s.spans.getFinishedSpans().map((x) => [x.attributes[ATTR.FENCE], x.attributes[ATTR.OUTCOME]])).toEqual([
      [1, "not_recorded"],
      [2, "completed"],
    ]);
    expect(s.spans.getFinishedSpans()[1]!.events.map((e) => e.name)).toEqual(["dispatch_once.run_started"]);
  });
});

describe("maxOpenSpans bounds the open runs, not fewer (OTEL-4, OTEL-5)", () => {
  it("OTEL-5 maxOpenSpans runs stay open until their outcome; one more claim ends the oldest, not_recorded, its effect may have happened", () => {
    const s = sdk({ maxOpenSpans: 2 });
    cleanup = s.shutdown;
    const run = (n: number) => ({ key: String(n).repeat(32), toolName: "send_payment", ordinal: 0 });
    const ended = () => s.spans.getFinishedSpans().map((x) => [x.attributes[ATTR.KEY], x.attributes[ATTR.OUTCOME], x.attributes[ATTR.EFFECT]]);
    s.telemetry.onDispatchEvent({ type: "claimed", ...run(1), fence: 1, takeover: false });
    s.telemetry.onDispatchEvent({ type: "claimed", ...run(2), fence: 1, takeover: false });
    // Two runs going, two allowed: neither is ended before its outcome.
    expect(ended()).toEqual([]);
    s.telemetry.onDispatchEvent({ type: "claimed", ...run(3), fence: 1, takeover: false });
    expect(ended()).toEqual([[run(1).key, "not_recorded", "may_have_happened"]]);
    s.telemetry.onDispatchEvent({ type: "recorded", ...run(2), state: "completed", effect: "happened" });
    s.telemetry.onDispatchEvent({ type: "recorded", ...run(3), state: "completed", effect: "happened" });
    expect(ended().slice(1)).toEqual([
      [run(2).key, "completed", "happened"],
      [run(3).key, "completed", "happened"],
    ]);
  });
});

describe("runner events -> turn spans and metrics (OTEL-1)", () => {
  const base = { at: 0, conversationId: "c1", turnIndex: 2 };
  it("OTEL-1 a turn with a cut-off attempt and a retry is one span with its attempts; retries and abandoned calls counted", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const events: RunnerEvent[] = [
      { ...base, attempt: 1, type: "attempt_started", messageId: "m1" },
      { ...base, attempt: 1, type: "call_abandoned", callId: "toolu_1", name: "send_payment", partialArguments: '{"amo' },
      { ...base, attempt: 1, type: "stream_failed", position: "mid_tool_use" as never, error: "reset" },
      { ...base, attempt: 1, type: "retry_scheduled", delayMs: 100 },
      { ...base, attempt: 2, type: "attempt_started", messageId: "m1" },
      { ...base, attempt: 2, type: "call_resolved", callId: "toolu_2", name: "send_payment", key: "k", replayed: false, ok: true },
      { ...base, attempt: 2, type: "turn_committed", committed: true, stopReason: "tool_use" },
    ];
    for (const e of events) s.telemetry.onRunnerEvent(e);
    const [turn] = s.spans.getFinishedSpans();
    expect(turn!.name).toBe(SPAN.TURN);
    expect(turn!.attributes).toMatchObject({ [ATTR.CONVERSATION_ID]: "c1", [ATTR.TURN_INDEX]: 2, [ATTR.TURN_OUTCOME]: "committed", [ATTR.STOP_REASON]: "tool_use" });
    expect(turn!.events.map((e) => e.name)).toEqual([
      "dispatch_once.attempt_started",
      "dispatch_once.call_abandoned",
      "dispatch_once.stream_failed",
      "dispatch_once.retry_scheduled",
      "dispatch_once.attempt_started",
      "dispatch_once.call_resolved",
    ]);
    expect(await s.metric(METRIC.ATTEMPTS)).toBe(2);
    expect(await s.metric(METRIC.RETRIES)).toBe(1);
    expect(await s.metric(METRIC.ABANDONED_CALLS, { [ATTR.TOOL_NAME]: "send_payment" })).toBe(1);
    expect(await s.metric(METRIC.TURNS, { [ATTR.TURN_OUTCOME]: "committed" })).toBe(1);
  });
});
