import { MemoryConversationStore, MemoryLedger, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { readingInputs } from "./reading-inputs.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * TURN-24 with TURN-23 on take-up: which listed calls a committed turn answered is what its stored
 * keys say (a call committed with `carriedFromTurn` and key K answered the listed call under K; one
 * without answered none), never a derivation under a definition deployed since. Turn 0 of m1 pays
 * acme in attempt 1, is cut, pays bob in attempt 2 and commits (its record lists acme as happened);
 * turn 1 commits with its calls' keys; worker A dies as it begins turn 2; a deploy changes pay's
 * identity (or its name, IDENT-11); worker C takes m1 up at turn 2.
 */
const CONV = "conv-keys-carry";
const payIn = (id: string, name: string, args: Record<string, string>): ToyEvent[] => [
  { t: "call", index: 0, id, name },
  { t: "args", index: 0, json: JSON.stringify(args) },
  { t: "done", index: 0 },
];
const text: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];
const to = (performed: unknown[]) => performed.map((p) => `${(p as { to: string }).to}/${(p as { memo: string }).memo}`);
type Pay = { input?: z.ZodObject; identity?: string[]; name?: string; formerNames?: string[] };

async function turnsZeroAndOneThenDie(turnOne: ToyEvent[], pay: Pay | undefined) {
  let now = 1_700_000_000_000;
  const base = new MemoryConversationStore({ now: () => now });
  const ledger = new MemoryLedger();
  const performed: unknown[] = [];
  let begun = 0;
  const dying = Object.assign(Object.create(base) as ConversationStore, {
    beginTurn: (...args: Parameters<ConversationStore["beginTurn"]>) => (++begun === 3 ? Promise.reject(new Error("the process died")) : base.beginTurn(...args)),
  });
  const script = (n: number): (ToyEvent | "cut")[] =>
    n === 1 ? [...payCall("c-a1", "first"), "cut"] : n === 2 ? [...payIn("c-bob", "pay", { to: "bob", memo: "rent" }), { t: "end" }] : n === 3 ? [...turnOne, { t: "end" }] : text;
  const a = world(script, true, { store: dying, ledger, performed, ...(pay !== undefined ? { pay } : {}) });
  readingInputs(a.provider);
  await expect(a.runner.send(CONV, { id: "m1", content: "pay acme and bob" })).rejects.toThrow("the process died");
  const acmeKey = a.events.flatMap((e) => (e.type === "call_resolved" && e.attempt === 1 && e.ok ? [e.key] : []))[0]!;
  const stored = await base.turnsOf(CONV, "m1");
  now += 600_000; // A's leases lapse
  return { base, ledger, performed, acmeKey, stored };
}

describe("TURN-24 with TURN-23: a take-up reads which listed call a committed turn answered from its stored keys", () => {
  it("TURN-24: turn 1 answers turn 0's listed acme from its row (carriedFromTurn 0, kept); a deploy renames pay to send_payment; C takes m1 up and turn 2's acme, a second ask, runs and is reported as a new payment", async () => {
    const s = await turnsZeroAndOneThenDie(payIn("c-a2", "pay", { to: "acme", memo: "as asked" }), undefined);
    expect(to(s.performed)).toEqual(["acme/first", "bob/rent"]);
    expect(s.stored[1]!.callKeys).toEqual([{ callId: "c-a2", key: s.acmeKey, ordinal: 0, carriedFromTurn: 0 }]);
    const renamed = { name: "send_payment", formerNames: ["pay"] };
    const c = world((n) => (n === 1 ? [...payIn("c-c3", "send_payment", { to: "acme", memo: "again" }), { t: "end" }] : text), false, { store: s.base, ledger: s.ledger, performed: s.performed, pay: renamed });
    readingInputs(c.provider);
    const result = await c.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    // The effect log: the second ask paid.
    expect(to(s.performed)).toEqual(["acme/first", "bob/rent", "acme/again"]);
    // What was reported and committed: turn 2's call is a new payment under a key of its own.
    const call = result.turns.find((t) => t.turnIndex === 2)!.calls[0]!;
    expect([call.replayed, call.carriedFromTurn]).toEqual([false, undefined]);
    expect(call.key).not.toBe(s.acmeKey);
    expect((await s.ledger.lookup(call.key!))?.state).toBe("completed");
    const stored = await s.base.turnsOf(CONV, "m1");
    expect(stored[2]!.callKeys).toEqual([{ callId: "c-c3", key: call.key, ordinal: 0 }]);
    // Read back by the new release: as sent.
    const reader = world(() => text, false, { store: s.base, ledger: s.ledger, performed: s.performed, pay: renamed });
    readingInputs(reader.provider);
    const again = await reader.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(again.fromStore).toBe(true);
    expect(again.turns.map((t) => t.calls.map((c) => [c.key, c.carriedFromTurn]))).toEqual(result.turns.map((t) => t.calls.map((c) => [c.key, c.carriedFromTurn])));
    expect(to(s.performed)).toEqual(["acme/first", "bob/rent", "acme/again"]);
  });

  it("TURN-24: memo in the identity; turn 1 pays acme 'second' (another ask: no carriedFromTurn, kept); a deploy drops memo from the identity; C takes m1 up and turn 2's acme 'first', the listed call still unanswered, is answered from its row and never run", async () => {
    const v1 = { identity: ["to", "memo"] };
    const s = await turnsZeroAndOneThenDie(payIn("c-a2", "pay", { to: "acme", memo: "second" }), v1);
    expect(to(s.performed)).toEqual(["acme/first", "bob/rent", "acme/second"]);
    expect(s.stored[1]!.callKeys?.map((k) => [k.callId, k.key === s.acmeKey, k.carriedFromTurn])).toEqual([["c-a2", false, undefined]]);
    const v2 = { identity: ["to"] };
    const c = world((n) => (n === 1 ? [...payIn("c-c3", "pay", { to: "acme", memo: "first" }), { t: "end" }] : text), false, { store: s.base, ledger: s.ledger, performed: s.performed, pay: v2 });
    readingInputs(c.provider);
    const result = await c.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    // The effect log: acme 'first' paid once for one ask.
    expect(to(s.performed)).toEqual(["acme/first", "bob/rent", "acme/second"]);
    // What was reported and committed: answered from turn 0's row.
    const call = result.turns.find((t) => t.turnIndex === 2)!.calls[0]!;
    expect([call.key, call.replayed, call.carriedFromTurn]).toEqual([s.acmeKey, true, 0]);
    const stored = await s.base.turnsOf(CONV, "m1");
    expect(stored[2]!.callKeys).toEqual([{ callId: "c-c3", key: s.acmeKey, ordinal: 0, carriedFromTurn: 0 }]);
    expect(JSON.parse((stored[2]!.toolResults as { ok: string }[])[0]!.ok)).toEqual({ n: 1 });
  });
});
