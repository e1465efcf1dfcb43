import { MemoryConversationStore, MemoryLedger, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { readingInputs } from "./reading-inputs.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * TURN-24: a committed turn keeps the key each of its calls was dispatched under (`callKeys`, a
 * store that declares `supports.callKeys`), and a read-back reports it. Derived again after a deploy
 * that changed the tool's identity (IDENT-10), the key is one no call ran under.
 */
const CONV = "conv-call-keys";
/** The deploy: a defaulted currency joins the identity, so every key of pay derives differently. */
const currencyDefaulted = { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] };
const payIn = (id: string, name: string, args: Record<string, string>): ToyEvent[] => [
  { t: "call", index: 0, id, name },
  { t: "args", index: 0, json: JSON.stringify(args) },
  { t: "done", index: 0 },
];
const text: ToyEvent[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];
const to = (performed: unknown[]) => performed.map((p) => (p as { to: string }).to);

describe("TURN-24: a read-back reports the key a committed call was dispatched under", () => {
  it("TURN-24: m1 pays acme and is answered; a deploy adds a defaulted currency to the identity; a re-send of m1 reports the key the payment ran under (the ledger's row), not one derived under the new definition", async () => {
    const store = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const a = world((n) => (n === 1 ? [...payCall("c1", "rent"), { t: "end" }] : text), false, { store, ledger, performed });
    readingInputs(a.provider);
    const sent = await a.runner.send(CONV, { id: "m1", content: "pay acme" });
    const ran = sent.turns[0]!.calls[0]!;
    expect((await ledger.lookup(ran.key!))?.state).toBe("completed");
    const b = world(() => text, false, { store, ledger, performed, pay: currencyDefaulted });
    readingInputs(b.provider);
    const again = await b.runner.send(CONV, { id: "m1", content: "pay acme" });
    expect(again.fromStore).toBe(true);
    expect(to(performed)).toEqual(["acme"]);
    expect(again.turns[0]!.calls.map((c) => [c.key, c.ordinal])).toEqual([[ran.key, 0]]);
  });
});

describe("TURN-23 after a resumed turn across a deploy, taken up: the slot's answered rows are the keys the committed turn stored", () => {
  it("TURN-24 with TURN-23: m1 fails at turn 0 after paying acme; a deploy (currency defaulted, in the identity); B's re-send answers turn 0's acme from the old row, commits it and dies; C takes m1 up: turn 1's acme, a second ask, is paid and reported as a new payment, never told the first", async () => {
    // The take-up variant of the seed-20261129 case (deferred-call-deploy.test.ts): C reads turn 0
    // back to know which rows it answered; derived under the new definition, turn 0's key was not
    // the old row's, so the slot's guard took that row for turn 1's second ask.
    let now = 1_700_000_000_000;
    const base = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    const a = world(() => [...payCall("c-a", "first"), "cut"], true, { store: base, ledger, performed });
    await expect(a.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow();
    expect(to(performed)).toEqual(["acme"]);
    let begun = 0;
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 2 ? Promise.reject(new Error("the process died")) : base.beginTurn(...args)),
    });
    const b = world((n) => (n === 1 ? [...payIn("c-b1", "pay", { to: "acme", memo: "first" }), { t: "end" }] : text), false, { store: dying, ledger, performed, pay: currencyDefaulted });
    readingInputs(b.provider);
    await expect(b.runner.send(CONV, { id: "m1", content: "pay acme" })).rejects.toThrow("the process died");
    expect(to(performed)).toEqual(["acme"]);
    now += 600_000; // B's turn lease lapses
    const c = world((n) => (n === 1 ? [...payIn("c-c2", "pay", { to: "acme", memo: "again" }), { t: "end" }] : text), false, { store: base, ledger, performed, pay: currencyDefaulted });
    readingInputs(c.provider);
    const result = await c.runner.send(CONV, { id: "m1", content: "pay acme" });
    // The effect log: two asks, two payments.
    expect(to(performed)).toEqual(["acme", "acme"]);
    // What was reported: turn 0's acme from the old row, turn 1's a new payment under a key of its own.
    const [first, second] = [result.turns[0]!.calls[0]!, result.turns[1]!.calls[0]!];
    expect([first.replayed, second.replayed]).toEqual([true, false]);
    expect(second.key).not.toBe(first.key);
    expect((await ledger.lookup(second.key!))?.state).toBe("completed");
    // What was committed: turn 1's result is the second payment's, not the first's.
    const stored = await base.turnsOf(CONV, "m1");
    const results = stored.slice(0, 2).map((t) => (t.toolResults as { ok?: string }[])[0]!.ok);
    expect(results.every((r) => r !== undefined)).toBe(true);
    expect(results[1]).not.toBe(results[0]);
  });
});

describe("TURN-24: a turn whose keys a store cannot keep exactly is committed without them", () => {
  it("TURN-24: a call id longer than a store keeps (1025 characters) commits the turn without callKeys, and a re-send reads the call's key back by derivation, never as a call that had none", async () => {
    const store = new MemoryConversationStore();
    const ledger = new MemoryLedger();
    const longId = `toolu_${"x".repeat(1019)}`;
    const a = world((n) => (n === 1 ? [...payIn(longId, "pay", { to: "acme", memo: "rent" }), ...payIn2("toolu_short", { to: "bob", memo: "tip" }), { t: "end" }] : text), false, { store, ledger });
    readingInputs(a.provider);
    const sent = await a.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(sent.turns[0]!.calls.every((c) => c.key !== undefined)).toBe(true);
    const again = await a.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(again.turns[0]!.calls.map((c) => [c.key, c.ordinal])).toEqual(sent.turns[0]!.calls.map((c) => [c.key, c.ordinal]));
    expect((await store.turnsOf(CONV, "m1")).map((t) => t.callKeys)).toEqual([undefined, undefined]);
  });
});

function payIn2(id: string, args: Record<string, string>): ToyEvent[] {
  return [
    { t: "call", index: 1, id, name: "pay" },
    { t: "args", index: 1, json: JSON.stringify(args) },
    { t: "done", index: 1 },
  ];
}
