// A run whose tool returned a result has made its effect, whatever becomes of the write that
// records it (ERR-4, DISPATCH-10). Whatever that write meets (the store out of reach, a refusal,
// a row this version cannot read: ledger_corrupt, or a foreign error: a driver bug, a TypeError in
// an adapter), the error raised must say so, as DISPATCH-8's stale_claim does, so that the app, the
// runner's record and the run's span (OTEL-5) tell one story: "happened", and no surface offers a
// re-send. Before, it read "possibly" and a re-send "can help".
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
  InvalidLedgerInputError,
  LedgerCorruptError,
  LedgerUnavailableError,
  MemoryLedger,
  ToolError,
  defineTool,
  effectOf,
  retryableOf,
  type DispatchEvent,
  type Ledger,
} from "../src/index.js";
import { unavailable } from "./helpers.js";

const turn0 = { conversationId: "conv_record_effect", turnIndex: 0 };

type Ending = "result" | "too_large" | "declined" | "hang_up";
/** What the record's write meets. `lookup_*_after_lost_reply`: its first copy lands and its reply is lost, a re-send is refused (the row left flight), and reading the row back fails so. */
type Down =
  | "out_of_reach"
  | "refused_in_transaction"
  | "corrupt"
  | "foreign"
  | "lookup_fails_after_lost_reply"
  | "lookup_corrupt_after_lost_reply"
  | "lookup_foreign_after_lost_reply";

const corrupt = () => new LedgerCorruptError("k", 'the row holds a state this version did not write: "archived"');
const foreign = () => new TypeError("Cannot read properties of undefined (reading 'rowCount')");
const LOOKUP_FAULT: Partial<Record<Down, () => Error>> = {
  lookup_fails_after_lost_reply: unavailable,
  lookup_corrupt_after_lost_reply: corrupt,
  lookup_foreign_after_lost_reply: foreign,
};

function world(ending: Ending, down: Down) {
  const base = new MemoryLedger({ maxResultBytes: 64 });
  const write = ending === "result" ? "complete" : ending === "hang_up" ? "markUnknown" : "fail";
  let first = true;
  const lookupFault = LOOKUP_FAULT[down];
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
    capabilities: base.capabilities,
    [write]: async (...args: unknown[]) => {
      if (down === "refused_in_transaction") throw new InvalidLedgerInputError("pool", "the connection is inside a transaction");
      if (down === "out_of_reach") throw unavailable();
      if (down === "corrupt") throw corrupt();
      if (down === "foreign") throw foreign();
      await (base[write] as (...a: unknown[]) => Promise<unknown>).apply(base, args);
      if (first) {
        first = false;
        throw unavailable();
      }
    },
    ...(lookupFault !== undefined ? { lookup: () => Promise.reject(lookupFault()) } : {}),
  });
  const payments: string[] = [];
  const tool = defineTool({
    name: "send_payment",
    effect: "unkeyed_write",
    input: z.object({ amount: z.number() }),
    run: (args) => {
      if (ending === "declined") throw new ToolError("card declined", { disposition: "definite" });
      payments.push(`pay ${args.amount}`);
      if (ending === "hang_up") throw new Error("socket hang up");
      return ending === "too_large" ? { receipt: "x".repeat(200) } : { id: "pay_1" };
    },
  });
  const events: DispatchEvent[] = [];
  const dispatcher = new Dispatcher({ tools: [tool], ledger, pollMs: 1, recordRetryMs: 5, onEvent: (e) => events.push(e), allowVolatileLedgerForUnkeyedWrites: true });
  return { dispatcher, payments, events };
}

async function dispatchOnce(w: ReturnType<typeof world>): Promise<unknown> {
  return w.dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 5 } }).then(
    () => undefined,
    (e: unknown) => e,
  );
}

const cases: [Ending, Down, "yes" | "possibly"][] = [
  ["result", "out_of_reach", "yes"],
  ["result", "refused_in_transaction", "yes"],
  ["result", "lookup_fails_after_lost_reply", "yes"],
  ["too_large", "out_of_reach", "yes"],
  // What the run cannot vouch for stays "possibly".
  ["hang_up", "out_of_reach", "possibly"],
  ["declined", "out_of_reach", "possibly"],
];

