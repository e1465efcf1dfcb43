// RECORD-10 for in_flight_elsewhere: a re-worded call (IDENT-3) that meets a live claim, or whose
// own run of the stored request outlives runTimeoutMs (DISPATCH-18), may have its effect happen
// with the STORED request, never with its re-wording. The error names that request, as
// tool_failed, outcome_unknown, result_not_storable, claim_released and stale_claim do; before,
// a user waiting on the holder paying "Monthly fee" was told the payment "may have happened with
// memo Regarding monthly fee", a request that never ran. The same holds for a ledger error raised
// after a re-worded call ran the stored request (the audit of RECORD-10's errors).
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { Dispatcher, LedgerCorruptError, MemoryLedger, ToolError, defineTool, effectOf, type Ledger } from "../src/index.js";
import { unavailable } from "./helpers.js";

const turn0 = { conversationId: "conv_inflight_stored", turnIndex: 0 };
const paid = { amount: 5, memo: "Monthly fee" };
const reworded = { amount: 5, memo: "Regarding monthly fee" };

function gate() {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** A payments mock: each payment's memo in its effect log; `hold` pauses a run, `refuseFirst` answers the first with a 503 before acceptance. */
function payments(options: { hold?: Promise<void>; refuseFirst?: boolean } = {}) {
  const log: string[] = [];
  let runs = 0;
  let started!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    identity: ["amount"],
    input: z.object({ amount: z.number(), memo: z.string() }),
    run: async (args) => {
      runs++;
      if (options.refuseFirst === true && runs === 1) throw new ToolError("503 before acceptance", { disposition: "not_performed" });
      started();
      if (options.hold !== undefined) await options.hold;
      log.push(args.memo);
      return { id: `pay_${log.length}` };
    },
  });
  return { tool, log, running };
}

async function caught(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    () => undefined,
    (e: unknown) => e,
  );
}

async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 2_000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`never: ${what}`);
}

