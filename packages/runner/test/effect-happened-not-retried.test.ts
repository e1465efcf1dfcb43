// A call whose run performed its effect and then lost its claim to an operator's resolution
// raises stale_claim with effectHappened (DISPATCH-8). ERR-4: an error that says the effect
// happened is not one a re-send can help, since the row is now the operator's. The runner's own
// retry is a re-send: it must not retry that attempt, and its failed-turn record must not say
// `retryable`. Before, the retry replayed the operator's `failed` row and committed "failed" to
// the model for a payment that was made, or re-claimed a `released` row and paid again.
import { describe, expect, it } from "vitest";
import { LedgerCorruptError, LedgerUnavailableError, MemoryLedger, retryableOf, type Ledger, type Resolution } from "@dispatch-once/core";
import { TurnFailedError } from "../src/index.js";
import { payCall, world } from "./toy.js";

describe("ERR-4 DISPATCH-8 a call whose effect happened after its claim was lost is not retried", () => {
  const resolutions: [string, Resolution, boolean][] = [
    ["failed", { outcome: "failed", error: { name: "OperatorResolvedFailure", message: "no payment found" } }, false],
    ["not_performed", { outcome: "not_performed" }, false],
    // The app's own policy cannot make the runner re-send it either.
    ["not_performed", { outcome: "not_performed" }, true],
  ];
  it.each(resolutions)("resolved %s while the owner was paused (app policy retries everything: %s): one payment, the turn fails, its record is not retryable", async (_name, resolution, retryAll) => {
    let now = 1_000_000;
    const memory = new MemoryLedger({ now: () => now });
    const ledger: Ledger = memory;
    let paused = false;
    const { runner, performed, events } = world(
      (_n, input) => ((input.at(-1) as { role?: string }).role === "user" ? [...payCall(`c${_n}`, "rent"), { t: "end" }] : [{ t: "text", index: 0, text: "Done." }, { t: "end" }]),
      false,
      {
        ledger,
        dispatcher: { leaseMs: 30_000, logger: { warn: () => {} } },
        ...(retryAll ? { runner: { retry: { attempts: 3, backoffMs: () => 1, shouldRetry: () => true } } } : {}),
        beforePay: async () => {
          if (paused) return;
          paused = true;
          // The owner pauses past its lease; an operator, finding nothing downstream yet, settles the row.
          now += 120_000;
          const [row] = (await memory.listRows!({ state: "in_flight" })).rows;
          await memory.resolve!({ key: row!.key, resolution, actor: "ops", reason: "checked the console" });
        },
      },
    );
    const error = await runner.send("conv-op", { id: "m1", content: "pay acme" }).then(
      (result) => `committed after ${result.turns[0]!.attempts} attempts: ${JSON.stringify(result.turns[0]!.calls.map((c) => c.error ?? c.result))}`,
      (e: unknown) => e,
    );
    console.log(`resolution ${_name}: payments ${performed.length}, outcome`, error instanceof TurnFailedError ? `turn_failed retryable=${error.record.retryable}` : error);
    expect(performed).toHaveLength(1);
    expect(error).toBeInstanceOf(TurnFailedError);
    const failed = error as TurnFailedError;
    expect(failed.record.attempts).toBe(1);
    expect(events.filter((e) => e.type === "retry_scheduled")).toEqual([]);
    expect(failed.record.effects).toEqual([expect.objectContaining({ effect: "happened" })]);
    expect(failed.record.retryable).toBe(false);
    expect(retryableOf(failed)).toBe("no");
  });
});

describe("ERR-4 DISPATCH-10 a payment made whose record never reached the ledger", () => {
  // Out of reach; a row the store answers that this version cannot read; a foreign error (an adapter's bug).
  const faults: [string, () => Error][] = [
    ["ledger_unavailable", () => new LedgerUnavailableError("connection reset")],
    ["ledger_corrupt", () => new LedgerCorruptError("k", "unknown row format version 2")],
    ["a foreign TypeError", () => new TypeError("Cannot read properties of undefined (reading 'rowCount')")],
  ];
  it.each(faults)("its complete meets %s: recorded as happened and the attempt is not retried: the record, the error and the run's span (OTEL-5) say one thing", async (_name, fault) => {
    const base = new MemoryLedger();
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      complete: () => Promise.reject(fault()),
    });
    const { runner, performed, events } = world(() => [...payCall("c1", "rent"), { t: "end" }], false, { ledger, dispatcher: { pollMs: 1, recordRetryMs: 5, waitMs: 1 } });
    const error = await runner.send("conv-down", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(performed).toHaveLength(1);
    expect(error).toBeInstanceOf(TurnFailedError);
    const failed = error as TurnFailedError;
    console.log(`${_name}: calls ${JSON.stringify(failed.record.calls.map((c) => [c.attempt, c.status, c.effect]))}, effects ${JSON.stringify(failed.record.effects.map((e) => e.effect))}, retryable ${failed.record.retryable}`);
    expect(failed.record.calls.map((c) => [c.attempt, c.status, c.effect])).toEqual([[1, "error", "happened"]]);
    expect(failed.record.effects).toEqual([expect.objectContaining({ effect: "happened" })]);
    expect(events.filter((e) => e.type === "retry_scheduled")).toEqual([]);
    expect(failed.record.retryable).toBe(false);
    expect(retryableOf(failed)).toBe("no");
  });
});