describe("ERR-4 DISPATCH-10 the error of a record given up after the tool ran says what the run knows of the effect", () => {
  it.each(cases)("tool ends %s, the record's write %s: ledger_unavailable, effect %s", async (ending, down, effect) => {
    const w = world(ending, down);
    const error = await dispatchOnce(w);
    const said = w.events.find((e) => e.type === "record_failed");
    console.log(`${ending}/${down}: payments ${w.payments.length}; ${(error as { code?: string }).code} effectOf=${effectOf(error)} retryableOf=${retryableOf(error)}; record_failed effect ${said?.type === "record_failed" ? said.effect : "-"}`);
    expect(LedgerUnavailableError.isInstance(error)).toBe(true);
    expect(effectOf(error)).toBe(effect);
    if (effect === "yes") {
      expect(w.payments).toHaveLength(1);
      expect((error as LedgerUnavailableError).effectHappened).toBe(true);
      // Never "re-send it" for an effect known to have happened (ERR-4).
      expect(retryableOf(error)).toBe("no");
      // The run's event says the same (OTEL-5).
      expect(said).toMatchObject({ type: "record_failed", effect: "happened" });
    } else {
      expect((error as LedgerUnavailableError).effectHappened).toBeUndefined();
      expect(retryableOf(error)).toBe("same_message");
      // The row is left in flight: the run's event says no more than the error does (OTEL-5).
      expect(said).toMatchObject({ type: "record_failed", effect: "may_have_happened" });
    }
  });
});

describe("DISPATCH-8 a result that cannot be stored, whose claim an operator settled meanwhile", () => {
  it("the refused fail-closed raises stale_claim saying the effect happened, as a refused completion does", async () => {
    let now = 1_000_000;
    const memory = new MemoryLedger({ now: () => now, maxResultBytes: 64 });
    const ledger: Ledger = Object.assign(Object.create(memory) as Ledger, { capabilities: { ...memory.capabilities, durability: "durable" as const } });
    const payments: string[] = [];
    const tool = defineTool({
      name: "send_payment",
      effect: "unkeyed_write",
      input: z.object({ amount: z.number() }),
      run: async (args, ctx) => {
        // Paused past the lease; the operator, finding nothing yet, releases the claim.
        now += 120_000;
        await memory.resolve!({ key: ctx.idempotencyKey, resolution: { outcome: "not_performed" }, actor: "ops", reason: "nothing at the bank yet" });
        payments.push(`pay ${args.amount}`);
        return { receipt: "x".repeat(200) };
      },
    });
    const events: DispatchEvent[] = [];
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 30_000, onEvent: (e) => events.push(e), logger: { warn: () => {} } });
    const error = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 5 } }).then(
      () => undefined,
      (e: unknown) => e,
    );
    console.log(`payments ${payments.length}; ${(error as { code?: string }).code} effectOf=${effectOf(error)}; record_failed`, events.find((e) => e.type === "record_failed"));
    expect(payments).toHaveLength(1);
    expect(error).toMatchObject({ code: "stale_claim" });
    expect(effectOf(error)).toBe("yes");
    expect(retryableOf(error)).toBe("no");
    expect(events.find((e) => e.type === "record_failed")).toMatchObject({ write: "fail", effect: "happened" });
  });
});

const happenedCases: [Ending, Down, "ledger_corrupt" | "ledger_unavailable"][] = [
  ["result", "corrupt", "ledger_corrupt"],
  ["result", "foreign", "ledger_unavailable"],
  ["result", "lookup_corrupt_after_lost_reply", "ledger_corrupt"],
  ["result", "lookup_foreign_after_lost_reply", "ledger_unavailable"],
  // A result_not_storable's fail-closed write meeting the same errors (LEDGER-10).
  ["too_large", "corrupt", "ledger_corrupt"],
  ["too_large", "foreign", "ledger_unavailable"],
  ["too_large", "lookup_corrupt_after_lost_reply", "ledger_corrupt"],
];

