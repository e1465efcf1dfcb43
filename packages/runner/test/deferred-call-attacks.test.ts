import { MemoryConversationStore, MemoryLedger, ToolError, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { readingInputs } from "./reading-inputs.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * TURN-23 attacked: the read-back of a turn that both carried a call and ran an identical one, and
 * a deploy that changes the pay tool's identity between the turn that left the call unanswered and
 * the turn that makes it again (a holder of the new release takes the message up, IDENT-10).
 */
const CONV = "conv-carry-attack";

const payIn = (id: string, index: number, to: string, memo: string): ToyEvent[] => [
  { t: "call", index, id, name: "pay" },
  { t: "args", index, json: `{"to":"${to}","memo":"${memo}"}` },
  { t: "done", index },
];
const text: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];

describe("TURN-23 attacks", () => {
  it("TURN-23 a turn that carried acme and paid a second acme reads back as it was sent (a re-send from the store reports the same keys)", async () => {
    // Turn 0: attempt 1 pays acme, cut; the retry pays bob. Turn 1: acme twice (the first answered from turn 0's row, the second a new payment).
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...payCall("c1", "first"), "cut"] : n === 2 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 3 ? [...payIn("c3a", 0, "acme", "x"), ...payIn("c3b", 1, "acme", "y"), { t: "end" }] : text;
    const w = world(script, true);
    readingInputs(w.provider);
    const sent = await w.runner.send(CONV, { id: "m1", content: "pay acme, bob, and acme once more" });
    expect(w.performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
    const asSent = sent.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn]);
    expect(asSent[0]![2]).toBe(0);
    expect(asSent[1]![2]).toBeUndefined();
    const again = await w.runner.send(CONV, { id: "m1", content: "pay acme, bob, and acme once more" });
    expect(again.fromStore).toBe(true);
    expect(again.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn])).toEqual(asSent);
    expect(w.performed).toHaveLength(3);
  });

  it("TURN-23 a turn an earlier release committed (it carried nothing: one or two acme calls paid under turn 1's own keys) reads back as that release dispatched it", async () => {
    for (const twice of [false, true]) {
      const ledger = new MemoryLedger();
      const store = new MemoryConversationStore();
      const performed: unknown[] = [];
      const turn1: ToyEvent[] = twice ? [...payIn("c3a", 0, "acme", "x"), ...payIn("c3b", 1, "acme", "y")] : payIn("c3a", 0, "acme", "x");
      const script = (n: number): (ToyEvent | "cut")[] =>
        n === 1 ? [...payCall("c1", "first"), "cut"] : n === 2 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 3 ? [...turn1, { t: "end" }] : text;
      // The earlier release: a dispatcher that cannot key a call at another turn index (the runner carries nothing).
      const old = world(script, true, { store, ledger, performed });
      const d = old.dispatcher;
      readingInputs(old.provider);
      const oldRunner = world(script, true, { store, ledger, performed, runner: { dispatcher: { turn: (c) => d.turn(c), effectClassOf: (n) => d.effectClassOf(n) } } });
      readingInputs(oldRunner.provider);
      const sent = await oldRunner.runner.send(CONV, { id: "m1", content: "pay" });
      expect(performed.map((p) => (p as { to: string }).to)).toEqual(twice ? ["acme", "bob", "acme", "acme"] : ["acme", "bob", "acme"]);
      const asSent = sent.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn]);
      // This release reads it back.
      const again = await old.runner.send(CONV, { id: "m1", content: "pay" });
      expect(again.fromStore).toBe(true);
      expect(again.turns[1]!.calls.map((c) => [c.key, c.ordinal, c.carriedFromTurn]), `twice: ${twice}`).toEqual(asSent);
    }
  });

  it("TURN-23 with IDENT-10: a deploy between turn 0 and turn 1 changes the pay tool's identity; the new release's holder takes the message up and answers turn 1's acme from turn 0's row", async () => {
    const ledger = new MemoryLedger();
    const base = new MemoryConversationStore();
    const performed: unknown[] = [];
    let begun = 0;
    // Worker A (the old definition) dies as it begins turn 1.
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("worker A's process died")) : base.beginTurn(...args)),
    });
    const a = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }]), true, { store: dying, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("worker A's process died");
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    const acmeKey = a.events.flatMap((e) => (e.type === "call_resolved" && e.attempt === 1 && e.ok ? [e.key] : []))[0];
    // The deploy: a currency field with a default, in the identity. Worker B takes the message up at turn 1.
    const pay = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
    const b = world((n) => (n === 1 ? [...payIn("c3", 0, "acme", "as asked"), { t: "end" }] : text), false, { store: base, ledger, performed, pay });
    readingInputs(b.provider);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob"]);
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls).toEqual([expect.objectContaining({ key: acmeKey, replayed: true, carriedFromTurn: 0, storedRequest: { to: "acme", memo: "first" } })]);
    // Read back by the new release: the same key, carried from turn 0.
    const again = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(again.fromStore).toBe(true);
    expect(again.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.carriedFromTurn])).toEqual([[acmeKey, 0]]);
    expect(performed).toHaveLength(2);
  });

  it("TURN-23 with IDENT-10: two acme payments carried across the deploy, re-worded in turn 1, are refused (ambiguous) and stay carried: turn 2's acme calls are refused again, by the holder that goes on and by one that takes the message up", async () => {
    const pay = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
    const acmeTwice = (id: string): (ToyEvent | "cut")[] => [...payIn(`${id}a`, 0, "acme", `${id} one`), ...payIn(`${id}b`, 1, "acme", `${id} two`), { t: "end" }];
    for (const takeUp of [false, true]) {
      const ledger = new MemoryLedger();
      const base = new MemoryConversationStore();
      const performed: unknown[] = [];
      const dyingAt = (n: number) => {
        let begun = 0;
        return Object.assign(Object.create(base) as ConversationStore, {
          beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === n ? Promise.reject(new Error("the process died")) : base.beginTurn(...args)),
        });
      };
      // Worker A (the old definition): attempt 1 pays acme twice and is cut; the retry pays bob; A dies as it begins turn 1.
      const a = world((n) => (n === 1 ? [...payCall("c1a", "first"), ...payIn("c1b", 1, "acme", "second"), "cut"] : [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }]), true, { store: dyingAt(2), ledger, performed });
      await expect(a.runner.send(CONV, { id: "m1", content: "pay acme twice and bob" })).rejects.toThrow("the process died");
      expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "acme", "bob"]);
      // Worker B (the new definition) takes the message up at turn 1; with takeUp it dies as it begins turn 2 and C takes it up.
      const b = world((n) => (n === 1 ? acmeTwice("b") : n === 2 ? acmeTwice("b2") : text), false, { store: takeUp ? dyingAt(2) : base, ledger, performed, pay });
      readingInputs(b.provider);
      const sent = b.runner.send(CONV, { id: "m1", content: "pay acme twice and bob" });
      let result;
      if (takeUp) {
        await expect(sent).rejects.toThrow("the process died");
        const c = world((n) => (n === 1 ? acmeTwice("c") : text), false, { store: base, ledger, performed, pay });
        readingInputs(c.provider);
        result = await c.runner.send(CONV, { id: "m1", content: "pay acme twice and bob" });
      } else {
        result = await sent;
      }
      expect(performed.map((p) => (p as { to: string }).to), `takeUp: ${takeUp}`).toEqual(["acme", "acme", "bob"]);
      const turn2 = result.turns.find((t) => t.turnIndex === 2);
      expect(turn2?.calls.map((c) => c.error?.code), `takeUp: ${takeUp}`).toEqual(["tool_definition_changed", "tool_definition_changed"]);
    }
  });

  it("TURN-23 with IDENT-10: across the deploy, turn 1 pays carol (a new ask) and then acme; carol's call is not the carried acme (another identity under the new definition), acme is answered from turn 0's row", async () => {
    // Blind round N's N04: a sameIdentityNow that matched any call of the tool let carol's call take
    // the carried acme, so acme, made next, found nothing carried and paid again under turn 1's key.
    const ledger = new MemoryLedger();
    const base = new MemoryConversationStore();
    const performed: unknown[] = [];
    let begun = 0;
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("worker A's process died")) : base.beginTurn(...args)),
    });
    const a = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }]), true, { store: dying, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob, then carol" })).rejects.toThrow("worker A's process died");
    const acmeKey = a.events.flatMap((e) => (e.type === "call_resolved" && e.attempt === 1 && e.ok ? [e.key] : []))[0];
    const pay = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
    const b = world((n) => (n === 1 ? [...payIn("c3-carol", 0, "carol", "new"), ...payIn("c3-acme", 1, "acme", "as asked"), { t: "end" }] : text), false, { store: base, ledger, performed, pay, dispatcher: { logger: { warn: () => {} } }, runner: { logger: { warn: () => {} } } });
    readingInputs(b.provider);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob, then carol" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "carol"]);
    const turn1 = result.turns.find((t) => t.turnIndex === 1)!.calls;
    expect(turn1.map((c) => [c.callId, c.key === acmeKey, c.carriedFromTurn])).toEqual([
      ["c3-carol", false, undefined],
      ["c3-acme", true, 0],
    ]);
  });

  it("TURN-23 with IDENT-10 on a ledger that does not list rows: across the deploy nothing can find turn 0's row, so turn 1's acme runs under turn 1's own key, and turn 2's acme (the model saw turn 1's paid) is a new payment", async () => {
    const pay = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
    const memory = new MemoryLedger();
    // A ledger without listRows (capabilities say so): IDENT-10's guard cannot act on it.
    const ledger = Object.assign(Object.create(memory) as MemoryLedger, { capabilities: { ...memory.capabilities, supports: { ...memory.capabilities.supports, listRows: false } } });
    const base = new MemoryConversationStore();
    const performed: unknown[] = [];
    let begun = 0;
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("worker A's process died")) : base.beginTurn(...args)),
    });
    const a = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }]), true, { store: dying, ledger, performed, dispatcher: { logger: { warn: () => {} } } });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("worker A's process died");
    const b = world((n) => (n === 1 ? [...payIn("c3", 0, "acme", "as asked"), { t: "end" }] : n === 2 ? [...payIn("c4", 0, "acme", "once more"), { t: "end" }] : text), false, { store: base, ledger, performed, pay, dispatcher: { logger: { warn: () => {} } } });
    readingInputs(b.provider);
    const result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme", "acme"]);
    const own = (turnIndex: number) => b.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex, ordinal: 0 });
    expect(result.turns.slice(1, 3).map((t) => t.calls.map((c) => [c.key, c.replayed, c.carriedFromTurn]))).toEqual([[[own(1), false, undefined]], [[own(2), false, undefined]]]);
  });

  it("TURN-23 documented limit: on a store without recordsWithCommit, a holder that dies between turn 0's commit and its record leaves nothing to carry; the holder that takes the message up pays acme again", async () => {
    const base = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const afterCommit = Object.assign(Object.create(base) as ConversationStore, {
      capabilities: { ...base.capabilities, recordsWithCommit: false },
      addRecord: () => Promise.reject(new Error("worker A died between the commit and the record")),
    });
    const a = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }]), true, { store: afterCommit, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("died between the commit and the record");
    expect(await base.records(CONV)).toEqual([]);
    const b = world((n) => (n === 1 ? [...payIn("c3", 0, "acme", "as asked"), { t: "end" }] : text), false, { store: base, ledger, performed });
    await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    // RECORD-8's open window on such a store: the record is lost, and with it what TURN-23 carries.
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
  });

  it("TURN-23 a listed payment the API refused: released on a volatile ledger (may have happened), carried and re-run under turn 0's key with turn 0's request; failed on a durable one (not_happened), not carried, run under turn 1's key. One acme payment either way", async () => {
    for (const durable of [false, true]) {
      let runs = 0;
      const script = (n: number): (ToyEvent | "cut")[] =>
        n === 1 ? [...payCall("c1", "first"), "cut"] : n === 2 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 3 ? [...payIn("c3", 0, "acme", "as asked"), { t: "end" }] : text;
      const memory = new MemoryLedger();
      // A release at fence 1 of a ledger that declares itself durable says "not performed" (the row fails).
      const ledger = durable ? Object.assign(Object.create(memory) as MemoryLedger, { capabilities: { ...memory.capabilities, durability: "durable" } }) : memory;
      const w = world(script, true, {
        ledger,
        beforePay: () => {
          if (++runs === 1) throw new ToolError("402 card declined", { disposition: "not_performed" });
        },
      });
      const result = await w.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      expect(w.performed, `durable: ${durable}`).toEqual([{ to: "bob", memo: "rent" }, { to: "acme", memo: durable ? "as asked" : "first" }]);
      const key = (turnIndex: number) => w.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex, ordinal: 0 });
      expect(result.records?.map((r) => r.calls.map((c) => [c.key, c.effect])), `durable: ${durable}`).toEqual([[[key(0), durable ? "not_happened" : "may_have_happened"]]]);
      expect(result.turns[1]!.calls.map((c) => [c.key, c.replayed, c.carriedFromTurn]), `durable: ${durable}`).toEqual([durable ? [key(1), false, undefined] : [key(0), false, 0]]);
    }
  });

  it("TURN-23 nine identical payments, the ninth (ordinal 8) left unanswered: turn 1's acme is answered from that one's row, and turn 2's acme, a new ask, pays", async () => {
    const nine = (id: string, n: number): ToyEvent[] => Array.from({ length: n }, (_, i) => payIn(`${id}${i}`, i, "acme", `${id} ${i}`)).flat();
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...nine("a", 9), "cut"] : n === 2 ? [...nine("b", 8), { t: "end" }] : n === 3 ? [...payIn("c3", 0, "acme", "the ninth"), { t: "end" }] : n === 4 ? [...payIn("c4", 0, "acme", "a tenth"), { t: "end" }] : text;
    const w = world(script, true);
    readingInputs(w.provider);
    const result = await w.runner.send(CONV, { id: "m1", content: "pay acme nine times, then once more" });
    const key = (turnIndex: number, ordinal: number) => w.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex, ordinal });
    expect(result.records?.map((r) => r.calls.map((c) => c.key))).toEqual([[key(0, 8)]]);
    const k = { [key(0, 0)]: "t0o0", [key(0, 8)]: "t0o8", [key(1, 0)]: "t1o0", [key(2, 0)]: "t2o0" };
    expect(result.turns.slice(1, 3).map((t) => t.calls.map((c) => [k[c.key!] ?? c.key, c.replayed, c.carriedFromTurn]))).toEqual([[["t0o8", true, 0]], [["t2o0", false, undefined]]]);
    expect(w.performed).toHaveLength(10);
  });

  it("TURN-23 in a rolling deploy: a holder of the earlier release paid turn 1's acme under turn 1's key and died; this release's holder took turn 1 over and answered acme from turn 0's row. A re-send reads turn 1 back as this release sent it", async () => {
    let now = 1_700_000_000_000;
    const base = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const script = (n: number): (ToyEvent | "cut")[] =>
      n === 1 ? [...payCall("c1", "first"), "cut"] : n === 2 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : [...payIn("c3", 0, "acme", "as asked"), { t: "end" }];
    // The earlier release (it carries nothing): pays turn 1's acme under turn 1's key and dies before the commit.
    let commits = 0;
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      commitTurn: (...args: Parameters<ConversationStore["commitTurn"]>) => (++commits === 2 ? Promise.reject(new Error("the earlier release's holder died")) : base.commitTurn(...args)),
    });
    const d = world(() => [], false, { ledger, performed }).dispatcher;
    const old = world(script, true, { store: dying, ledger, performed, runner: { dispatcher: { turn: (c) => d.turn(c), effectClassOf: (n) => d.effectClassOf(n) } } });
    await expect(old.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("the earlier release's holder died");
    expect(performed.map((p) => (p as { to: string }).to)).toEqual(["acme", "bob", "acme"]);
    now += 60_000; // its conversation lease lapses
    const b = world((n) => (n === 1 ? [...payIn("c3b", 0, "acme", "as asked again"), { t: "end" }] : text), false, { store: base, ledger, performed });
    readingInputs(b.provider);
    const sent = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    const key = (turnIndex: number) => b.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex, ordinal: 0 });
    const turn1 = (r: typeof sent) => r.turns.find((t) => t.turnIndex === 1)!.calls.map((c) => [c.key, c.carriedFromTurn]);
    expect(turn1(sent)).toEqual([[key(0), 0]]);
    const again = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(again.fromStore).toBe(true);
    expect(turn1(again)).toEqual([[key(0), 0]]);
    expect(performed).toHaveLength(3);
  });

  it("TURN-23 a call whose arguments were not JSON (never dispatched) answers no listed call: turn 2's acme is answered from turn 0's row, by the holder that goes on and by one that takes the message up after turn 1", async () => {
    const malformed: (ToyEvent | "cut")[] = [{ t: "call", index: 0, id: "c-bad", name: "pay" }, { t: "args", index: 0, json: '{"to":"acme",' }, { t: "done", index: 0 }, { t: "end" }];
    for (const takeUp of [false, true]) {
      const ledger = new MemoryLedger();
      const base = new MemoryConversationStore();
      const performed: unknown[] = [];
      let begun = 0;
      const store = takeUp
        ? Object.assign(Object.create(base) as ConversationStore, {
            beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 3 ? Promise.reject(new Error("the process died")) : base.beginTurn(...args)),
          })
        : base;
      const script = (n: number): (ToyEvent | "cut")[] =>
        n === 1 ? [...payCall("c1", "first"), "cut"] : n === 2 ? [...payIn("c-bob", 0, "bob", "rent"), { t: "end" }] : n === 3 ? malformed : n === 4 ? [...payIn("c4", 0, "acme", "as asked"), { t: "end" }] : text;
      const a = world(script, true, { store, ledger, performed });
      readingInputs(a.provider);
      let result;
      if (takeUp) {
        await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("the process died");
        const b = world((n) => (n === 1 ? [...payIn("c4", 0, "acme", "as asked"), { t: "end" }] : text), false, { store: base, ledger, performed });
        readingInputs(b.provider);
        result = await b.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      } else {
        result = await a.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
      }
      expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => c.error?.code)).toEqual(["invalid_arguments_json"]);
      expect(performed.map((p) => (p as { to: string }).to), `takeUp: ${takeUp}`).toEqual(["acme", "bob"]);
      expect(result.turns.find((t) => t.turnIndex === 2)?.calls.map((c) => c.carriedFromTurn), `takeUp: ${takeUp}`).toEqual([0]);
    }
  });
});
