import type { ConversationStore, JsonValue } from "@dispatch-once/core";
import { describe, expect, it, vi } from "vitest";
import { TurnFailedError, type FailedTurnRecord } from "../src/index.js";
import { clockedStores, expectM1ResentPastWindow, expectM2AnsweredM1PastWindow } from "./past-window.js";
import { payCall, world, type ToyEvent } from "./toy.js";

const HOUR = 60 * 60 * 1000;
const CONV = "conv-dead-holder";

/**
 * TURN-12 with TURN-15 and LEDGER-13, for a message that never failed: m1 is bound, its holder
 * pays (the row completes) and dies before the commit, so m1 stays in progress and no failed-turn
 * record dates it. 25 h later (the ledger's 24 h retention swept the row) the conversation is
 * driven again, by m2 or by m1 re-sent: the next holder resumes m1's turn, the model emits the
 * same call, the key meets no row. The store's clock and the ledger's are one test clock moved by
 * hand; the store dates the binding (`boundAt`, `supports.boundAt`) and the runner checks the
 * re-send window from it before any attempt of the resumed turn.
 */
function setup(options: { withoutWindow?: boolean } = {}) {
  const { store, ledger, advance } = clockedStores({ ...options, supports: { leaseGrants: true, boundAt: true } });
  const performed: unknown[] = [];
  let modelDown = false;
  const script = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
    // The model unreachable: every attempt is cut before it emits anything.
    if (modelDown) return ["cut"];
    const last = input.at(-1) as { role?: string; content?: unknown };
    if (last.role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
    if (last.content !== "pay acme") return [{ t: "text", index: 0, text: "You're welcome." }, { t: "end" }];
    return [...payCall("c", "first"), { t: "end" }];
  };
  const worker = (s: ConversationStore) => world(script, false, { store: s, ledger, performed, runner: { turnLeaseMs: 1_000 } });
  return {
    store,
    ledger,
    performed,
    worker,
    advance,
    setModelDown: (down: boolean) => void (modelDown = down),
  };
}

/** The store as a holder that dies at its commit: the payment was made, nothing it sends from then returns. */
function diesAtCommit(store: ConversationStore): ConversationStore {
  const never = () => new Promise<never>(() => undefined);
  return Object.assign(Object.create(store) as ConversationStore, {
    commitTurn: never,
    renewLease: never,
    releaseLease: never,
  });
}

/** Until the dead holder's payment is made and its row completed (the holder then reaches its commit and hangs). */
async function paidRowCompleted(w: ReturnType<typeof setup>) {
  const completed = async () => (await w.ledger.listRows({ conversationId: CONV, state: "completed" })).rows.length;
  while (w.performed.length === 0 || (await completed()) === 0) await new Promise((r) => setTimeout(r, 1));
}

async function paidThenDied(w: ReturnType<typeof setup>) {
  void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
  await paidRowCompleted(w);
  expect((await w.store.message(CONV, "m1"))?.state).toBe("in_progress");
  // 25 h later: the dead holder's lease long expired, the paid row swept (24 h after it finished).
  w.advance(25 * HOUR);
  expect(await w.ledger.sweep()).toBeGreaterThan(0);
}

describe("TURN-12 a message that never failed, its holder paid and died, resumed after the retention runs nothing (TURN-15, LEDGER-13)", () => {
  it("TURN-12 a new message m2 resumes m1 past the window from boundAt: m1 fails past_resend_window, m2 is answered, the payment is made once", async () => {
    const w = setup();
    await paidThenDied(w);
    const m2 = await w.worker(w.store).runner.send(CONV, { id: "m2", content: "thanks" });
    const record = await expectM2AnsweredM1PastWindow(w.store, CONV, m2, w.performed);
    expect(record.resumed).toBe(true);
    // The ledger swept the row: nothing is listed, and the record says the dead holder's effects are unknown.
    expect(record.error.message).toMatch(/unknown/);
    const kept = (await w.store.records(CONV)).filter((r) => (r as { kind?: string }).kind === "failed_turn");
    expect(kept.at(-1)).toEqual(record);
  });

  it("TURN-12 m1 re-sent 25 h later: TurnFailedError past_resend_window, no model request, the payment is made once", async () => {
    const w = setup();
    await paidThenDied(w);
    await expectM1ResentPastWindow(w.worker(w.store), CONV, w.performed);
  });

  it("TURN-12 past the window but the row not swept yet: m1 runs nothing and its record lists the paid call the ledger still holds (RECORD-8)", async () => {
    const w = setup();
    void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
    await paidRowCompleted(w);
    // Past the runner's 23 h window, inside the ledger's 24 h retention.
    w.advance(23 * HOUR + 30 * 60_000);
    const m2 = await w.worker(w.store).runner.send(CONV, { id: "m2", content: "thanks" });
    expect(m2.status).toBe("answered");
    expect(w.performed).toHaveLength(1);
    const record = (await w.store.message(CONV, "m1"))?.failure as unknown as FailedTurnRecord;
    expect(record.notRetried).toBe("past_resend_window");
    expect(record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
  });

  it("TURN-12 m1 failed by the check from its binding, then re-sent again after the sweep: not reopened, the payment is made once (the model's window-first-failure)", async () => {
    // The check's own failure is m1's FIRST failure: a window counted from it would reopen m1
    // after the ledger swept the dead holder's row (spec/model finding 15).
    const w = setup();
    void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
    await paidRowCompleted(w);
    w.advance(23 * HOUR + 30 * 60_000);
    await expectM1ResentPastWindow(w.worker(w.store), CONV, w.performed);
    w.advance(HOUR);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);
    await expectM1ResentPastWindow(w.worker(w.store), CONV, w.performed);
  });

  it("TURN-11 the store dates the first binding on its clock and keeps it across the take-over", async () => {
    const w = setup();
    // A queued message is not bound yet: nothing to show.
    await w.store.appendUserMessage("conv-queued", { id: "q1", content: "later" });
    expect((await w.store.message("conv-queued", "q1"))?.boundAt).toBeUndefined();
    void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
    await paidRowCompleted(w);
    const boundAt = (await w.store.message(CONV, "m1"))?.boundAt;
    expect(boundAt).toBe(1_000_000);
    w.advance(HOUR);
    await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect((await w.store.message(CONV, "m1"))?.boundAt).toBe(boundAt);
  });

  it("TURN-12 resumed inside the window (1 h later), the turn runs and is answered from the ledger: the check does not refuse a live resume", async () => {
    const w = setup();
    void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
    await paidRowCompleted(w);
    w.advance(HOUR);
    const result = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(result.status).toBe("answered");
    expect(w.performed).toHaveLength(1);
  });
});

