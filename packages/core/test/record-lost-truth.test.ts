// A run whose tool returned a result has made its effect. When the write that records it fails
// with something other than ledger_unavailable (the store answers with a row this version cannot
// read: ledger_corrupt; or a foreign error, a driver bug, a TypeError in an adapter), the caller,
// the runner's record and the run's span must still say "happened" (DISPATCH-10, ERR-4), and no
// surface may offer a re-send. Before, such errors passed as they were: "possibly".
import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  Dispatcher,
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

const turn0 = { conversationId: "conv_record_truth", turnIndex: 0 };

type Ending = "result" | "too_large" | "declined";
type Fault = "corrupt" | "foreign" | "lookup_corrupt_after_lost_reply" | "lookup_foreign_after_lost_reply";

function world(ending: Ending, fault: Fault) {
  const base = new MemoryLedger({ maxResultBytes: 64 });
  const write = ending === "result" ? "complete" : "fail";
  const corrupt = () => new LedgerCorruptError("k", "the row holds a state this version did not write: \"archived\"");
  const foreign = () => new TypeError("Cannot read properties of undefined (reading 'rowCount')");
  let first = true;
  const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
    capabilities: base.capabilities,
    [write]: async (...args: unknown[]) => {
      if (fault === "corrupt") throw corrupt();
      if (fault === "foreign") throw foreign();
      // The first copy lands and its reply is lost; the re-send is refused (stale_claim: the row
      // left flight) and reading the row back to tell whether it was this write's fails.
      await (base[write] as (...a: unknown[]) => Promise<unknown>).apply(base, args);
      if (first) {
        first = false;
        throw unavailable();
      }
    },
    ...(fault === "lookup_corrupt_after_lost_reply" ? { lookup: () => Promise.reject(corrupt()) } : {}),
    ...(fault === "lookup_foreign_after_lost_reply" ? { lookup: () => Promise.reject(foreign()) } : {}),
  });
  const payments: string[] = [];
  const tool = defineTool({
    name: "send_payment",
    effect: "unkeyed_write",
    input: z.object({ amount: z.number() }),
    run: (args) => {
      if (ending === "declined") throw new ToolError("card declined", { disposition: "definite" });
      payments.push(`pay ${args.amount}`);
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

const happenedCases: [Ending, Fault, "ledger_corrupt" | "ledger_unavailable"][] = [
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
  it.each(happenedCases)("tool ends %s, the record meets %s: %s with effectHappened, effect yes, not retryable", async (ending, fault, code) => {
    const w = world(ending, fault);
    const error = await dispatchOnce(w);
    const said = w.events.find((e) => e.type === "record_failed");
    console.log(`${ending}/${fault}: payments ${w.payments.length}; ${(error as { code?: string }).code ?? String(error)} effectOf=${effectOf(error)} retryableOf=${retryableOf(error)} effectHappened=${String((error as { effectHappened?: unknown }).effectHappened)}`);
    expect(w.payments).toHaveLength(1);
    expect(error).toMatchObject({ code, effectHappened: true, key: expect.any(String) });
    expect(effectOf(error)).toBe("yes");
    expect(retryableOf(error)).toBe("no");
    expect(said).toMatchObject({ type: "record_failed", effect: "happened" });
    // Told under the call's key, which the runner lists it under (RECORD-2).
    expect((error as { key: string }).key).toBe(said?.key);
    if (fault.startsWith("lookup_foreign") || fault === "foreign") {
      // The foreign error is kept as the cause, for whoever debugs the adapter.
      expect((error as LedgerUnavailableError).cause).toBeInstanceOf(TypeError);
    }
  });

  it.each(["corrupt", "foreign"] as const)("a declined payment whose failure record meets %s says nothing more than before: effect possibly", async (fault) => {
    const w = world("declined", fault);
    const error = await dispatchOnce(w);
    expect(w.payments).toHaveLength(0);
    expect((error as { effectHappened?: unknown }).effectHappened).toBeUndefined();
    expect(effectOf(error)).toBe("possibly");
    if (fault === "corrupt") expect(error).toMatchObject({ code: "ledger_corrupt" });
    else expect(error).toBeInstanceOf(TypeError);
  });
});
