import { Dispatcher, MemoryConversationStore, MemoryLedger, ToolRegistry, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { DEFAULT_RESEND_WINDOW_MS, TurnFailedError, TurnRunner } from "../src/index.js";
import { payCall, world, type ToyEvent } from "./toy.js";

const HOUR = 60 * 60 * 1000;

/**
 * TURN-12 with LEDGER-13: a turn paid, then failed (every attempt cut after the payment); the
 * ledger keeps the row for its retention (24 h) only. The store's clock and the ledger's clock
 * are one shared test clock, moved by hand; the runner's own clock (Date.now) is unrelated to
 * it, so nothing here is decided on the process clock.
 */
function paidThenFailed(extra: { runner?: Record<string, unknown>; withoutWindow?: boolean; withoutListing?: boolean } = {}) {
  let now = 1_000_000;
  const clock = () => now;
  const memory = new MemoryConversationStore({ now: clock });
  // A third-party store's view: the same store without `supports.reopenWindow` (it never gets
  // `reopenWithinMs`; the runner checks the age with listFailedTurns first).
  const store: ConversationStore = extra.withoutWindow
    ? Object.assign(Object.create(memory) as MemoryConversationStore, {
        capabilities: { ...memory.capabilities, supports: { leaseGrants: true } },
        // A store that does not list failed turns either: only the record's own time is left.
        ...(extra.withoutListing ? { listFailedTurns: undefined } : {}),
      })
    : memory;
  const ledger = new MemoryLedger({ now: clock });
  let failing = true;
  const script = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
    if ((input.at(-1) as { role?: string }).role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
    return failing ? [...payCall("c", "first"), "cut"] : [...payCall("c", "again"), { t: "end" }];
  };
  const w = world(script, true, { store, ledger, runner: extra.runner ?? {} });
  return {
    ...w,
    store,
    ledger,
    advance: (ms: number) => {
      now += ms;
    },
    recover: () => {
      failing = false;
    },
  };
}

async function failFirst(w: ReturnType<typeof paidThenFailed>) {
  const first = await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
  expect(first).toBeInstanceOf(TurnFailedError);
  expect((first as TurnFailedError).record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
  expect(w.performed).toHaveLength(1);
  w.recover();
}

describe("TURN-12 a re-send is retried only within the re-send window (LEDGER-13)", () => {
  it("TURN-12 a re-send 25 h after the failure, after the ledger swept its rows, runs nothing and says why; the payment is made once", async () => {
    const w = paidThenFailed();
    await failFirst(w);
    const requests = w.provider.requests.length;
    const recordsBefore = await w.store.records("conv-w");
    w.advance(25 * HOUR);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);

    const resent = await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    // The oracle: the payments made, and what the runner answers and keeps, agree.
    expect(w.performed).toHaveLength(1);
    expect(resent).toBeInstanceOf(TurnFailedError);
    const error = resent as TurnFailedError;
    expect(error.replayed).toBe(true);
    expect(error.notRetried).toBe("past_resend_window");
    expect(error.message).toMatch(/retention/);
    expect(error.record.retryable).toBe(false);
    // The stored record of the earlier attempts says which effects happened.
    expect(error.record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
    expect(w.provider.requests.length).toBe(requests);
    expect((await w.store.message("conv-w", "m1"))?.state).toBe("failed");
    expect(await w.store.records("conv-w")).toEqual(recordsBefore);
    // Sending it again does not change the answer, and a new message is the way to do it again.
    const again = (await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(again.notRetried).toBe("past_resend_window");
    expect(w.performed).toHaveLength(1);
  });

  it("TURN-12 a re-send within the window retries at the bound index and the payment is answered from the ledger", async () => {
    const w = paidThenFailed();
    await failFirst(w);
    w.advance(1 * HOUR);
    await w.ledger.sweep();
    const result = await w.runner.send("conv-w", { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(result.turns[0]!.calls).toEqual([expect.objectContaining({ replayed: true, result: { n: 1 } })]);
    expect(w.performed).toHaveLength(1);
  });

  it("TURN-12 the window's edge is past it: a failure exactly resendWindowMs old on the store's clock is not reopened", async () => {
    const w = paidThenFailed({ runner: { resendWindowMs: 2 * HOUR } });
    await failFirst(w);
    w.advance(2 * HOUR - 1);
    // One millisecond inside: reopened (and answered from the ledger, whose rows are still kept).
    const inside = paidThenFailed({ runner: { resendWindowMs: 2 * HOUR } });
    await failFirst(inside);
    inside.advance(2 * HOUR - 1);
    await expect(inside.runner.send("conv-w", { id: "m1", content: "pay acme" })).resolves.toMatchObject({ status: "answered" });
    expect(inside.performed).toHaveLength(1);
    w.advance(1);
    const edge = (await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(edge.notRetried).toBe("past_resend_window");
    expect(w.performed).toHaveLength(1);
  });

  it("TURN-12 a store without supports.reopenWindow: the runner's own check on the store's clock (listFailedTurns) refuses the late re-send", async () => {
    const w = paidThenFailed({ withoutWindow: true });
    await failFirst(w);
    const requests = w.provider.requests.length;
    w.advance(25 * HOUR);
    await w.ledger.sweep();
    const late = (await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(late).toBeInstanceOf(TurnFailedError);
    expect(late.notRetried).toBe("past_resend_window");
    expect(late.record.retryable).toBe(false);
    expect(w.performed).toHaveLength(1);
    expect(w.provider.requests.length).toBe(requests);
    expect((await w.store.message("conv-w", "m1"))?.state).toBe("failed");
  });

  it("TURN-12 a store without supports.reopenWindow still retries a re-send within the window", async () => {
    const w = paidThenFailed({ withoutWindow: true });
    await failFirst(w);
    w.advance(HOUR);
    await expect(w.runner.send("conv-w", { id: "m1", content: "pay acme" })).resolves.toMatchObject({ status: "answered" });
    expect(w.performed).toHaveLength(1);
  });

  it("TURN-12 a retry that fails again does not restart the window: it is measured from the first failure", async () => {
    const w = paidThenFailed();
    await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(w.performed).toHaveLength(1);
    // Reopened inside the window; every attempt is cut again (the payment answered from the ledger).
    w.advance(22 * HOUR);
    const second = (await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(second).toBeInstanceOf(TurnFailedError);
    expect(second.replayed).toBe(false);
    expect(w.performed).toHaveLength(1);
    w.recover();
    // The paid row finished at the first attempt and is swept 24 h after it.
    w.advance(3 * HOUR);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);
    const third = (await w.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(third.notRetried).toBe("past_resend_window");
    expect(w.performed).toHaveLength(1);
  });

  it("TURN-12 resendWindowMs above the ledger's retention is refused; by default it is 23/24 of it", () => {
    const dispatcher = new Dispatcher({ tools: new ToolRegistry([]), ledger: new MemoryLedger({ retentionMs: 2 * HOUR }) });
    const store = new MemoryConversationStore();
    const provider = paidThenFailed().provider;
    expect(() => new TurnRunner(provider, { dispatcher, store, allowVolatileConversationStore: true, resendWindowMs: 3 * HOUR })).toThrow(/resendWindowMs.*below the ledger's retention/);
    expect(() => new TurnRunner(provider, { dispatcher, store, allowVolatileConversationStore: true, resendWindowMs: -1 })).toThrow(/resendWindowMs/);
    expect(DEFAULT_RESEND_WINDOW_MS).toBe(23 * HOUR);
  });

  it("TURN-12 a store with neither supports.reopenWindow nor listFailedTurns: the record's time on the runner's clock decides, and a record without one is past the window", async () => {
    const w = paidThenFailed({ withoutWindow: true, withoutListing: true, runner: { resendWindowMs: 60_000 } });
    await failFirst(w);
    // The record's `at` is this host's clock at the failure: within a minute, the re-send retries.
    await expect(w.runner.send("conv-w", { id: "m1", content: "pay acme" })).resolves.toMatchObject({ status: "answered" });
    expect(w.performed).toHaveLength(1);

    const old = paidThenFailed({ withoutWindow: true, withoutListing: true, runner: { resendWindowMs: 60_000 } });
    await failFirst(old);
    const requests = old.provider.requests.length;
    // A failure recorded two minutes before now on this host (the record as an older run wrote it).
    const message = (await old.store.message("conv-w", "m1"))!;
    const aged = { ...(message.failure as object), at: new Date(Date.now() - 120_000).toISOString() };
    const original = old.store.message.bind(old.store);
    old.store.message = async (c, id) => {
      const found = await original(c, id);
      return found?.state === "failed" ? { ...found, failure: aged } : found;
    };
    const late = (await old.runner.send("conv-w", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(late.notRetried).toBe("past_resend_window");
    expect(old.performed).toHaveLength(1);
    expect(old.provider.requests.length).toBe(requests);
  });
});
