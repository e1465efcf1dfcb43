import { MemoryConversationStore, MemoryLedger, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { TurnFailedError, type FailedTurnRecord } from "../src/index.js";
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
function setup() {
  let now = 1_000_000;
  const clock = () => now;
  const store = new MemoryConversationStore({ now: clock });
  const ledger = new MemoryLedger({ now: clock });
  const performed: unknown[] = [];
  let failing = true;
  const script = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
    const last = input.at(-1) as { role?: string; content?: unknown };
    if (last.role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
    if (last.content !== "pay acme") return [{ t: "text", index: 0, text: "You're welcome." }, { t: "end" }];
    return failing ? [...payCall("c", "first"), "cut"] : [...payCall("c", "again"), { t: "end" }];
  };
  const worker = (s: ConversationStore) => world(script, true, { store: s, ledger, performed, runner: { turnLeaseMs: 1_000 } });
  return {
    store,
    ledger,
    performed,
    worker,
    advance: (ms: number) => {
      now += ms;
    },
    recover: () => {
      failing = false;
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

async function paidFailedThenRetryDied(w: ReturnType<typeof setup>) {
  const first = await w.worker(w.store).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
  expect(first).toBeInstanceOf(TurnFailedError);
  expect(w.performed).toHaveLength(1);
  w.recover();
  // Inside the 23 h window by a minute: reopened, bound again, and its worker dies.
  w.advance(23 * HOUR - 60_000);
  void w.worker(diesAfterBegin(w.store)).runner.send(CONV, { id: "m1", content: "pay acme" });
  while ((await w.store.message(CONV, "m1"))?.state !== "in_progress") await new Promise((r) => setTimeout(r, 1));
  // Hours later: the dead worker's lease long expired, and the paid row swept (24 h after it finished).
  w.advance(2 * HOUR);
  expect(await w.ledger.sweep()).toBeGreaterThan(0);
}

describe("TURN-12 a reopened message's retry resumed after its re-send window runs nothing (TURN-15, LEDGER-13)", () => {
  it("TURN-12 a new message m2 resumes the dead retry of m1 past the window: m1 fails past_resend_window, m2 is answered, the payment is made once", async () => {
    const w = setup();
    await paidFailedThenRetryDied(w);
    const failedRecords = async () => (await w.store.records(CONV)).filter((r) => (r as { kind?: string }).kind === "failed_turn");
    const recordsBefore = (await failedRecords()).length;

    const m2 = await w.worker(w.store).runner.send(CONV, { id: "m2", content: "thanks" });
    expect(w.performed).toHaveLength(1);
    expect(m2.status).toBe("answered");
    expect(m2.turns.at(-1)?.text).toBe("You're welcome.");
    const m1 = await w.store.message(CONV, "m1");
    expect(m1?.state).toBe("failed");
    const record = m1?.failure as unknown as FailedTurnRecord;
    expect(record.notRetried).toBe("past_resend_window");
    expect(record.retryable).toBe(false);
    expect(record.attempts).toBe(0);
    // The truth about effects is kept: the first attempt's payment happened.
    expect(record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
    // Kept beside the conversation too (RECORD-4), once.
    expect((await failedRecords()).length).toBe(recordsBefore + 1);
    expect((await failedRecords()).at(-1)).toEqual(m1?.failure);
  });

  it("TURN-12 m1 re-sent after the window resumes its dead retry: TurnFailedError past_resend_window, the payment is made once", async () => {
    const w = setup();
    await paidFailedThenRetryDied(w);
    const b = w.worker(w.store);
    const requests = b.provider.requests.length;

    const resent = await b.runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(w.performed).toHaveLength(1);
    expect(b.provider.requests.length).toBe(requests);
    expect(resent).toBeInstanceOf(TurnFailedError);
    const error = resent as TurnFailedError;
    expect(error.notRetried).toBe("past_resend_window");
    expect(error.record.retryable).toBe(false);
    expect(error.record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
    // And again: the stored failure, still past the window.
    const again = (await b.runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(again.notRetried).toBe("past_resend_window");
    expect(w.performed).toHaveLength(1);
  });

  it("TURN-12 the resumed retry of m1 still inside its window runs (answered from the ledger): the check does not refuse a live retry", async () => {
    const w = setup();
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
