import { MemoryConversationStore, MemoryLedger, type ConversationStore, type JsonValue } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { TurnFailedError, type ResumedTurnRecord } from "../src/index.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * A re-run of a turn may answer differently (RECORD-8): attempt 1 pays acme and its stream is cut
 * after the payment; the model answers attempt 2 with another call (it looks something up first, or
 * pays bob) and the turn commits without acme's payment, which its record lists as happened. The
 * message goes on: in its next turn the model, which never saw acme paid, pays acme. Its key is made
 * at the new turn index, so it met no row and paid acme a second time for one ask. TURN-23: a
 * later turn of the same message answers such a call from the earlier turn's row.
 */
const CONV = "conv-deferred";

const payBob: ToyEvent[] = [
  { t: "call", index: 0, id: "c-bob", name: "pay" },
  { t: "args", index: 0, json: '{"to":"bob","memo":"rent"}' },
  { t: "done", index: 0 },
  { t: "end" },
];
const paid: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];
const payAcmeIn = (id: string, memo: string): (ToyEvent | "cut")[] => [
  { t: "call", index: 0, id, name: "pay" },
  { t: "args", index: 0, json: `{"to":"acme","memo":"${memo}"}` },
  { t: "done", index: 0 },
  { t: "end" },
];

/** Request 1 pays acme and is cut; request 2 (the retry) pays bob; request 3 (turn 1) pays acme; then text. */
const deferred = (n: number): (ToyEvent | "cut")[] => {
  if (n === 1) return [...payCall("c1", "first"), "cut"];
  if (n === 2) return payBob;
  if (n === 3) return payAcmeIn("c3", "deferred");
  return paid;
};

/** Worker A's view of the store: its process dies as it begins its `n`-th turn (the message stays bound, in progress). */
function diesAtBeginTurn(base: MemoryConversationStore, n: number): ConversationStore {
  let begun = 0;
  return Object.assign(Object.create(base) as ConversationStore, {
    beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => {
      if (++begun === n) return Promise.reject(new Error("worker A's process died"));
      return base.beginTurn(...args);
    },
  });
}

function kept(records: JsonValue[]): ResumedTurnRecord[] {
  return (records as unknown as { kind: string }[]).filter((r) => r.kind === "resumed_turn") as unknown as ResumedTurnRecord[];
}

