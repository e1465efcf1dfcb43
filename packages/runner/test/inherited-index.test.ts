import { StoreUnavailableError, type ConversationStore, type ConversationStoreSupports, type JsonValue } from "@dispatch-once/core";
import { afterEach, describe, expect, it, vi } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { clockedStores } from "./past-window.js";
import { payCall, world, type ToyEvent } from "./toy.js";

const HOUR = 60 * 60 * 1000;
const CONV = "conv-inherited";

/**
 * TURN-12 with TURN-11 and LEDGER-13, for a message bound at the turn index of a failed one:
 * keys come from the turn index, not the message, so m2 ("pay acme" again, a new id) bound where
 * m1 failed meets m1's rows. m1 paid at T0 and failed; m2, bound 23 h later, replays m1's
 * completed row (told the payment happened) and fails too. The ledger's 24 h retention sweeps the
 * row at T0 + 24 h. A re-send of m2, or a take-over of it, at T0 + 24.5 h is 1.5 h after m2's own
 * binding, well inside a window counted from it, yet the row its calls met is gone: the call
 * would run again. m2's window has to count from the index's first binding (m1's). The store's
 * and the ledger's clocks are one test clock moved by hand (the process clock, faked, where the
 * runner reads failed-turn records).
 */
function setup(store: { withoutWindow?: boolean; supports?: ConversationStoreSupports }) {
  const { store: s, ledger, advance } = clockedStores(store);
  const performed: unknown[] = [];
  let cutting = true;
  const script = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
    const last = input.at(-1) as { role?: string; content?: unknown };
    if (last.role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
    if (last.content !== "pay acme") return [{ t: "text", index: 0, text: "You're welcome." }, { t: "end" }];
    // Every attempt is cut after the payment resolved while `cutting`, so the message fails.
    return cutting ? [...payCall("c", "first"), "cut"] : [...payCall("c", "first"), { t: "end" }];
  };
  const worker = (over: ConversationStore = s) => world(script, true, { store: over, ledger, performed, runner: { turnLeaseMs: 1_000 } });
  return { store: s, ledger, performed, worker, advance, recover: () => void (cutting = false) };
}

type World = ReturnType<typeof setup>;

/**
 * The store as a holder that dies at its commit: from then on nothing it sends returns. Its
 * renewals before that work: a resumed turn's window check reads the store's clock through one.
 */
function diesAtCommit(store: ConversationStore): ConversationStore {
  let dead = false;
  const never = () => new Promise<never>(() => undefined);
  return Object.assign(Object.create(store) as ConversationStore, {
    commitTurn: () => ((dead = true), never()),
    renewLease: (...a: Parameters<ConversationStore["renewLease"]>) => (dead ? never() : store.renewLease(...a)),
    releaseLease: never,
  });
}

