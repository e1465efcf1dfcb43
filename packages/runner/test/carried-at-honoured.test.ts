import { MemoryConversationStore, MemoryLedger, type ConversationStore } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { readingInputs } from "./reading-inputs.js";
import { world, type ToyEvent } from "./toy.js";

/*
 * TURN-23 with IDENT-10: a call dispatched at an earlier turn's index ({ at }) that the guard there
 * answers from a row an earlier definition made has that row's key, not the key the runner derived
 * for the slot. The dispatcher honoured `at`: the runner must not blame a wrapper for dropping it
 * (found by the end-to-end kit, OpenAI side, seed 20261201: carriedKey 6a56ce4c..., key 3c9175ac...).
 */
const CONV = "conv-at-honoured";

const payIn = (id: string, index: number, name: string, args: Record<string, string>): ToyEvent[] => [
  { t: "call", index, id, name },
  { t: "args", index, json: JSON.stringify(args) },
  { t: "done", index },
];
const text: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];
const to = (performed: unknown[]) => performed.map((p) => (p as { to: string }).to);
const DROPPED = "does not pass TurnDispatch.dispatch's options";

describe("TURN-23 a slot answered through IDENT-10's guard from an earlier definition's row", () => {
  it("TURN-23 with IDENT-10: B (currency defaulted, in the identity) takes turn 1 over and its acme is answered from A's row at the resumed turn 0's slot: reported under that row's key, read back alike, acme paid once, and no warning that the dispatcher dropped { at }", async () => {
    let now = 1_700_000_000_000;
    const base = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const performed: unknown[] = [];
    let commits = 0;
    const dying = Object.assign(Object.create(base) as ConversationStore, {
      commitTurn: (...args: Parameters<ConversationStore["commitTurn"]>) => (++commits === 2 ? Promise.reject(new Error("the process died")) : base.commitTurn(...args)),
    });
    const a = world(
      (n) => (n <= 3 ? [{ t: "text", index: 0, text: "Let me" }, "cut"] : n === 4 ? [...payIn("c-bob", 0, "pay", { to: "bob", memo: "rent" }), { t: "end" }] : [...payIn("c-acme", 0, "pay", { to: "acme", memo: "first" }), { t: "end" }]),
      false,
      { store: dying, ledger, performed },
    );
    readingInputs(a.provider);
    await expect(a.runner.send(CONV, { id: "m1", content: "pay bob, then acme" })).rejects.toThrow();
    await expect(a.runner.send(CONV, { id: "m1", content: "pay bob, then acme" })).rejects.toThrow("the process died");
    expect(to(performed)).toEqual(["bob", "acme"]);
    // The key A's acme ran under: what the payments API saw as its Idempotency-Key.
    const rowKey = a.events.flatMap((e) => (e.type === "call_resolved" && e.turnIndex === 1 && e.ok ? [e.key] : []))[0]!;
    expect(rowKey).toBeDefined();
    now += 600_000; // A's turn lease lapses
    const warnings: string[] = [];
    const b = world((n) => (n === 1 ? [...payIn("c-b", 0, "pay", { to: "acme", memo: "again" }), { t: "end" }] : text), false, {
      store: base,
      ledger,
      performed,
      pay: { input: z.object({ to: z.string(), memo: z.string(), currency: z.string().default("EUR") }), identity: ["to", "currency"] },
      runner: { logger: { warn: (message: string) => void warnings.push(message) } },
    });
    readingInputs(b.provider);
    const slotKey = b.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "again" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect(slotKey).not.toBe(rowKey); // the deploy changed the derivation: the guard, not the derivation, found A's row
    const result = await b.runner.send(CONV, { id: "m1", content: "pay bob, then acme" });
    // The effect log: acme paid once, by A.
    expect(to(performed)).toEqual(["bob", "acme"]);
    const acme = result.turns.find((t) => t.turnIndex === 1)!.calls[0]!;
    // Answered from A's row, under its key; a slot, so no carriedFromTurn (a read-back cannot tell a slot's row was there before).
    expect([acme.key, acme.replayed, acme.carriedFromTurn]).toEqual([rowKey, true, undefined]);
    // The dispatcher honoured { at }: no false alarm blaming a wrapper.
    expect(warnings.filter((m) => m.includes(DROPPED))).toEqual([]);
    // A re-send reads the same report back (TURN-24), and pays nothing.
    const again = await b.runner.send(CONV, { id: "m1", content: "pay bob, then acme" });
    const back = again.turns.find((t) => t.turnIndex === 1)!.calls[0]!;
    expect([back.key, back.carriedFromTurn]).toEqual([rowKey, undefined]);
    expect(to(performed)).toEqual(["bob", "acme"]);
    expect(warnings.filter((m) => m.includes(DROPPED))).toEqual([]);
  });
});
