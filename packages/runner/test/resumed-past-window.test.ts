import type { ConversationStore, JsonValue } from "@dispatch-once/core";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { clockedStores, expectM1ResentPastWindow, expectM2AnsweredM1PastWindow } from "./past-window.js";
import { payCall, world, type ToyEvent } from "./toy.js";

const HOUR = 60 * 60 * 1000;
const CONV = "conv-dead-retry";

/**
 * TURN-12 with TURN-15 and LEDGER-13: m1 paid and failed; nearly a whole re-send window later it
 * is re-sent and reopened, and the worker running its retry dies right after binding it (the
 * message stays in progress). Hours later the conversation is driven again (a new message m2, or
 * m1 re-sent): the next holder resumes m1. By then the ledger swept the paid row (its retention
 * counts from the first attempt), so a resumed retry would pay a second time. The store's clock
 * and the ledger's are one test clock moved by hand.
 */
function setup(options: { withoutWindow?: boolean } = {}) {
  const { store, ledger, advance } = clockedStores(options);
  const performed: unknown[] = [];
  let failing = true;
  let failingAgain = false;
  const script = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
    const last = input.at(-1) as { role?: string; content?: unknown };
    if (last.role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
    if (last.content !== "pay acme") return [{ t: "text", index: 0, text: "You're welcome." }, { t: "end" }];
    return failing || failingAgain ? [...payCall("c", "first"), "cut"] : [...payCall("c", "again"), { t: "end" }];
  };
  const worker = (s: ConversationStore) => world(script, true, { store: s, ledger, performed, runner: { turnLeaseMs: 1_000 } });
  return {
    store,
    ledger,
    performed,
    worker,
    advance,
    recover: () => {
      failing = false;
    },
    failAgain: (on: boolean) => {
      failingAgain = on;
    },
  };
}


/** The store as a worker that dies right after it bound the message to its turn: nothing it sends later returns. */
function diesAfterBegin(store: ConversationStore): ConversationStore {
  const never = () => new Promise<never>(() => undefined);
  return Object.assign(Object.create(store) as ConversationStore, {
    beginTurn: async (...args: Parameters<ConversationStore["beginTurn"]>) => {
      await store.beginTurn(...args);
      return never();
    },
    renewLease: never,
    releaseLease: never,
  });
}

async function paidAndFailed(w: ReturnType<typeof setup>) {
  const first = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
  expect(first).toBeInstanceOf(TurnFailedError);
  expect(w.performed).toHaveLength(1);
  w.recover();
}

async function retryDied(w: ReturnType<typeof setup>) {
  void w.worker(diesAfterBegin(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
  while ((await w.store.message(CONV, "m1"))?.state !== "in_progress") await new Promise((r) => setTimeout(r, 1));
}

async function paidFailedThenRetryDied(w: ReturnType<typeof setup>) {
  await paidAndFailed(w);
  // Inside the 23 h window by a minute: reopened, bound again, and its worker dies.
  w.advance(23 * HOUR - 60_000);
  await retryDied(w);
  // Hours later: the dead worker's lease long expired, and the paid row swept (24 h after it finished).
  w.advance(2 * HOUR);
  expect(await w.ledger.sweep()).toBeGreaterThan(0);
}

for (const withoutWindow of [false, true]) {
  const store = withoutWindow ? "a store without supports.reopenWindow: from the failed-turn records" : "a store with supports.reopenWindow: from firstFailedAt";
  describe(`TURN-12 a reopened message's retry resumed after its re-send window runs nothing (TURN-15, LEDGER-13), ${store}`, () => {
    beforeEach(() => {
      if (!withoutWindow) return;
      vi.useFakeTimers({ toFake: ["Date"] });
      vi.setSystemTime(1_000_000_000);
    });
    afterEach(() => {
      vi.useRealTimers();
    });
    it("TURN-12 a new message m2 resumes the dead retry of m1 past the window: m1 fails past_resend_window, m2 is answered, the payment is made once", async () => {
      const w = setup({ withoutWindow });
      await paidFailedThenRetryDied(w);
      const failedRecords = async () => (await w.store.records(CONV)).filter((r) => (r as { kind?: string }).kind === "failed_turn");
      const recordsBefore = (await failedRecords()).length;

      const m2 = await w.worker(w.store).runner.send(CONV, { id: "m2", content: "thanks" });
      const record = await expectM2AnsweredM1PastWindow(w.store, CONV, m2, w.performed);
      // The truth about effects is kept: the first attempt's payment happened.
      expect(record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
      // Kept beside the conversation too (RECORD-4), once.
      expect((await failedRecords()).length).toBe(recordsBefore + 1);
      expect((await failedRecords()).at(-1)).toEqual(record);
    });

    it("TURN-12 m1 re-sent after the window resumes its dead retry: TurnFailedError past_resend_window, the payment is made once", async () => {
      const w = setup({ withoutWindow });
      await paidFailedThenRetryDied(w);
      const b = w.worker(w.store);
      const error = await expectM1ResentPastWindow(b, CONV, w.performed);
      expect(error.record.retryable).toBe(false);
      expect(error.record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
      // And again: the stored failure, still past the window.
      const again = (await b.runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
      expect(again.notRetried).toBe("past_resend_window");
      expect(w.performed).toHaveLength(1);
    });

    it("TURN-12 the resumed retry of m1 still inside its window runs (answered from the ledger): the check does not refuse a live retry", async () => {
      const w = setup({ withoutWindow });
      await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
      w.recover();
      w.advance(HOUR);
      void w.worker(diesAfterBegin(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
      while ((await w.store.message(CONV, "m1"))?.state !== "in_progress") await new Promise((r) => setTimeout(r, 1));
      w.advance(60_000);
      const result = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" });
      expect(result.status).toBe("answered");
      expect(w.performed).toHaveLength(1);
    });
  });
}

describe("TURN-12 a store without supports.reopenWindow: the first failure is read from the failed-turn records (RECORD-4, LEDGER-13)", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(1_000_000_000);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("TURN-12 a retry that failed again does not move the window: a re-send after the sweep, measured from the first failure, runs nothing", async () => {
    const w = setup({ withoutWindow: true });
    await paidAndFailed(w);
    // A retry inside the window replays the payment and is cut again: the store's failedAt moves to now.
    w.failAgain(true);
    w.advance(22 * HOUR);
    const retried = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(retried).toBeInstanceOf(TurnFailedError);
    expect(w.performed).toHaveLength(1);
    w.failAgain(false);
    // 25 h after the first failure (3 h after the last): the paid row is swept.
    w.advance(3 * HOUR);
    expect(await w.ledger.sweep()).toBeGreaterThan(0);

    const resent = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(w.performed).toHaveLength(1);
    expect(resent).toBeInstanceOf(TurnFailedError);
    expect((resent as TurnFailedError).notRetried).toBe("past_resend_window");
  });

  it("TURN-12 past the window by the records but another message bound since: the store's reason, another_message_bound, is the one told", async () => {
    const w = setup({ withoutWindow: true });
    await paidAndFailed(w);
    expect((await w.worker(w.store).runner.send(CONV, { id: "m2", content: "thanks" })).status).toBe("answered");
    w.advance(25 * HOUR);
    const resent = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(resent).toBeInstanceOf(TurnFailedError);
    expect((resent as TurnFailedError).notRetried).toBe("another_message_bound");
    expect(w.performed).toHaveLength(1);
  });
});