/** m1 pays at T0 and fails (its record: the payment happened). */
async function m1PaidAndFailed(w: World) {
  const m1 = await w.worker().runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
  expect(m1).toBeInstanceOf(TurnFailedError);
  expect((m1 as TurnFailedError).record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
  expect(w.performed).toHaveLength(1);
}

/** m1 pays at T0 and fails; m2 is bound at its index at T0 + 23 h, replays m1's row, and fails too. */
async function m2FailedAtM1sIndex(w: World) {
  await m1PaidAndFailed(w);
  w.advance(23 * HOUR);
  const m2 = await w.worker().runner.send(CONV, { id: "m2", content: "pay acme" }).catch((e: unknown) => e);
  expect(m2).toBeInstanceOf(TurnFailedError);
  // m2 replayed m1's row: its record says the payment happened, and it was not made again.
  expect((m2 as TurnFailedError).record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
  expect(w.performed).toHaveLength(1);
  expect((await w.store.message(CONV, "m2"))?.turnIndex).toBe(0);
}

/**
 * m1 pays at T0 and fails; at T0 + 23 h m2's holder binds m2 at m1's index, replays m1's row (no
 * payment) and dies at its commit; at T0 + 24.5 h the ledger has swept the row.
 */
async function m2ReplayedThenDied(w: World) {
  await m1PaidAndFailed(w);
  w.advance(23 * HOUR);
  w.recover();
  const holder = w.worker(diesAtCommit(w.store));
  void holder.runner.send(CONV, { id: "m2", content: "pay acme" });
  while (!holder.events.some((e) => e.type === "call_resolved")) await new Promise((r) => setTimeout(r, 1));
  expect(w.performed).toHaveLength(1);
  await sweptPastRetention(w);
}

/** To T0 + 24.5 h: the ledger's retention (24 h) swept m1's row. */
async function sweptPastRetention(w: World) {
  w.advance(1.5 * HOUR);
  expect(await w.ledger.sweep()).toBeGreaterThan(0);
}

const stores: { name: string; store: { withoutWindow?: boolean; supports?: ConversationStoreSupports } }[] = [
  { name: "a store that decides the window and dates the binding (reopenWindow, boundAt)", store: {} },
  { name: "a store that dates the binding only (boundAt): the runner checks", store: { withoutWindow: true, supports: { leaseGrants: true, boundAt: true } } },
  { name: "a store that does neither: the runner checks from the failed-turn records at the index", store: { withoutWindow: true, supports: { leaseGrants: true } } },
];

describe("TURN-12 a message bound at a failed turn's index counts its re-send window from the index's first binding (TURN-11, LEDGER-13)", () => {
  afterEach(() => void vi.useRealTimers());

  for (const { name, store } of stores) {
    it(`TURN-12 m2 re-sent after the ledger swept m1's row runs nothing and says why; the payment is made once: ${name}`, async () => {
      if (store.withoutWindow) vi.useFakeTimers({ toFake: ["Date"] });
      const w = setup(store);
      await m2FailedAtM1sIndex(w);
      await sweptPastRetention(w);
      w.recover();
      const recordsBefore = (await w.store.records(CONV)).length;
      const worker = w.worker();
      const resent = await worker.runner.send(CONV, { id: "m2", content: "pay acme" }).catch((e: unknown) => e);
      expect(w.performed).toHaveLength(1);
      expect(worker.provider.requests).toHaveLength(0);
      expect(resent).toBeInstanceOf(TurnFailedError);
      expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
      expect((await w.store.message(CONV, "m2"))?.state).toBe("failed");
      // Decided before the append, from m1's failure at m2's index too (TURN-12): the stored
      // failure is returned as it is, never reopened for a holder's later check to fail again.
      expect((resent as TurnFailedError).replayed).toBe(true);
      expect(await w.store.records(CONV)).toHaveLength(recordsBefore);
    });
  }

  it("TURN-12 m2's holder replays m1's row and dies before the commit; its take-over after the sweep runs nothing, and the next message is answered", async () => {
    const w = setup({});
    await m2ReplayedThenDied(w);
    const m3 = await w.worker().runner.send(CONV, { id: "m3", content: "thanks" });
    expect(m3.status).toBe("answered");
    expect(w.performed).toHaveLength(1);
    const m2 = await w.store.message(CONV, "m2");
    expect(m2?.state).toBe("failed");
    expect((m2?.failure as { notRetried?: string }).notRetried).toBe("past_resend_window");
  });

  it("TURN-12 over a store that dates no binding (the failed-turn records at the index): m2's take-over after the sweep runs nothing, and its record says it never failed and what the ledger still lists", async () => {
    vi.useFakeTimers({ toFake: ["Date"] });
    const w = setup({ withoutWindow: true, supports: { leaseGrants: true } });
    await m2ReplayedThenDied(w);
    const m3 = await w.worker().runner.send(CONV, { id: "m3", content: "thanks" });
    expect(m3.status).toBe("answered");
    expect(w.performed).toHaveLength(1);
    const m2 = await w.store.message(CONV, "m2");
    const record = m2?.failure as { notRetried?: string; error: { message: string }; effects: unknown[] };
    expect([m2?.state, record.notRetried]).toEqual(["failed", "past_resend_window"]);
    expect(record.error.message).toMatch(/^not run: .* measured from the first failure at its turn index .*\(it never failed/);
    // The row was swept: nothing is listed, and the record says what the earlier holder did is unknown.
    expect(record.effects).toEqual([]);
    expect(record.error.message).toMatch(/unknown where nothing is listed/);
  });

  it("TURN-12 a new message bound at a failed index after the window still runs its first attempt (a new request, not a re-send), and is answered", async () => {
    const w = setup({});
    await m1PaidAndFailed(w);
    w.advance(25 * HOUR);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);
    w.recover();
    const m2 = await w.worker().runner.send(CONV, { id: "m2", content: "pay acme" });
    expect(m2.status).toBe("answered");
    expect(w.performed).toHaveLength(2);
    expect((await w.store.message(CONV, "m2"))?.turnIndex).toBe(0);
  });

  it("TURN-12 a message whose binding reply was lost, re-sent past the inherited window: runs nothing (it cannot be told from a holder that replayed and died), its record claims no more than is known, and a new message is answered", async () => {
    // The first-run exemption's limit (found by h-attack2): at T0 + 25 h m3 is bound at m1's index
    // (its boundAt inherited) and the reply of that beginTurn is lost after it applied. Re-sent,
    // m3 is in progress and not bound by the re-send's call, so it is taken for a take-over.
    const w = setup({});
    await m1PaidAndFailed(w);
    w.advance(25 * HOUR);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);
    const lossy = Object.assign(Object.create(w.store) as ConversationStore, {
      beginTurn: async (...a: Parameters<ConversationStore["beginTurn"]>) => {
        await w.store.beginTurn(...a);
        throw new StoreUnavailableError("beginTurn: the reply was lost", { cause: new Error("socket closed") });
      },
    });
    const lost = await w.worker(lossy).runner.send(CONV, { id: "m3", content: "thanks" }).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(StoreUnavailableError);
    w.advance(2_000); // the lease of the holder that lost the reply expires
    const again = await w.worker().runner.send(CONV, { id: "m3", content: "thanks" }).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(TurnFailedError);
    expect((again as TurnFailedError).notRetried).toBe("past_resend_window");
    const record = (again as TurnFailedError).record;
    expect([record.attempts, record.effects, record.resumed]).toEqual([0, [], true]);
    expect(record.error.message).toMatch(/an earlier holder bound it and did not finish it; it died or lost the lease before the commit, or the store's reply to the binding was lost/);
    expect(w.performed).toHaveLength(1);
    const m4 = await w.worker().runner.send(CONV, { id: "m4", content: "thanks" });
    expect(m4.status).toBe("answered");
    expect(w.performed).toHaveLength(1);
  });
});
