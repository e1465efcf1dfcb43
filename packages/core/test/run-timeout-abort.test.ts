import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, MemoryLedger, ToolError, defineTool, effectOf, type DispatchEvent } from "../src/index.js";

const context = (conversationId: string) => ({ conversationId, turnIndex: 0 });
const call = { name: "pay", input: { to: "acme" } };

async function eventually(check: () => Promise<boolean> | boolean, what: string): Promise<void> {
  const until = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`not within 20 s: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A run that honours its signal, as a fetch given it does: it rejects with the signal's reason. */
const honouring = (effect: "keyed_write" | "unkeyed_write", runs: string[]) =>
  defineTool({
    name: "pay",
    effect,
    input: z.object({ to: z.string() }),
    run: (_args, ctx) =>
      new Promise((_resolve, reject) => {
        runs.push(ctx.idempotencyKey);
        ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason as Error), { once: true });
      }),
  });

describe("DISPATCH-18 a run that honours the abort at its bound", () => {
  it("DISPATCH-18 an unkeyed_write aborted at its bound is recorded unknown (may have happened); the re-send is told outcome_unknown, never re-run", async () => {
    const runs: string[] = [];
    const ledger = new MemoryLedger();
    const events: DispatchEvent[] = [];
    const d = new Dispatcher({ tools: [honouring("unkeyed_write", runs)], ledger, runTimeoutMs: 100, allowVolatileLedgerForUnkeyedWrites: true, logger: { warn: () => {} }, onEvent: (e) => events.push(e) });
    const first = await d.turn(context("c-abort-u")).dispatch(call).catch((e: unknown) => e);
    expect(first).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 100 });
    const key = d.keyFor(call, context("c-abort-u"));
    await eventually(async () => (await ledger.lookup(key))?.state !== "in_flight", "the aborted run recorded");
    expect((await ledger.lookup(key))?.state).toBe("unknown");
    const again = await d.turn(context("c-abort-u")).dispatch(call).catch((e: unknown) => e);
    expect(again).toMatchObject({ code: "outcome_unknown" });
    expect(effectOf(again)).toBe("possibly");
    expect(runs).toHaveLength(1);
  });

  it("DISPATCH-18 a keyed_write aborted at its bound is released (may have happened); the re-send re-runs it under the same key", async () => {
    const runs: string[] = [];
    const ledger = new MemoryLedger();
    const d = new Dispatcher({ tools: [honouring("keyed_write", runs)], ledger, runTimeoutMs: 100, logger: { warn: () => {} } });
    await expect(d.turn(context("c-abort-k")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    const key = d.keyFor(call, context("c-abort-k"));
    await eventually(async () => (await ledger.lookup(key))?.state !== "in_flight", "the aborted run recorded");
    expect((await ledger.lookup(key))?.state).toBe("released");
    await expect(d.turn(context("c-abort-k")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    expect(runs).toEqual([key, key]);
  });

  it("DISPATCH-18 a run that throws (unknown disposition) after its bound, its probe never answering: the late record is still made, within a fresh bound (released, may have happened)", async () => {
    let fail!: () => void;
    const late = new Promise<void>((r) => (fail = r));
    let probes = 0;
    const tool = defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string() }),
      run: async () => {
        await late; // ignores its signal
        throw new ToolError("socket hang up", { disposition: "unknown" });
      },
      reconcile: () => {
        probes += 1;
        return new Promise(() => {});
      },
    });
    const ledger = new MemoryLedger();
    const d = new Dispatcher({ tools: [tool], ledger, runTimeoutMs: 100, logger: { warn: () => {} } });
    await expect(d.turn(context("c-late-probe")).dispatch(call)).rejects.toMatchObject({ code: "in_flight_elsewhere" });
    fail();
    const key = d.keyFor(call, context("c-late-probe"));
    await eventually(async () => (await ledger.lookup(key))?.state === "released", "the late throw recorded released after its probe's bound");
    expect(probes).toBe(1);
  });

  it("DISPATCH-18 a bound longer than the lease: the lease is renewed until the run settles, so a concurrent dispatch waits and is answered with the run's result (no take-over)", async () => {
    let finish!: () => void;
    const done = new Promise<void>((r) => (finish = r));
    const runs: string[] = [];
    const tool = defineTool({
      name: "pay",
      effect: "keyed_write",
      input: z.object({ to: z.string() }),
      run: async (_args, ctx) => {
        runs.push(ctx.idempotencyKey);
        await done;
        return { paid: true };
      },
    });
    const ledger = new MemoryLedger();
    const options = { tools: [tool], ledger, leaseMs: 60, runTimeoutMs: 60_000, waitMs: 30_000, pollMs: 5, logger: { warn: () => {} } };
    const first = new Dispatcher(options).turn(context("c-long")).dispatch(call);
    await eventually(() => runs.length === 1, "the first run started");
    // Several lease periods pass while the run is pending (more under load): its renewals keep the row.
    await new Promise((r) => setTimeout(r, 300));
    const second = new Dispatcher(options).turn(context("c-long")).dispatch(call);
    await new Promise((r) => setTimeout(r, 100));
    finish();
    await expect(first).resolves.toMatchObject({ result: { paid: true }, replayed: false });
    await expect(second).resolves.toMatchObject({ result: { paid: true }, replayed: true });
    expect(runs).toHaveLength(1);
  });
});