describe("a call a re-run of a turn left unanswered, made again in a later turn of the same message (TURN-23)", () => {
  it("TURN-23 acme paid in attempt 1, the retry pays bob and commits, turn 1 pays acme: answered from turn 0's row, acme paid once", async () => {
    const { runner, performed, events, store } = world(deferred, true);
    const result = await runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    const firstKey = events.flatMap((e) => (e.type === "call_resolved" && e.turnIndex === 0 && e.attempt === 1 && e.ok ? [e.key] : []))[0];
    expect(firstKey).toBeDefined();
    expect(result.turns.map((t) => t.turnIndex)).toEqual([0, 1, 2]);
    // Turn 1's call is answered with turn 0's payment: its key, its stored result, replayed.
    expect(result.turns[1]!.calls).toEqual([expect.objectContaining({ name: "pay", key: firstKey, replayed: true, result: { n: 1 } })]);
    // Turn 0's record told of the payment it left unanswered; it is answered now, in turn 1.
    expect(kept(await store.records(CONV)).map((r) => [r.turnIndex, r.calls.map((c) => c.key)])).toEqual([[0, [firstKey]]]);
  });

  it("TURN-23 a call answered so in a later turn is not answered again: a second identical call in turn 2 pays (the model saw the first paid)", async () => {
    const { runner, performed } = world((n) => (n === 4 ? payAcmeIn("c4", "again") : n === 5 ? paid : deferred(n)), true);
    const result = await runner.send(CONV, { id: "m1", content: "pay acme, bob, then acme again" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
    expect(result.turns.map((t) => t.calls.map((c) => c.replayed))).toEqual([[false], [true], [false], []]);
  });

  it("TURN-23 only the same call is answered so: another payee in turn 1 pays", async () => {
    const { runner, performed } = world((n) => (n === 3 ? [{ t: "call", index: 0, id: "c3", name: "pay" }, { t: "args", index: 0, json: '{"to":"carol","memo":"x"}' }, { t: "done", index: 0 }, { t: "end" }] : deferred(n)), true);
    await runner.send(CONV, { id: "m1", content: "pay" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "carol"]);
  });

  it("TURN-23 a call of the NEXT message is a new ask: it pays", async () => {
    const { runner, performed } = world((n) => (n === 3 ? paid : n === 4 ? payAcmeIn("c4", "next") : n === 5 ? paid : deferred(n)), true);
    await runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    await runner.send(CONV, { id: "m2", content: "pay acme" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
  });

  it("TURN-23 two identical payments left unanswered are answered by two identical calls of the next turn, each once", async () => {
    const twice: (ToyEvent | "cut")[] = [
      ...payCall("c1a", "first"),
      { t: "call", index: 1, id: "c1b", name: "pay" },
      { t: "args", index: 1, json: '{"to":"acme","memo":"second"}' },
      { t: "done", index: 1 },
      "cut",
    ];
    const twiceAgain: (ToyEvent | "cut")[] = [
      ...payAcmeIn("c3a", "x").slice(0, 3),
      { t: "call", index: 1, id: "c3b", name: "pay" },
      { t: "args", index: 1, json: '{"to":"acme","memo":"y"}' },
      { t: "done", index: 1 },
      { t: "call", index: 2, id: "c3c", name: "pay" },
      { t: "args", index: 2, json: '{"to":"acme","memo":"z"}' },
      { t: "done", index: 2 },
      { t: "end" },
    ];
    const { runner, performed } = world((n) => (n === 1 ? twice : n === 2 ? payBob : n === 3 ? twiceAgain : paid), true);
    const result = await runner.send(CONV, { id: "m1", content: "pay acme three times" });
    // Two acme payments in attempt 1 (ordinals 0 and 1), bob, and only the third acme of turn 1 runs.
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "acme", "bob", "acme"]);
    expect(result.turns[1]!.calls.map((c) => c.replayed)).toEqual([true, true, false]);
    // The carried calls still count among turn 1's identical calls (TURN-4): the third is ordinal 2 there.
    expect(result.turns[1]!.calls.map((c) => [c.ordinal, c.carriedFromTurn])).toEqual([
      [0, 0],
      [1, 0],
      [2, undefined],
    ]);
  });

  it("TURN-23 a holder that took the message up after turn 0 committed (its first holder died) answers turn 1's call from the records beside the conversation", async () => {
    const ledger = new MemoryLedger();
    const base = new MemoryConversationStore();
    const performed: unknown[] = [];
    // Worker A dies as it begins turn 1: its process is gone, the message is bound and in progress.
    const dying = diesAtBeginTurn(base, 2);
    const a = world(deferred, true, { store: dying, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("worker A's process died");
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    // Worker B: the same message re-sent; the model makes turn 1's call, acme.
    const b = world((n) => (n === 1 ? payAcmeIn("c3", "deferred") : paid), false, { store: base, ledger, performed });
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls).toEqual([expect.objectContaining({ name: "pay", replayed: true, result: { n: 1 } })]);
  });

  it("TURN-23 a holder that takes the message up after turn 1 answered the carried call does not answer it again: turn 2's identical call pays", async () => {
    const ledger = new MemoryLedger();
    const base = new MemoryConversationStore();
    const performed: unknown[] = [];
    const dying = diesAtBeginTurn(base, 3);
    const a = world(deferred, true, { store: dying, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme, bob, then acme again" })).rejects.toThrow("worker A's process died");
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    const b = world((n) => (n === 1 ? payAcmeIn("c4", "again") : paid), false, { store: base, ledger, performed });
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme, bob, then acme again" });
    // The model saw turn 1's acme answered: its turn-2 call is a second payment.
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
    expect(result.turns.find((t) => t.turnIndex === 2)?.calls.map((c) => [c.replayed, c.carriedFromTurn])).toEqual([[false, undefined]]);
  });

  it("TURN-23 a carried call whose row is still in flight (its first holder paused mid-payment) is not run again: the later turn's call meets the live claim", async () => {
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const started: string[] = [];
    const never = new Promise<void>(() => {});
    // Worker A binds m1, claims acme's payment and hangs inside it (a paused process): its row stays in flight.
    const a = world(() => [], false, { store, ledger, performed, beforePay: (args) => (started.push((args as { to: string }).to), never) });
    await store.appendUserMessage(CONV, { id: "m1", content: { role: "user", content: "pay acme and bob" } });
    const lease = await store.acquireLease(CONV, "worker-a", 1_000);
    if (!lease.acquired) throw new Error("worker A could not take the conversation");
    const snapshot = await store.beginTurn(CONV, lease.fence);
    void a.dispatcher.turn({ conversationId: CONV, turnIndex: snapshot!.turnIndex }).dispatch({ name: "pay", input: { to: "acme", memo: "from A" }, callId: "call_a" });
    await new Promise((r) => setTimeout(r, 20));
    now += 60_000; // A's conversation lease lapses; its ledger claim is still live
    // Worker B resumes turn 0: its model pays bob and commits (the record lists acme in flight); turn 1 pays acme.
    const b = world((n) => (n === 1 ? payBob : n === 2 ? payAcmeIn("c-b", "from B") : paid), false, {
      store,
      ledger,
      performed,
      beforePay: (args) => void started.push((args as { to: string }).to),
      runner: { retry: { attempts: 1, backoffMs: () => 1 } },
      dispatcher: { waitMs: 50, pollMs: 5 },
    });
    const error = (await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(started).toEqual(["acme", "bob"]);
    // Turn 1 fails on the live claim, told as may have happened, never run under a key of its own.
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(error.record.turnIndex).toBe(1);
    expect(error.record.calls.map((c) => [c.status, c.effect])).toEqual([["in_flight_elsewhere", "may_have_happened"]]);
  });

  it("TURN-23 a dispatcher wrapper whose turn() drops dispatch's options cannot carry: the call runs under its own key, reported as such, and the runner warns once", async () => {
    const base = world(deferred, true);
    const inner = base.dispatcher;
    const dropping = {
      turn: (context: Parameters<typeof inner.turn>[0]) => {
        const turn = inner.turn(context);
        return { dispatch: (call: Parameters<typeof turn.dispatch>[0]) => turn.dispatch(call) };
      },
      effectClassOf: (name: string) => inner.effectClassOf(name),
      keyFor: inner.keyFor.bind(inner),
      dispatch: inner.dispatch.bind(inner),
      ledger: inner.ledger,
    };
    const warnings: string[] = [];
    const w = world(deferred, true, { runner: { dispatcher: dropping, logger: { warn: (message: string) => void warnings.push(message) } } });
    const result = await w.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(base.performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
    expect(result.turns[1]!.calls.map((c) => [c.replayed, c.carriedFromTurn])).toEqual([[false, undefined]]);
    expect(warnings.filter((m) => m.includes("TURN-23"))).toHaveLength(1);
  });

  it("TURN-23 a dispatcher without keyFor cannot carry: the call runs under its own key and the runner warns once", async () => {
    const base = world(deferred, true);
    const inner = base.dispatcher;
    const bare = { turn: inner.turn.bind(inner), effectClassOf: (name: string) => inner.effectClassOf(name), ledger: inner.ledger };
    const warnings: string[] = [];
    const w = world(deferred, true, { runner: { dispatcher: bare, logger: { warn: (message: string) => void warnings.push(message) } } });
    await w.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(base.performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
    expect(warnings.filter((m) => m.includes("has no keyFor"))).toHaveLength(1);
  });
});
