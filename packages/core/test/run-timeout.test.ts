import { afterEach, describe, expect, it, vi } from "vitest";
import { z } from "zod";
import {
  DEFAULT_RUN_TIMEOUT_MS,
  Dispatcher,
  InFlightElsewhereError,
  MemoryLedger,
  ToolError,
  defineTool,
  effectOf,
  retryableOf,
  type DispatchEvent,
  type Ledger,
  type ToolRunContext,
} from "../src/index.js";
import { manualClock, recordingLogger, unavailable } from "./helpers.js";

/** A promise the test settles: a downstream that answers when told to, or never. */
function gate<T = void>() {
  let open!: (value: T) => void;
  let fail!: (error: unknown) => void;
  const promise = new Promise<T>((resolve, reject) => {
    open = resolve;
    fail = reject;
  });
  return { promise, open, fail };
}

/** Poll `check` until it holds (generous bound, for a loaded machine); no timing is asserted. */
async function eventually(check: () => Promise<boolean> | boolean, what: string, boundMs = 20_000): Promise<void> {
  const until = Date.now() + boundMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`not within ${boundMs} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/**
 * A keyed downstream (mock-payments' rules, EFFECT-3, EFFECT-7): one effect per key; a key whose
 * first request is still in progress is refused (409), a finished one answered with its result.
 * `hold` makes a request wait for the test before it is performed.
 */
function keyedDownstream() {
  const effects: string[] = [];
  const byKey = new Map<string, { done: boolean; result?: { paymentId: string } }>();
  const holds: ReturnType<typeof gate<void>>[] = [];
  const seen: { key: string; signal: AbortSignal }[] = [];
  let hold = true;
  const tool = defineTool({
    name: "pay",
    effect: "keyed_write",
    input: z.object({ to: z.string() }),
    async run(_args, ctx: ToolRunContext) {
      seen.push({ key: ctx.idempotencyKey, signal: ctx.signal });
      const known = byKey.get(ctx.idempotencyKey);
      if (known?.done === true) return known.result!;
      if (known !== undefined) throw new ToolError("409: a request with this Idempotency-Key is in progress", { disposition: "not_performed" });
      byKey.set(ctx.idempotencyKey, { done: false });
      if (hold) {
        const g = gate();
        holds.push(g);
        await g.promise; // a downstream that ignores the signal, as one that never answers does
      }
      effects.push(ctx.idempotencyKey);
      const result = { paymentId: `pay_${effects.length}` };
      byKey.set(ctx.idempotencyKey, { done: true, result });
      return result;
    },
  });
  return { tool, effects, holds, seen, stopHolding: () => void (hold = false) };
}

const context = (conversationId: string) => ({ conversationId, turnIndex: 0 });
const call = { name: "pay", input: { to: "acme" } };

afterEach(() => {
  vi.restoreAllMocks();
});

describe("DISPATCH-18 a tool run is bounded (runTimeoutMs)", () => {
  it("DISPATCH-18 a run that never settles: the dispatch answers in_flight_elsewhere at the bound, its signal aborts, its lease is no longer renewed and lapses", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    let renewalsAfterAnswer = 0;
    let answered = false;
    const renew = ledger.renew.bind(ledger);
    ledger.renew = (...args: Parameters<MemoryLedger["renew"]>) => {
      if (answered) renewalsAfterAnswer += 1;
      return renew(...args);
    };
    let signal: AbortSignal | undefined;
    const tool = defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string() }),
      run: (_args, ctx) => {
        signal = ctx.signal;
        return new Promise(() => {});
      },
    });
    const events: DispatchEvent[] = [];
    const { logger, warnings } = recordingLogger();
    const d = new Dispatcher({ tools: [tool], ledger, leaseMs: 60, runTimeoutMs: 200, logger, onEvent: (e) => events.push(e) });
    const error = await d.turn(context("c-never")).dispatch(call).catch((e: unknown) => e);
    answered = true;
    expect(error).toBeInstanceOf(InFlightElsewhereError);
    expect(error).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 200, waitedMs: 200 });
    expect((error as Error).message).toContain("did not settle within 200 ms (runTimeoutMs)");
    expect(effectOf(error)).toBe("possibly");
    expect(retryableOf(error)).toBe("same_message");
    expect(signal?.aborted).toBe(true);
    expect(signal?.reason).toMatchObject({ name: "TimeoutError", message: "the run did not settle within 200 ms (runTimeoutMs)" });
    expect(events.find((e) => e.type === "run_timed_out")).toMatchObject({ runTimeoutMs: 200, fence: 1 });
    expect(warnings.some((w) => w.message.includes("runTimeoutMs"))).toBe(true);
    const key = d.keyFor(call, context("c-never"));
    // Not written: the run may still settle.
    expect((await ledger.lookup(key))?.state).toBe("in_flight");
    // Several renewal periods pass (more under load, which only makes this stricter): none is sent.
    await new Promise((r) => setTimeout(r, 300));
    expect(renewalsAfterAnswer).toBe(0);
    clock.advance(61);
    expect((await ledger.listExpiredInFlight({ limit: 10 })).map((r) => r.key)).toEqual([key]);
  });

  it("DISPATCH-18 a run that settles after the bound is recorded under its own fence; a re-send replays it, performed once", async () => {
    const down = keyedDownstream();
    const ledger = new MemoryLedger();
    const d = new Dispatcher({ tools: [down.tool], ledger, runTimeoutMs: 100 });
    const error = await d.turn(context("c-late")).dispatch(call).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 100 });
    const key = d.keyFor(call, context("c-late"));
    down.holds[0]!.open();
    await eventually(async () => (await ledger.lookup(key))?.state === "completed", "the late run's completion recorded");
    expect(await ledger.lookup(key)).toMatchObject({ state: "completed", fence: 1, result: '{"paymentId":"pay_1"}' });
    const again = await d.turn(context("c-late")).dispatch(call);
    expect(again).toMatchObject({ replayed: true, result: { paymentId: "pay_1" } });
    expect(down.effects).toEqual([key]);
  });

  it("DISPATCH-18 a run that fails definitely after the bound is recorded failed; a re-send replays the failure", async () => {
    const g = gate();
    const tool = defineTool({
      name: "pay",
      effect: "unkeyed_write",
      input: z.object({ to: z.string() }),
      run: async () => {
        await g.promise;
        throw new ToolError("402: card declined", { disposition: "definite" });
      },
    });
    const ledger = new MemoryLedger();
    const d = new Dispatcher({ tools: [tool], ledger, runTimeoutMs: 50, allowVolatileLedgerForUnkeyedWrites: true });
    await expect(d.turn(context("c-late-fail")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    g.open();
    const key = d.keyFor(call, context("c-late-fail"));
    await eventually(async () => (await ledger.lookup(key))?.state === "failed", "the late failure recorded");
    await expect(d.turn(context("c-late-fail")).dispatch(call)).rejects.toMatchObject({ code: "tool_failed", replayed: true });
  });

  it("DISPATCH-18 a run that settles exactly at the bound is either answered or left and recorded: never both, never lost, performed once", async () => {
    const BOUND = 40;
    for (const offset of [-2, -1, 0, 0, 1, 2]) {
      const effects: number[] = [];
      const tool = defineTool({
        name: "pay",
        effect: "keyed_write",
        input: z.object({ to: z.string() }),
        run: () =>
          new Promise((resolve) =>
            setTimeout(() => {
              effects.push(1);
              resolve({ ok: offset });
            }, BOUND + offset),
          ),
      });
      const ledger = new MemoryLedger();
      const d = new Dispatcher({ tools: [tool], ledger, runTimeoutMs: BOUND });
      const conversation = `c-edge-${offset}-${Math.random().toString(36).slice(2)}`;
      const first = await d.turn(context(conversation)).dispatch(call).then(
        (outcome) => ({ outcome }),
        (error: unknown) => ({ error }),
      );
      const key = d.keyFor(call, context(conversation));
      if ("error" in first) expect(first.error, `offset ${offset}`).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: BOUND });
      else expect(first.outcome, `offset ${offset}`).toMatchObject({ replayed: false, result: { ok: offset } });
      await eventually(async () => (await ledger.lookup(key))?.state === "completed", `offset ${offset}: the row completed`);
      await expect(d.turn(context(conversation)).dispatch(call), `offset ${offset}`).resolves.toMatchObject({ replayed: true, result: { ok: offset } });
      expect(effects, `offset ${offset}`).toEqual([1]);
    }
  });

  it("DISPATCH-18 a take-over re-runs under the same key while the first run is still pending (409 in progress): released as may-have-happened, then both settle, performed once", async () => {
    const down = keyedDownstream();
    const ledger = new MemoryLedger();
    const { logger, warnings } = recordingLogger();
    const d = new Dispatcher({ tools: [down.tool], ledger, leaseMs: 150, runTimeoutMs: 50, waitMs: 20_000, pollMs: 10, logger });
    const key = d.keyFor(call, context("c-take"));
    await expect(d.turn(context("c-take")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    // The re-send waits on the live row until its lease (no longer renewed) lapses, then takes it
    // over: the downstream refuses the same key while the first request is in progress (EFFECT-7).
    const second = await d.turn(context("c-take")).dispatch(call).catch((e: unknown) => e);
    expect(second).toMatchObject({ code: "claim_released", effectMayHaveHappened: true });
    expect(effectOf(second)).toBe("possibly");
    expect(down.seen.map((s) => s.key)).toEqual([key, key]);
    // The first run now settles: its completion under fence 1 is refused (the row was taken over) and changes nothing.
    down.holds[0]!.open();
    await eventually(() => warnings.some((w) => w.message.includes("settled after runTimeoutMs")), "the late record refused");
    expect(await ledger.lookup(key)).toMatchObject({ state: "released" });
    // The next re-send re-runs under the same key and gets the downstream's stored answer.
    await expect(d.turn(context("c-take")).dispatch(call)).resolves.toMatchObject({ replayed: false, result: { paymentId: "pay_1" } });
    expect(down.effects).toEqual([key]);
    expect(await ledger.lookup(key)).toMatchObject({ state: "completed", fence: 3 });
  });

  it("DISPATCH-18 a take-over run and the timed-out first run both pending, both then settle: the take-over's completion stands, performed once", async () => {
    // A downstream without the 409: the second request waits on the first (a keyed API that serialises by key).
    const first = gate<{ paymentId: string }>();
    let calls = 0;
    const effects: string[] = [];
    const tool = defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string() }),
      run: async (_args, ctx) => {
        calls += 1;
        const result = await first.promise;
        if (!effects.includes(ctx.idempotencyKey)) effects.push(ctx.idempotencyKey);
        return result;
      },
    });
    const ledger = new MemoryLedger();
    const { logger, warnings } = recordingLogger();
    const d = new Dispatcher({ tools: [tool], ledger, leaseMs: 150, runTimeoutMs: 50, waitMs: 20_000, pollMs: 10, logger });
    const key = d.keyFor(call, context("c-both"));
    await expect(d.turn(context("c-both")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    const d2 = new Dispatcher({ tools: [tool], ledger, leaseMs: 60_000, runTimeoutMs: 60_000, waitMs: 20_000, pollMs: 10 });
    const second = d2.turn(context("c-both")).dispatch(call);
    await eventually(() => calls === 2, "the take-over's run started");
    expect((await ledger.lookup(key))?.fence).toBe(2);
    first.open({ paymentId: "pay_1" });
    await expect(second).resolves.toMatchObject({ replayed: false, result: { paymentId: "pay_1" } });
    await eventually(() => warnings.some((w) => w.message.includes("settled after runTimeoutMs")), "the first run's late record refused");
    expect(await ledger.lookup(key)).toMatchObject({ state: "completed", fence: 2 });
    expect(effects).toEqual([key]);
  });

  it("DISPATCH-18 an unkeyed_write that never settles: after its lease lapses a re-send is answered outcome_unknown (LEDGER-7), never re-run", async () => {
    const clock = manualClock();
    const ledger = new MemoryLedger({ now: clock.now });
    let runs = 0;
    const tool = defineTool({
      name: "pay",
      effect: "unkeyed_write",
      input: z.object({ to: z.string() }),
      run: () => {
        runs += 1;
        return new Promise(() => {});
      },
    });
    const d = new Dispatcher({ tools: [tool], ledger, leaseMs: 1_000, runTimeoutMs: 50, allowVolatileLedgerForUnkeyedWrites: true });
    await expect(d.turn(context("c-unkeyed")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 50 });
    clock.advance(1_001);
    await expect(d.turn(context("c-unkeyed")).dispatch(call)).rejects.toMatchObject({ code: "outcome_unknown" });
    expect(runs).toBe(1);
  });

  it("DISPATCH-18 the bound fires after the claim was sent again (DISPATCH-16): answered at the bound, the claim id retired without releasing the row, and the late run still completes it", async () => {
    const down = keyedDownstream();
    const base = new MemoryLedger();
    let faults = ["lost"];
    const retired: { release: boolean | undefined }[] = [];
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      claim: async (...args: Parameters<MemoryLedger["claim"]>) => {
        const fault = faults.shift();
        const result = await base.claim(...args);
        if (fault === "lost") throw unavailable();
        return result;
      },
      retire: async (...args: Parameters<MemoryLedger["retire"]>) => {
        retired.push({ release: args[2]?.release });
        return base.retire(...args);
      },
    });
    const d = new Dispatcher({ tools: [down.tool], ledger, runTimeoutMs: 100, pollMs: 5 });
    const key = d.keyFor(call, context("c-claim-again"));
    await expect(d.turn(context("c-claim-again")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 100 });
    await eventually(() => retired.length === 1, "the claim id retired");
    expect(retired).toEqual([{ release: false }]);
    expect((await base.lookup(key))?.state).toBe("in_flight");
    faults = [];
    down.holds[0]!.open();
    await eventually(async () => (await base.lookup(key))?.state === "completed", "the late run's completion recorded");
    await expect(d.turn(context("c-claim-again")).dispatch(call)).resolves.toMatchObject({ replayed: true, result: { paymentId: "pay_1" } });
    expect(down.effects).toEqual([key]);
  });

  it("DISPATCH-18 a read is bounded too: in_flight_elsewhere (a read's message), its signal aborted, nothing claimed", async () => {
    let signal: AbortSignal | undefined;
    const read = defineTool({
      name: "balance",
      effect: "read",
      input: z.object({}),
      run: (_args, ctx) => {
        signal = ctx.signal;
        return new Promise(() => {});
      },
    });
    const ledger = new MemoryLedger();
    const d = new Dispatcher({ tools: [read], ledger, runTimeoutMs: 30 });
    const error = await d.turn(context("c-read")).dispatch({ name: "balance", input: {} }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 30 });
    expect((error as Error).message).toContain("the read did not settle within 30 ms");
    expect(signal?.aborted).toBe(true);
    expect(await ledger.listRows({ limit: 10 })).toMatchObject({ rows: [] });
  });

  it("DISPATCH-18 a tool's own runTimeoutMs overrides the dispatcher's, either way", async () => {
    const slow = (name: string, runTimeoutMs: number | undefined) =>
      defineTool({
        name,
        effect: "keyed_write",
        input: z.object({ to: z.string() }),
        ...(runTimeoutMs !== undefined ? { runTimeoutMs } : {}),
        run: () => new Promise((r) => setTimeout(() => r({ done: true }), 150)),
      });
    const d = new Dispatcher({ tools: [slow("patient", Infinity), slow("hasty", 20)], ledger: new MemoryLedger(), runTimeoutMs: 50 });
    await expect(d.turn(context("c-override")).dispatch({ name: "patient", input: { to: "a" } })).resolves.toMatchObject({ result: { done: true } });
    await expect(new Dispatcher({ tools: [slow("hasty", 20)], ledger: new MemoryLedger(), runTimeoutMs: Infinity }).turn(context("c-override")).dispatch({ name: "hasty", input: { to: "a" } })).rejects.toMatchObject({
      code: "in_flight_elsewhere",
      runTimeoutMs: 20,
    });
  });

  it("DISPATCH-18 the default bound is DEFAULT_RUN_TIMEOUT_MS (300 000 ms): a pending run holds a timer for it that keeps the process alive, a settled one does not; Infinity sets none", async () => {
    expect(DEFAULT_RUN_TIMEOUT_MS).toBe(300_000);
    const refedTimers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;
    const set = vi.spyOn(globalThis, "setTimeout");
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const tool = defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string() }),
      run: async () => {
        await gate;
        return { ok: true };
      },
    });
    const d = new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), leaseMs: 600_000 });
    const pending = d.turn(context("c-default")).dispatch(call);
    await eventually(async () => set.mock.calls.some((c) => c[1] === DEFAULT_RUN_TIMEOUT_MS), "the bound's timer armed");
    const during = refedTimers();
    open();
    await pending;
    expect(during - refedTimers(), "the settled run's bound no longer keeps the process alive").toBeGreaterThanOrEqual(1);
    set.mockClear();
    await new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), runTimeoutMs: Infinity }).turn(context("c-default-inf")).dispatch(call);
    expect(set.mock.calls.filter((c) => c[1] === DEFAULT_RUN_TIMEOUT_MS)).toEqual([]);
  });

  it("DISPATCH-18 a bound that is not a whole number of ms from 1 to 2^31 - 1 (or Infinity) is refused: invalid_argument for the option, invalid_tool_definition for a tool", () => {
    const tool = defineTool({ name: "pay", effect: "keyed_write", input: z.object({ to: z.string() }), run: async () => null });
    for (const bad of [0, -5, 1.5, Number.NaN, -Infinity, 2 ** 31, "300", null]) {
      expect(() => new Dispatcher({ tools: [tool], ledger: new MemoryLedger(), runTimeoutMs: bad as number }), String(bad)).toThrow(
        expect.objectContaining({ code: "invalid_argument", field: "options.runTimeoutMs" }) as Error,
      );
      expect(() => new Dispatcher({ tools: [{ ...tool, runTimeoutMs: bad as number }], ledger: new MemoryLedger() }), String(bad)).toThrow(
        expect.objectContaining({ code: "invalid_tool_definition", message: expect.stringContaining("runTimeoutMs") as string }) as Error,
      );
    }
    expect(() => new Dispatcher({ tools: [{ ...tool, runTimeoutMs: 2 ** 31 - 1 }], ledger: new MemoryLedger(), runTimeoutMs: 1 })).not.toThrow();
  });
});
