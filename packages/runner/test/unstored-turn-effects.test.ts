import { MemoryConversationStore, MemoryLedger, StoreUnavailableError, effectOf, retryableOf, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { payCall, world } from "./toy.js";

/*
 * Found by an adoption trial: PostgreSQL unreachable for 8 s while a turn paid. The payment
 * happened, the stream was cut on every attempt, and the runner's failMessage (or, when the last
 * attempt finished, its commitTurn) met the outage: send() rejected with the store's bare
 * store_unavailable, and the user heard "possibly" about a payment the runner knew had happened.
 * The error stays store_unavailable (TURN-7: the turn's end was not stored, a re-send resumes it),
 * and now also says what the runner knew of each effect (RECORD-9).
 */

const CONV = "conv-unstored";

/** The store as it is while its server is unreachable for `method`: every call of it fails, until `heal()`. */
function outageAt(store: ConversationStore, method: "failMessage" | "commitTurn") {
  let down = true;
  const broken = Object.assign(Object.create(store) as ConversationStore, {
    [method]: (...args: unknown[]) => {
      if (down) return Promise.reject(new StoreUnavailableError(`${method}: connect ECONNREFUSED 127.0.0.1:5432`, { cause: new Error("ECONNREFUSED") }));
      return (store[method] as (...a: unknown[]) => unknown).apply(store, args);
    },
  });
  return { store: broken, heal: () => void (down = false) };
}

describe("a turn's end the store could not keep tells what happened (RECORD-9, TURN-7)", () => {
  it("RECORD-9 failMessage unreachable after every attempt was cut past the payment: store_unavailable carries effects saying the payment happened; the re-send replays it", async () => {
    const base = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const { store, heal } = outageAt(base, "failMessage");
    let cutting = true;
    const script = (_n: number, input: unknown[]) =>
      (input.at(-1) as { role?: string }).role !== "user"
        ? [{ t: "text" as const, index: 0, text: "Paid." }, { t: "end" as const }]
        : cutting
          ? [...payCall("c", "rent"), "cut" as const]
          : [...payCall("c", "rent"), { t: "end" as const }];
    const first = world(script, true, { store, ledger, performed });
    const error = await first.runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
    const unstored = error as StoreUnavailableError;
    expect(unstored.effects).toEqual([{ key: expect.stringMatching(/^[A-Za-z0-9_-]+$/), name: "pay", effect: "happened", input: { to: "acme", memo: "rent" } }]);
    expect(unstored.cause).toBeInstanceOf(StoreUnavailableError);
    // Still a store_unavailable: the message is in progress, so a re-send is what completes it.
    expect([effectOf(error), retryableOf(error)]).toEqual(["possibly", "same_message"]);
    expect(performed).toEqual([{ to: "acme", memo: "rent" }]);
    expect((await base.message(CONV, "m1"))?.state).toBe("in_progress");

    heal();
    cutting = false;
    const resent = await world(script, true, { store, ledger, performed }).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(resent.status).toBe("answered");
    expect(performed).toHaveLength(1);
    expect(resent.turns[0]?.calls.map((c) => [c.key, c.replayed])).toEqual([[unstored.effects?.[0]?.key, true]]);
  });

  it("RECORD-9 commitTurn unreachable after the paying attempt finished: store_unavailable carries effects saying the payment happened, never a failed turn (TURN-7)", async () => {
    const base = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const { store, heal } = outageAt(base, "commitTurn");
    const script = (_n: number, input: unknown[]) =>
      (input.at(-1) as { role?: string }).role === "user" ? [...payCall("c", "rent"), { t: "end" as const }] : [{ t: "text" as const, index: 0, text: "Paid." }, { t: "end" as const }];
    const error = await world(script, false, { store, ledger, performed }).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
    expect(TurnFailedError.isInstance(error)).toBe(false);
    expect((error as StoreUnavailableError).effects).toEqual([{ key: expect.any(String), name: "pay", effect: "happened", input: { to: "acme", memo: "rent" } }]);
    expect(performed).toHaveLength(1);

    heal();
    const resent = await world(script, false, { store, ledger, performed }).runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(resent.status).toBe("answered");
    expect(performed).toHaveLength(1);
  });

  it("RECORD-9 TURN-13 the record of an attempt another holder's commit superseded, unreachable: store_unavailable carries effects saying the payment happened", async () => {
    const base = new MemoryConversationStore();
    const performed: unknown[] = [];
    // The commit is refused (another holder committed the turn), then the store goes away before this attempt's record.
    const store = Object.assign(Object.create(base) as ConversationStore, {
      commitTurn: () => Promise.resolve({ committed: false }),
      addRecord: () => Promise.reject(new StoreUnavailableError("addRecord: connect ECONNREFUSED 127.0.0.1:5432")),
    });
    const script = (_n: number, input: unknown[]) =>
      (input.at(-1) as { role?: string }).role === "user" ? [...payCall("c", "rent"), { t: "end" as const }] : [{ t: "text" as const, index: 0, text: "Paid." }, { t: "end" as const }];
    const error = await world(script, false, { store, performed }).runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
    expect((error as StoreUnavailableError).effects).toEqual([{ key: expect.any(String), name: "pay", effect: "happened", input: { to: "acme", memo: "rent" } }]);
    expect(performed).toHaveLength(1);
  });

  it("RECORD-9 a store_unavailable before any call ran carries no effects (nothing to tell)", async () => {
    const base = new MemoryConversationStore();
    const { store } = outageAt(base, "commitTurn");
    const script = () => [{ t: "text" as const, index: 0, text: "Hello." }, { t: "end" as const }];
    const error = await world(script, false, { store }).runner.send(CONV, { id: "m1", content: "hi" }).catch((e: unknown) => e);
    expect(StoreUnavailableError.isInstance(error), String(error)).toBe(true);
    expect((error as StoreUnavailableError).effects).toBeUndefined();
  });
});
