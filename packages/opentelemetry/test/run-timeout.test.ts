import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, defineTool } from "@dispatch-once/core";
import { ATTR, METRIC, SPAN } from "../src/index.js";
import { sdk } from "./otel-sdk.js";

const RUN_TIMED_OUT = "dispatch_once.run_timed_out";

/** A promise the test settles: a downstream that answers when told to. */
function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** Poll `check` until it holds (generous bound, for a loaded machine); no timing is asserted. */
async function eventually(check: () => boolean, what: string, boundMs = 20_000): Promise<void> {
  const until = Date.now() + boundMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`not within ${boundMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** A keyed write whose every run waits for the test to open its gate. */
function heldTool() {
  const gates: ReturnType<typeof gate>[] = [];
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ amount: z.number() }),
    async run() {
      const g = gate();
      gates.push(g);
      await g.promise;
      return { id: `pay_${gates.length}` };
    },
  });
  return { tool, gates };
}

/** The dispatcher's warnings, kept for the test rather than printed. */
function quietLogger() {
  const warnings: string[] = [];
  return { warnings, logger: { warn: (message: string) => void warnings.push(message) } };
}

const turn0 = { conversationId: "conv-rto", turnIndex: 0 };
const call = { name: "send_payment", input: { amount: 1 } };

let cleanup: (() => Promise<unknown>) | undefined;
afterEach(async () => {
  await cleanup?.();
  cleanup = undefined;
});

/**
 * Two dispatchers on one ledger whose clock the test moves: `first` bounds its runs at
 * `runTimeoutMs`, `takeover` takes the key over once `lapse()` has moved the clock past the
 * first claim's lease. Both report to one telemetry.
 */
function racingDispatchers(runTimeoutMs: number) {
  const s = sdk();
  cleanup = s.shutdown;
  let now = 1_700_000_000_000;
  const ledger = new MemoryLedger({ now: () => now });
  const held = heldTool();
  const { logger, warnings } = quietLogger();
  const first = new Dispatcher({ tools: [held.tool], ledger, runTimeoutMs, logger, onEvent: s.telemetry.onDispatchEvent });
  const takeover = new Dispatcher({ tools: [held.tool], ledger, runTimeoutMs: Infinity, onEvent: s.telemetry.onDispatchEvent });
  // The first claim's lease (no longer renewed once its run is given up on) lapses on the ledger's clock.
  const lapse = () => void (now += 10 * 60_000);
  return { s, held, warnings, first, takeover, lapse };
}

describe("a run that outlived its bound (OTEL-1, DISPATCH-18)", () => {
  it("OTEL-1 a run past runTimeoutMs that settles later: its span has dispatch_once.run_timed_out with the bound, stays open, then ends with the recorded outcome; dispatch_once.run_timeouts counts 1 by tool name", async () => {
    const s = sdk();
    cleanup = s.shutdown;
    const held = heldTool();
    const { logger } = quietLogger();
    const dispatcher = new Dispatcher({ tools: [held.tool], ledger: new MemoryLedger(), runTimeoutMs: 50, logger, onEvent: s.telemetry.onDispatchEvent });
    await expect(dispatcher.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 50 });
    // Given up on, not ended: the run may still settle and be recorded under its own fence.
    expect(s.spans.getFinishedSpans()).toEqual([]);
    expect(await s.metric(METRIC.RUN_TIMEOUTS, { [ATTR.TOOL_NAME]: "send_payment" })).toBe(1);
    held.gates[0]!.open();
    await eventually(() => s.spans.getFinishedSpans().length === 1, "the late run's span ended");
    const [run] = s.spans.getFinishedSpans();
    expect(run!.name).toBe(SPAN.RUN);
    expect(run!.attributes).toMatchObject({ [ATTR.FENCE]: 1, [ATTR.OUTCOME]: "completed" });
    expect(run!.events.map((e) => e.name)).toEqual(["dispatch_once.run_started", RUN_TIMED_OUT, "dispatch_once.run_finished"]);
    expect(run!.events[1]!.attributes).toEqual({ [ATTR.RUN_TIMEOUT_MS]: 50 });
    expect(await s.metric(METRIC.RUN_TIMEOUTS)).toBe(1);
    expect(await s.metricShape(METRIC.RUN_TIMEOUTS)).toEqual({ unit: "{event}", attributeNames: [ATTR.TOOL_NAME] });
  });

  it("OTEL-4 a run that timed out, then its key taken over while it is still pending: the event is on the first fence's span only, never on the takeover's", async () => {
    const { s, held, warnings, first, takeover, lapse } = racingDispatchers(50);
    expect(takeover.keyFor(call, turn0)).toBe(first.keyFor(call, turn0));
    await expect(first.turn(turn0).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    lapse();
    const second = takeover.turn(turn0).dispatch(call);
    await eventually(() => held.gates.length === 2, "the takeover's run started");
    held.gates[0]!.open(); // the first run settles late: its write under fence 1 is refused
    held.gates[1]!.open();
    await expect(second).resolves.toMatchObject({ replayed: false });
    // The first run's late completion under fence 1 was refused (record_failed): it must not end or mark the takeover's span.
    await eventually(() => warnings.some((w) => w.includes("settled after runTimeoutMs could not be recorded")), "the first run's late record refused");
    await eventually(() => s.spans.getFinishedSpans().length === 2, "both spans ended");
    const byFence = new Map(s.spans.getFinishedSpans().map((x) => [x.attributes[ATTR.FENCE], x]));
    expect(byFence.get(1)!.events.filter((e) => e.name === RUN_TIMED_OUT).map((e) => e.attributes)).toEqual([{ [ATTR.RUN_TIMEOUT_MS]: 50 }]);
    expect(byFence.get(2)!.attributes).toMatchObject({ [ATTR.TAKEOVER]: true, [ATTR.OUTCOME]: "completed" });
    expect(byFence.get(2)!.events.map((e) => e.name)).not.toContain(RUN_TIMED_OUT);
  });

  it("OTEL-1 OTEL-4 a run whose key was taken over before it timed out: its late run_timed_out is counted and put on its own span (fence 1), which stays open until its refused write, never on the takeover's", async () => {
    // A bound long enough for the takeover to claim first; checked below, not assumed.
    const { s, held, warnings, first, takeover, lapse } = racingDispatchers(2_000);
    let firstSettled = false;
    const firstDispatch = first.turn(turn0).dispatch(call).finally(() => (firstSettled = true));
    await eventually(() => held.gates.length === 1, "the first run started");
    lapse();
    const second = takeover.turn(turn0).dispatch(call);
    await eventually(() => held.gates.length === 2, "the takeover's run started");
    expect(firstSettled, "precondition: the takeover claimed before the first run's bound").toBe(false);
    // The first run's bound passes while the takeover's span (fence 2) is the key's open one.
    await expect(firstDispatch).rejects.toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 2_000 });
    held.gates[1]!.open();
    await expect(second).resolves.toMatchObject({ replayed: false });
    held.gates[0]!.open();
    // The first run's late completion under fence 1 was refused (record_failed): it must not end or mark the takeover's span.
    await eventually(() => warnings.some((w) => w.includes("settled after runTimeoutMs could not be recorded")), "the first run's late record refused");
    await eventually(() => s.spans.getFinishedSpans().length === 2, "both spans ended");
    const byFence = new Map(s.spans.getFinishedSpans().map((x) => [x.attributes[ATTR.FENCE], x]));
    expect(byFence.get(2)!.attributes).toMatchObject({ [ATTR.TAKEOVER]: true, [ATTR.OUTCOME]: "completed" });
    expect(byFence.get(2)!.events.map((e) => e.name)).not.toContain(RUN_TIMED_OUT);
    // The first span outlived the takeover's claim: its bound passed on it, and its refused write ended it (not_recorded).
    expect(byFence.get(1)!.events.filter((e) => e.name === RUN_TIMED_OUT).map((e) => e.attributes)).toEqual([{ [ATTR.RUN_TIMEOUT_MS]: 2_000 }]);
    expect(byFence.get(1)!.attributes).toMatchObject({ [ATTR.OUTCOME]: "not_recorded", [ATTR.RECORD_WRITE]: "complete", [ATTR.RECORD_OUTCOME]: "completed" });
    expect(await s.metric(METRIC.RUN_TIMEOUTS, { [ATTR.TOOL_NAME]: "send_payment" })).toBe(1);
  });
});