/**
 * TURN-12's window counts from the binding, not only from the first failure: m1's holder pays at
 * T0 and dies before the commit; 2 h later (inside the window) the next holder takes m1 over and
 * its attempts fail without a call (the model unreachable): m1's first failure is T0 + 2 h. The
 * paid row ages from T0, so counted from the first failure the window would still be open after
 * the ledger swept it.
 */
describe("TURN-12 the re-send window of a message taken over and failed counts from its binding (TURN-11 boundAt, LEDGER-13)", () => {
  async function takenOverThenFailed(w: ReturnType<typeof setup>) {
    void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
    await paidRowCompleted(w);
    w.advance(2 * HOUR);
    w.setModelDown(true);
    const failed = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(TurnFailedError);
    expect((failed as TurnFailedError).notRetried).toBeUndefined();
    w.setModelDown(false);
    expect(w.performed).toHaveLength(1);
  }

  it("TURN-12 m1 re-sent 22.5 h after its first failure (24.5 h after its binding, the paid row swept): not reopened, past_resend_window, the payment is made once", async () => {
    const w = setup();
    await takenOverThenFailed(w);
    w.advance(22 * HOUR + 30 * 60_000);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);
    const error = await expectM1ResentPastWindow(w.worker(w.store), CONV, w.performed);
    expect(error.record.retryable).toBe(false);
    expect((await w.store.message(CONV, "m1"))?.state).toBe("failed");
  });

  it("TURN-12 over a store without supports.reopenWindow that dates the binding, the runner's own re-send check counts from boundAt: past_resend_window, the payment is made once", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(1_000_000_000);
    try {
      const w = setup({ withoutWindow: true });
      await takenOverThenFailed(w);
      w.advance(22 * HOUR + 30 * 60_000);
      expect(await w.ledger.sweep()).toBeGreaterThan(0);
      await expectM1ResentPastWindow(w.worker(w.store), CONV, w.performed);
      // Refused at the re-send, not reopened (the check before a resumed turn would then fail it
      // again, with a second failed-turn record): the take-over's failure is the only one.
      const failed = (await w.store.records(CONV)).filter((r) => (r as { kind?: string }).kind === "failed_turn");
      expect(failed.map((r) => (r as unknown as FailedTurnRecord).position)).not.toContain("past_resend_window");
      expect(failed).toHaveLength(1);
    } finally {
      vi.useRealTimers();
    }
  });

  for (const withoutWindow of [false, true]) {
    const over = withoutWindow ? "a store without supports.reopenWindow (from the failed-turn records and boundAt)" : "a store with supports.reopenWindow (from firstFailedAt and boundAt)";
    it(`TURN-12 m1 reopened inside the window, its retry's holder dies, m2 resumes it 24.5 h after the binding: m1 runs nothing, the payment is made once, over ${over}`, async () => {
      if (withoutWindow) {
        vi.useFakeTimers({ toFake: ["Date"] });
        vi.setSystemTime(1_000_000_000);
      }
      try {
        const w = setup({ withoutWindow });
        await takenOverThenFailed(w);
        // 20 h after the binding: inside the window from either time; the retry's holder hangs before it runs.
        w.advance(18 * HOUR);
        void w.worker(diesAtCommit(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
        while ((await w.store.message(CONV, "m1"))?.state !== "in_progress") await new Promise((r) => setTimeout(r, 1));
        w.advance(4 * HOUR + 30 * 60_000);
        expect(await w.ledger.sweep()).toBeGreaterThan(0);
        const m2 = await w.worker(w.store).runner.send(CONV, { id: "m2", content: "thanks" });
        const record = await expectM2AnsweredM1PastWindow(w.store, CONV, m2, w.performed);
        expect(record.error.message).toMatch(/binding/);
      } finally {
        vi.useRealTimers();
      }
    });
  }
});