describe("RECORD-10 IDENT-3 in_flight_elsewhere after a re-worded call names the stored request", () => {
  it("LEDGER-15 a re-worded attempt waits on the holder's live claim past the wait bound: in_flight_elsewhere names the holder's request; one payment, memo Monthly fee", async () => {
    const ledger = new MemoryLedger();
    const downstream = gate();
    const holderPay = payments({ hold: downstream.promise });
    const holder = new Dispatcher({ tools: [holderPay.tool], ledger, logger: { warn: () => {} } });
    const holding = holder.turn(turn0).dispatch({ name: "send_payment", input: paid });
    await holderPay.running;
    const waiterPay = payments();
    const waiter = new Dispatcher({ tools: [waiterPay.tool], ledger, waitMs: 20, pollMs: 5, logger: { warn: () => {} } });
    const error = await caught(waiter.turn(turn0).dispatch({ name: "send_payment", input: reworded }));
    console.log(`waiter: ${(error as { code?: string }).code} storedRequest=${JSON.stringify((error as { storedRequest?: unknown }).storedRequest)}`);
    expect(error).toMatchObject({ code: "in_flight_elsewhere" });
    expect(effectOf(error)).toBe("possibly");
    expect((error as { storedRequest?: unknown }).storedRequest).toEqual(paid);
    // The holder completes: one payment, the stored request's memo; the waiter ran nothing.
    downstream.open();
    const outcome = await holding;
    expect(outcome.replayed).toBe(false);
    expect(holderPay.log).toEqual(["Monthly fee"]);
    expect(waiterPay.log).toEqual([]);
    const row = await ledger.lookup((error as { key: string }).key);
    expect(row).toMatchObject({ state: "completed" });
    expect(JSON.parse(row!.request)).toEqual(paid);
  });

  it("LEDGER-15 a waiter whose arguments are the stored request's gets no storedRequest (nothing re-worded)", async () => {
    const ledger = new MemoryLedger();
    const downstream = gate();
    const holderPay = payments({ hold: downstream.promise });
    const holding = new Dispatcher({ tools: [holderPay.tool], ledger }).turn(turn0).dispatch({ name: "send_payment", input: paid });
    await holderPay.running;
    const waiter = new Dispatcher({ tools: [payments().tool], ledger, waitMs: 20, pollMs: 5 });
    const error = await caught(waiter.turn(turn0).dispatch({ name: "send_payment", input: paid }));
    expect(error).toMatchObject({ code: "in_flight_elsewhere" });
    expect("storedRequest" in (error as object)).toBe(false);
    downstream.open();
    await holding;
    expect(holderPay.log).toEqual(["Monthly fee"]);
  });

  it("DISPATCH-18 LEDGER-21 a re-worded call re-runs a released row's stored request, which outlives runTimeoutMs: in_flight_elsewhere names the request that runs; it completes later, one payment, memo Monthly fee", async () => {
    const ledger = new MemoryLedger();
    const downstream = gate();
    const pay = payments({ hold: downstream.promise, refuseFirst: true });
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, runTimeoutMs: 30, logger: { warn: () => {} } });
    const first = await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: paid }));
    expect(first).toMatchObject({ code: "claim_released" });
    const error = await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded }));
    console.log(`re-run: ${(error as { code?: string }).code} runTimeoutMs=${String((error as { runTimeoutMs?: unknown }).runTimeoutMs)} storedRequest=${JSON.stringify((error as { storedRequest?: unknown }).storedRequest)}`);
    expect(error).toMatchObject({ code: "in_flight_elsewhere", runTimeoutMs: 30 });
    expect((error as { storedRequest?: unknown }).storedRequest).toEqual(paid);
    // The run goes on and settles: recorded under its fence, the stored request's memo paid once.
    downstream.open();
    const key = (error as { key: string }).key;
    await eventually(async () => (await ledger.lookup(key))?.state === "completed", "the late completion recorded");
    expect(pay.log).toEqual(["Monthly fee"]);
    expect(JSON.parse((await ledger.lookup(key))!.request)).toEqual(paid);
  });

  it("DISPATCH-10 a re-worded call re-runs the stored request and its completion cannot be recorded: ledger_unavailable (effect happened) names the request that ran", async () => {
    const memory = new MemoryLedger();
    const ledger: Ledger = Object.assign(Object.create(memory) as Ledger, {
      capabilities: memory.capabilities,
      complete: () => Promise.reject(unavailable()),
    });
    const pay = payments({ refuseFirst: true });
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, recordRetryMs: 5, pollMs: 1, logger: { warn: () => {} } });
    expect(await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: paid }))).toMatchObject({ code: "claim_released" });
    const error = await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded }));
    console.log(`record lost: ${(error as { code?: string }).code} effectOf=${effectOf(error)} storedRequest=${JSON.stringify((error as { storedRequest?: unknown }).storedRequest)}`);
    expect(error).toMatchObject({ code: "ledger_unavailable", effectHappened: true, key: expect.any(String) });
    expect(effectOf(error)).toBe("yes");
    expect((error as { storedRequest?: unknown }).storedRequest).toEqual(paid);
    expect(pay.log).toEqual(["Monthly fee"]);
    expect(await memory.lookup((error as { key: string }).key)).toMatchObject({ state: "in_flight" });
  });

  it("LEDGER-8 LEDGER-12 a re-worded re-run of the stored request hangs up, and its release cannot be written: ledger_unavailable (possibly) names the request that may have been paid", async () => {
    const memory = new MemoryLedger();
    let releases = 0;
    const ledger: Ledger = Object.assign(Object.create(memory) as Ledger, {
      capabilities: memory.capabilities,
      // The first release (the 503) lands; the second (after the hang-up) finds the store out of reach.
      release: (...args: Parameters<Ledger["release"]>) => (++releases === 1 ? memory.release(...args) : Promise.reject(unavailable())),
    });
    const log: string[] = [];
    let runs = 0;
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      identity: ["amount"],
      input: z.object({ amount: z.number(), memo: z.string() }),
      run: (args) => {
        runs++;
        if (runs === 1) throw new ToolError("503 before acceptance", { disposition: "not_performed" });
        log.push(args.memo); // the bank took it; the reply is lost
        throw new Error("socket hang up");
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, recordRetryMs: 5, pollMs: 1, logger: { warn: () => {} } });
    expect(await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: paid }))).toMatchObject({ code: "claim_released" });
    const error = await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded }));
    console.log(`release lost: ${(error as { code?: string }).code} effectOf=${effectOf(error)} storedRequest=${JSON.stringify((error as { storedRequest?: unknown }).storedRequest)}`);
    expect(error).toMatchObject({ code: "ledger_unavailable", key: expect.any(String) });
    expect(effectOf(error)).toBe("possibly");
    expect((error as { storedRequest?: unknown }).storedRequest).toEqual(paid);
    expect(log).toEqual(["Monthly fee"]);
    expect(await memory.lookup((error as { key: string }).key)).toMatchObject({ state: "in_flight" });
  });

  it("DISPATCH-10 the same when the run's record cannot be read back: ledger_corrupt (effect happened) names the request that ran", async () => {
    const memory = new MemoryLedger();
    const ledger: Ledger = Object.assign(Object.create(memory) as Ledger, {
      capabilities: memory.capabilities,
      complete: (key: string) => Promise.reject(new LedgerCorruptError(key, 'the row holds a state this version did not write: "archived"')),
    });
    const pay = payments({ refuseFirst: true });
    const dispatcher = new Dispatcher({ tools: [pay.tool], ledger, recordRetryMs: 5, pollMs: 1, logger: { warn: () => {} } });
    expect(await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: paid }))).toMatchObject({ code: "claim_released" });
    const error = await caught(dispatcher.turn(turn0).dispatch({ name: "send_payment", input: reworded }));
    console.log(`record corrupt: ${(error as { code?: string }).code} effectOf=${effectOf(error)} storedRequest=${JSON.stringify((error as { storedRequest?: unknown }).storedRequest)}`);
    expect(error).toMatchObject({ code: "ledger_corrupt", effectHappened: true });
    expect((error as { storedRequest?: unknown }).storedRequest).toEqual(paid);
    expect(pay.log).toEqual(["Monthly fee"]);
  });
});
