import { describe, expect, it } from "vitest";
import { readingInputs } from "./reading-inputs.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * TURN-23 above the ledger, where a turn that carried a call does not end cleanly: its turn fails
 * and the message is re-sent (TURN-12: the re-send re-runs the carrying turn, resumed). (A commit
 * whose reply was lost, re-sent, is the take-up after turn 1 of deferred-call.test.ts.)
 */
const CONV = "conv-carry-resend";
const acmeAgain: ToyEvent[] = [
  { t: "call", index: 0, id: "c-acme", name: "pay" },
  { t: "args", index: 0, json: `{"to":"acme","memo":"as asked"}` },
  { t: "done", index: 0 },
];
const bob: (ToyEvent | "cut")[] = [{ t: "call", index: 0, id: "c-bob", name: "pay" }, { t: "args", index: 0, json: `{"to":"bob","memo":"rent"}` }, { t: "done", index: 0 }, { t: "end" }];
const text: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Done." }, { t: "end" }];
const to = (performed: unknown[]) => performed.map((p) => (p as { to: string }).to);

describe("TURN-23 when the turn that carried a call does not end cleanly", () => {
  it("TURN-23 turn 1 carried acme and failed (every attempt cut); the re-send re-runs turn 1 and its acme is answered from turn 0's row again; the failure told of acme's payment", async () => {
    // Turn 0: attempt 1 pays acme (cut), attempt 2 pays bob. Turn 1: acme (carried), cut in both attempts: failed.
    // The re-send: turn 1's acme again, then the answer.
    const script = (n: number): (ToyEvent | "cut")[] => (n === 1 ? [...payCall("c1", "first"), "cut"] : n === 2 ? bob : n === 3 || n === 4 ? [...acmeAgain, "cut"] : n === 5 ? [...acmeAgain, { t: "end" }] : text);
    const w = world(script, true, { runner: { retry: { attempts: 2, backoffMs: () => 1 } } });
    readingInputs(w.provider);
    const failed = await w.runner.send(CONV, { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e as { code: string; record: { turnIndex: number; retryable: boolean; effects: { key: string; effect: string }[] } });
    expect(failed).toMatchObject({ code: "turn_failed", record: { turnIndex: 1, retryable: true } });
    const acmeKey = w.dispatcher.keyFor({ name: "pay", input: { to: "acme", memo: "x" } }, { conversationId: CONV, turnIndex: 0, ordinal: 0 });
    expect((failed as { record: { effects: { key: string; effect: string }[] } }).record.effects.map((e) => [e.key, e.effect])).toEqual([[acmeKey, "happened"]]);
    expect(to(w.performed)).toEqual(["acme", "bob"]);
    const result = await w.runner.send(CONV, { id: "m1", content: "pay acme and bob" });
    expect(to(w.performed)).toEqual(["acme", "bob"]);
    expect(result.turns.find((t) => t.turnIndex === 1)?.calls.map((c) => [c.key, c.replayed, c.carriedFromTurn])).toEqual([[acmeKey, true, 0]]);
  });
});
