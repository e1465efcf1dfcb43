import { describe, expect, it } from "vitest";
import { Dispatcher, MemoryConversationStore, MemoryLedger, type Ledger } from "@dispatch-once/core";
import { TurnFailedError, forResumedTurn, type CallRecord, type FailedTurnRecord, type SupersededAttemptRecord } from "../src/index.js";
import { providerPerTest, setup } from "./fixtures.js";

/**
 * The spin model's finding resume-says-not (spec/model/README.md, Findings 2) through the real
 * SDK, the mock provider and the mock payments API. Worker A holds the conversation, begins the
 * turn and dispatches the payment, then pauses past its turn lease before its claim reaches the
 * ledger (a GC pause, SIGSTOP). Worker B takes the conversation, resumes the message, and its one
 * attempt's payment is refused before acceptance (503): released, not performed. Worker A wakes,
 * never having learned it lost the lease, re-claims the released key and pays.
 */
const provider = providerPerTest();

/** A ledger that says it is durable (so a first claim's "not performed" is believed, 7c01856). */
function durable(base: Ledger): Ledger {
  return Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" } });
}

/** The same ledger, but the first claim waits until `wake` is called: the worker is paused right before it. */
function pausedBeforeClaim(base: Ledger): { ledger: Ledger; paused: Promise<void>; wake: () => void } {
  let wake!: () => void;
  let reached!: () => void;
  const woken = new Promise<void>((resolve) => (wake = resolve));
  const paused = new Promise<void>((resolve) => (reached = resolve));
  let first = true;
  const ledger = Object.assign(Object.create(base) as Ledger, {
    claim: async (...args: Parameters<Ledger["claim"]>) => {
      if (first) {
        first = false;
        reached();
        await woken;
      }
      return base.claim(...args);
    },
  });
  return { ledger, paused, wake };
}