describe("DISPATCH-10 ERR-4 a record lost after the run returned its result, to an unreadable row or a foreign error, says the effect happened", () => {
  it.each(happenedCases)("tool ends %s, the record meets %s: %s with effectHappened, effect yes, not retryable", async (ending, down, code) => {
    const w = world(ending, down);
    const error = await dispatchOnce(w);
    const said = w.events.find((e) => e.type === "record_failed");
    console.log(`${ending}/${down}: payments ${w.payments.length}; ${(error as { code?: string }).code ?? String(error)} effectOf=${effectOf(error)} retryableOf=${retryableOf(error)} effectHappened=${String((error as { effectHappened?: unknown }).effectHappened)}`);
    expect(w.payments).toHaveLength(1);
    expect(error).toMatchObject({ code, effectHappened: true, key: expect.any(String) });
    expect(effectOf(error)).toBe("yes");
    expect(retryableOf(error)).toBe("no");
    expect(said).toMatchObject({ type: "record_failed", effect: "happened" });
    // Told under the call's key, which the runner lists it under (RECORD-2).
    expect((error as { key: string }).key).toBe(said?.key);
    if (down === "lookup_foreign_after_lost_reply" || down === "foreign") {
      // The foreign error is kept as the cause, for whoever debugs the adapter.
      expect((error as LedgerUnavailableError).cause).toBeInstanceOf(TypeError);
    }
  });

  it.each(["corrupt", "foreign"] as const)("a declined payment whose failure record meets %s says nothing more than before: effect possibly", async (down) => {
    const w = world("declined", down);
    const error = await dispatchOnce(w);
    expect(w.payments).toHaveLength(0);
    expect((error as { effectHappened?: unknown }).effectHappened).toBeUndefined();
    expect(effectOf(error)).toBe("possibly");
    if (down === "corrupt") expect(error).toMatchObject({ code: "ledger_corrupt" });
    else expect(error).toBeInstanceOf(TypeError);
  });
});

describe("RECORD-10 a stale claim after a re-worded call ran the stored request names that request", () => {
  it("DISPATCH-8 IDENT-3 a re-worded call re-runs a released row's stored request and loses its claim before recording: stale_claim, the effect happened, and its storedRequest is the request that ran", async () => {
    // A fresh-clone CI of 2026-12-06 (the kit's splice-planted search, OpenAI side): a failed-turn
    // record said the payment happened with the re-worded call's memo, a request that never ran.
    let now = 1_000_000;
    const memory = new MemoryLedger({ now: () => now });
    const ledger: Ledger = Object.assign(Object.create(memory) as Ledger, { capabilities: { ...memory.capabilities, durability: "durable" as const } });
    const ran: string[] = [];
    let attempt = 0;
    const tool = defineTool({
      name: "send_payment",
      effect: "keyed_write",
      identity: ["amount"],
      input: z.object({ amount: z.number(), memo: z.string() }),
      run: async (args, ctx) => {
        attempt++;
        // First run: refused before anything was accepted (released, LEDGER-21 keeps its request).
        if (attempt === 1) throw new ToolError("503 before acceptance", { disposition: "not_performed" });
        ran.push(args.memo);
        // Second run: paused past the lease; an operator settles the row meanwhile.
        now += 120_000;
        await memory.resolve!({ key: ctx.idempotencyKey, resolution: { outcome: "not_performed" }, actor: "ops", reason: "nothing at the bank yet" });
        return { id: "pay_1" };
      },
    });
    const dispatcher = new Dispatcher({ tools: [tool], ledger, leaseMs: 30_000, logger: { warn: () => {} } });
    const first = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 5, memo: "Monthly fee" } }).then(() => undefined, (e: unknown) => e);
    expect(first).toMatchObject({ code: "claim_released" });
    const error = await dispatcher.turn(turn0).dispatch({ name: "send_payment", input: { amount: 5, memo: "Regarding monthly fee" } }).then(() => undefined, (e: unknown) => e);
    expect(ran).toEqual(["Monthly fee"]);
    expect(error).toMatchObject({ code: "stale_claim", effectHappened: true });
    expect((error as { storedRequest?: unknown }).storedRequest).toEqual({ amount: 5, memo: "Monthly fee" });
  });
});
