import { MemoryConversationStore, MemoryLedger, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { world, type ToyEvent } from "./toy.js";

/**
 * A message whose first turn (the call and its result) was committed by worker A, which then died
 * (or paused past its turn lease) before the model's answer to the result. Worker B re-sends the
 * message and commits that answer. What B's send() returns is the answer to the message, and a
 * client takes it as authoritative (STREAM-9): it must hold every committed turn of the message,
 * the payment A committed included, not only the turn B produced. (Found by the crash suite,
 * faults/test/crash.test.ts, "killed after_commit (#1)".)
 */
const CONV = "conv-resumed-send";

const payThenText = (_n: number, input: JsonValue[]): (ToyEvent | "cut")[] =>
  (input.at(-1) as { role?: string }).role === "user"
    ? [{ t: "call", index: 0, id: "call_1", name: "pay" }, { t: "args", index: 0, json: `{"to":"acme","memo":"m"}` }, { t: "done", index: 0 }, { t: "end" }]
    : [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];

/** The store as worker A sees it after its first commit: nothing it sends returns any more. */
function diesAfterFirstCommit(store: ConversationStore): ConversationStore {
  let commits = 0;
  const never = () => new Promise<never>(() => undefined);
  return Object.assign(Object.create(store) as ConversationStore, {
    commitTurn: async (...args: Parameters<ConversationStore["commitTurn"]>) => (++commits === 1 ? store.commitTurn(...args) : never()),
    renewLease: never,
    releaseLease: never,
  });
}

describe("a message finished by another worker than the one that began it", () => {
  it("TURN-7 the answer holds every committed turn of the message: the turn the dead worker committed (read back) and the one produced now", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const a = world(payThenText, false, { store: diesAfterFirstCommit(store), ledger, performed, runner: { turnLeaseMs: 1_000 } });
    void a.runner.send(CONV, { id: "m1", content: "pay acme" });
    while ((await store.turnsOf(CONV, "m1")).length === 0) await new Promise((r) => setTimeout(r, 1));
    now += 60_000; // A's turn lease lapses

    const b = world(payThenText, false, { store, ledger, performed });
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(performed).toHaveLength(1);
    expect(result.fromStore).toBe(false);
    // The toy stream side reads a stored turn's calls by id and name.
    expect(result.turns.map((t) => [t.turnIndex, t.attempts, t.calls.map((c) => [c.callId, c.name]), t.text])).toEqual([
      [0, 0, [["call_1", "pay"]], ""],
      [1, 1, [], "Paid."],
    ]);
    // The same answer as a later re-send reads back from the store.
    const again = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.fromStore).toBe(true);
    expect(again.turns.map((t) => [t.turnIndex, t.calls.map((c) => c.callId)])).toEqual([
      [0, ["call_1"]],
      [1, []],
    ]);
  });

  it("TURN-7 a worker paused after its first commit wakes when another finished the message: its answer holds the other's turn too", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    // Worker A stops (a GC pause, SIGSTOP) right after its first commit, until woken.
    let wake!: () => void;
    const woken = new Promise<void>((resolve) => (wake = resolve));
    let commits = 0;
    const paused = Object.assign(Object.create(store) as ConversationStore, {
      commitTurn: async (...args: Parameters<ConversationStore["commitTurn"]>) => {
        const committed = await store.commitTurn(...args);
        if (++commits === 1) await woken;
        return committed;
      },
    });
    const a = world(payThenText, false, { store: paused, ledger, performed, runner: { turnLeaseMs: 1_000 } });
    const sentByA = a.runner.send(CONV, { id: "m1", content: "pay acme" });
    while ((await store.turnsOf(CONV, "m1")).length === 0) await new Promise((r) => setTimeout(r, 1));
    now += 60_000; // A's turn lease lapses while it is paused

    const b = world(payThenText, false, { store, ledger, performed });
    const byB = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(byB.turns.map((t) => [t.turnIndex, t.attempts])).toEqual([[0, 0], [1, 1]]);
    wake();
    const byA = await sentByA;
    expect(performed).toHaveLength(1);
    // A produced turn 0 and lost the lease; B produced turn 1: A's answer is the whole message.
    expect(byA.turns.map((t) => [t.turnIndex, t.attempts, t.calls.map((c) => c.callId), t.text])).toEqual([
      [0, 1, ["call_1"], ""],
      [1, 0, [], ""],
    ]);
  });
});