describe("a resumed turn speaks for the earlier holder too (proposed TURN-15, RECORD-2)", () => {
  it("TURN-15 a paused worker pays after the resuming worker's refused attempt: the record says may_have_happened, never not_happened", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const shared = durable(new MemoryLedger());
    const { worker, effects, server, tools } = await setup(provider(), {
      guarded: true,
      latencyMs: 0,
      store,
      ledger: shared,
      runner: { turnLeaseMs: 60_000, allowVolatileConversationStore: true },
    });
    const gate = pausedBeforeClaim(shared);
    const a = worker({ dispatcher: new Dispatcher({ tools, ledger: gate.ledger, waitMs: 10_000, pollMs: 5 }) });
    const b = worker({ retry: { attempts: 1, backoffMs: () => 10 } });

    const sentByA = a.send("conv-resume", { id: "m1", content: "pay acme" }).then(
      (value) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );
    await gate.paused;
    now += 61_000; // A's turn lease lapses while it is paused
    server.injectFault({ outcome: "fail_before_accept" }, { times: 1 });
    const failedB = await b.send("conv-resume", { id: "m1", content: "pay acme" }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failedB).toBeInstanceOf(TurnFailedError);
    const record = (failedB as TurnFailedError).record;
    expect(effects()).toHaveLength(0); // B's request was refused before acceptance

    gate.wake(); // A wakes, re-claims the released key, and pays
    const outcomeA = await sentByA;
    expect(effects()).toHaveLength(1);
    const [payment] = effects();

    // What B told the user about the payment's key must hold now that A paid under it.
    const about = record.effects.find((e) => e.key === payment!.idempotencyKey);
    expect(about, JSON.stringify(record.effects)).toEqual({ key: payment!.idempotencyKey, name: "send_payment", effect: "may_have_happened", input: expect.objectContaining({ payee: "acme", amount: 125000 }) });
    expect(record.effects.map((e) => e.effect)).not.toContain("not_happened");
    expect(record.calls.map((c) => c.effect)).not.toContain("not_happened");
    // And it says why: an earlier holder may have run this turn's calls, listed here or not.
    expect(record.resumed).toBe(true);
    // The stored failure is the same record (what a re-send of m1 is answered with, TURN-12).
    expect((await store.message("conv-resume", "m1"))?.failure).toEqual(record as unknown);

    // A could not commit (B holds a later fence): its payment is kept beside the conversation (TURN-13).
    expect(outcomeA.ok).toBe(false);
    const kept = (await store.records("conv-resume")) as unknown as (FailedTurnRecord | SupersededAttemptRecord)[];
    const superseded = kept.filter((r): r is SupersededAttemptRecord => r.kind === "superseded_attempt");
    expect(superseded.flatMap((r) => r.calls.map((c) => [c.key, c.effect]))).toEqual([[payment!.idempotencyKey, "happened"]]);
    expect(kept.filter((r) => r.kind === "failed_turn").flatMap((r) => (r as FailedTurnRecord).effects.map((e) => e.effect))).not.toContain("not_happened");
  });

  it("TURN-15 the next message at a failed turn's index is resumed too: the paused worker of the failed message pays under that index's key", async () => {
    let now = 1_700_000_000_000;
    let cut = false;
    // While `cut`, every response dies while the payment's arguments stream: nothing is dispatched.
    provider().setFaultPlan(() => (cut ? { kind: "reset", at: { toolUse: 0, afterFragment: 1 } } : undefined));
    const store = new MemoryConversationStore({ now: () => now });
    const shared = durable(new MemoryLedger());
    const { worker, effects, server, tools } = await setup(provider(), {
      guarded: true,
      latencyMs: 0,
      store,
      ledger: shared,
      runner: { turnLeaseMs: 60_000, allowVolatileConversationStore: true },
    });
    const gate = pausedBeforeClaim(shared);
    const a = worker({ dispatcher: new Dispatcher({ tools, ledger: gate.ledger, waitMs: 10_000, pollMs: 5 }) });
    const b = worker({ retry: { attempts: 1, backoffMs: () => 10 } });

    const sentByA = a.send("conv-next", { id: "m1", content: "pay acme" }).catch((error: unknown) => error);
    await gate.paused;
    now += 61_000;
    cut = true;
    const m1 = (await b.send("conv-next", { id: "m1", content: "pay acme" }).catch((error: unknown) => error)) as TurnFailedError;
    expect(m1).toBeInstanceOf(TurnFailedError);
    // B never dispatched the payment, but A's run of it (same turn) is still alive: not "not happened".
    expect(m1.record).toMatchObject({ resumed: true, effects: [] });
    expect(m1.record.calls.map((c) => [c.status, c.effect])).toEqual([["not_run", "may_have_happened"]]);
    cut = false;

    // The user asks again in a new message: it takes the failed index 0 (TURN-12), so the same key.
    server.injectFault({ outcome: "fail_before_accept" }, { times: 1 });
    const m2 = (await b.send("conv-next", { id: "m2", content: "pay acme" }).catch((error: unknown) => error)) as TurnFailedError;
    expect(m2).toBeInstanceOf(TurnFailedError);
    expect(m2.record).toMatchObject({ messageId: "m2", turnIndex: 0 });
    expect(effects()).toHaveLength(0);

    gate.wake();
    await sentByA;
    expect(effects()).toHaveLength(1);
    const [payment] = effects();
    expect(m2.record.resumed).toBe(true);
    expect(m2.record.effects).toEqual([{ key: payment!.idempotencyKey, name: "send_payment", effect: "may_have_happened", input: expect.objectContaining({ payee: "acme", amount: 125000 }) }]);
    expect(m2.record.calls.map((c) => c.effect)).not.toContain("not_happened");
  });

  it("TURN-15 control: a worker that bound the message itself still says not_happened for its own refused first claim", async () => {
    const store = new MemoryConversationStore();
    const { runner, effects, server } = await setup(provider(), {
      guarded: true,
      latencyMs: 0,
      store,
      ledger: durable(new MemoryLedger()),
      runner: { retry: { attempts: 1, backoffMs: () => 10 }, allowVolatileConversationStore: true },
    });
    server.injectFault({ outcome: "fail_before_accept" }, { times: 1 });
    const failed = await runner.send("conv-own", { id: "m1", content: "pay acme" }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(failed).toBeInstanceOf(TurnFailedError);
    const record = (failed as TurnFailedError).record;
    expect(effects()).toHaveLength(0);
    expect(record.resumed).toBe(false);
    expect(record.effects.map((e) => e.effect)).toEqual(["not_happened"]);
  });
});

describe("forResumedTurn: what a resumed turn may still call not_happened", () => {
  const call = (status: CallRecord["status"], effect: CallRecord["effect"]): CallRecord => ({ attempt: 1, index: 0, callId: "toolu_1", name: "send_payment", status, effect, summary: status });
  it("TURN-15 only a definite failure and a call refused before any claim stay not_happened; reads and known effects are unchanged", () => {
    expect(forResumedTurn(call("failed", "not_happened"), false).effect).toBe("not_happened");
    expect(forResumedTurn(call("rejected", "not_happened"), false).effect).toBe("not_happened");
    for (const status of ["not_run", "released", "error", "in_flight_elsewhere"] as const) {
      const out = forResumedTurn(call(status, "not_happened"), false);
      expect([status, out.effect, out.summary], status).toEqual([status, "may_have_happened", `${status}; an earlier holder of this turn may have run it`]);
    }
    expect(forResumedTurn(call("not_run", "not_happened"), true).effect).toBe("not_happened");
    expect(forResumedTurn(call("completed", "happened"), false).effect).toBe("happened");
    expect(forResumedTurn(call("completed", "none"), true).effect).toBe("none");
  });
});
