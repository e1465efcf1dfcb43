import { StoreUnavailableError, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { clockedStores } from "./past-window.js";
import { payCall, world, type ToyEvent } from "./toy.js";

const HOUR = 60 * 60 * 1000;
const CONV = "conv-lost-binding";

/**
 * TURN-11/TURN-12, the first-run exemption's limit (found by h-attack2): m1 pays at T0 and fails;
 * at T0 + 25 h m3 ("thanks") is bound at m1's index, inheriting m1's window start, and the reply
 * of the `beginTurn` that bound it is lost (store_unavailable after it applied). Re-sent, m3 is in
 * progress and not bound by the re-send's call: the runner cannot tell that nothing of it ran from
 * a holder that replayed m1's rows and died, and refuses it (the safe side: no payment). What
 * must hold: nothing is paid again, the record does not claim more than is known, and the next
 * message is answered.
 */
describe("TURN-12 a message whose binding reply was lost, taken up past the inherited window", () => {
  it("TURN-12 the re-send runs nothing, its record says an earlier holder bound it and did not finish it, and a new message is answered", async () => {
    const { store, ledger, advance } = clockedStores({});
    const performed: unknown[] = [];
    const script = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] => {
      const last = input.at(-1) as { role?: string; content?: unknown };
      if (last.role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
      if (last.content !== "pay acme") return [{ t: "text", index: 0, text: "You're welcome." }, { t: "end" }];
      return [...payCall("c", "first"), "cut"];
    };
    const worker = (over: ConversationStore = store) => world(script, true, { store: over, ledger, performed, runner: { turnLeaseMs: 1_000 } });
    const m1 = await worker().runner.send(CONV, { id: "m1", content: "pay acme" }).catch((e: unknown) => e);
    expect(m1).toBeInstanceOf(TurnFailedError);
    advance(25 * HOUR);
    expect(await ledger.sweep()).toBeGreaterThan(0);
    const lossy = Object.assign(Object.create(store) as ConversationStore, {
      beginTurn: async (...a: Parameters<ConversationStore["beginTurn"]>) => {
        await store.beginTurn(...a);
        throw new StoreUnavailableError("beginTurn: the reply was lost", { cause: new Error("socket closed") });
      },
    });
    const lost = await worker(lossy).runner.send(CONV, { id: "m3", content: "thanks" }).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(StoreUnavailableError);
    advance(2_000); // the lease of the holder that lost the reply expires
    const again = await worker().runner.send(CONV, { id: "m3", content: "thanks" }).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(TurnFailedError);
    expect((again as TurnFailedError).notRetried).toBe("past_resend_window");
    const record = (again as TurnFailedError).record;
    expect([record.attempts, record.effects, record.resumed]).toEqual([0, [], true]);
    expect(record.error.message).toMatch(/an earlier holder bound it and did not finish it; it died or lost the lease before the commit, or the store's reply to the binding was lost/);
    expect(performed).toHaveLength(1);
    const m4 = await worker().runner.send(CONV, { id: "m4", content: "thanks" });
    expect(m4.status).toBe("answered");
    expect(performed).toHaveLength(1);
  });
});
