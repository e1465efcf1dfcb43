import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { payCall, world, type ToyEvent } from "./toy.js";

/*
 * Found by the fault suite's byte-level cuts (faults/test/byte-cut-responses.test.ts): a Responses
 * stream splits 🧾 between two argument deltas ("\ud83e", then "\uddfe"), and a cut between them
 * leaves the abandoned call's partial arguments ending in a lone surrogate. The failed-turn record
 * carried that text, the store refused the record (JSON cannot carry it, TURN-18), and send()
 * rejected with InvalidStoreInputError: no record kept, nothing retryable told.
 */

// The second call's arguments cut after the first half of a surrogate pair.
const cutInsidePair = (id: string): (ToyEvent | "cut")[] => [
  { t: "call", index: 1, id, name: "pay" },
  { t: "args", index: 1, json: '{"to":"bob","memo":"Für Zoë \ud83e' },
  "cut",
];

describe("partial arguments cut inside a UTF-16 surrogate pair (STREAM-3, RECORD-2, RECORD-7)", () => {
  it("STREAM-3 the abandoned call's partial arguments are kept with the lone half as U+FFFD: the turn fails with its record stored, telling of the payment an earlier call made", async () => {
    // Every attempt: call 0 pays (answered from the ledger after the first), call 1 is cut inside 🧾.
    const { runner, performed, store } = world((n) => [...payCall(`c0-${n}`, "Zoë 💳"), ...cutInsidePair(`c1-${n}`)], true);
    const error = (await runner.send("conv-surrogate", { id: "m1", content: "pay acme and bob" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toEqual([{ to: "acme", memo: "Zoë 💳" }]);
    const cut = error.record.calls.filter((c) => c.index === 1);
    expect(cut.map((c) => [c.status, c.partialArguments])).toEqual(Array(3).fill(["not_run", '{"to":"bob","memo":"Für Zoë \ufffd']));
    expect(error.record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
    // Kept beside the conversation (RECORD-4), and the message is retryable by a re-send.
    expect(await store.records("conv-surrogate")).toEqual([expect.objectContaining({ kind: "failed_turn", effects: error.record.effects })]);
    expect(error.record.retryable).toBe(true);
  });

  it("STREAM-3 a well-formed pair split across two deltas is whole in the partial arguments", async () => {
    const { runner } = world(() => [
      { t: "call", index: 0, id: "c", name: "pay" },
      { t: "args", index: 0, json: '{"to":"bob","memo":"\ud83e' },
      { t: "args", index: 0, json: "\uddfe" },
      "cut",
    ]);
    const error = (await runner.send("conv-pair", { id: "m1", content: "pay bob" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record.calls.map((c) => c.partialArguments)).toEqual(Array(3).fill('{"to":"bob","memo":"🧾'));
  });

  it("RECORD-2 a call whose provider-given name and id carry a lone surrogate (a provider's text is not checked for well-formed Unicode) is recorded with U+FFFD in their place: the record is kept and tells of the payment", async () => {
    const { runner, performed, store } = world((n) => [...payCall(`c0-${n}`, "rent"), { t: "call", index: 1, id: `c1-\ud83e-${n}`, name: "pa\udc00y" }, { t: "args", index: 1, json: "{}" }, { t: "done", index: 1 }, "cut"], true);
    const error = (await runner.send("conv-lone-name", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(TurnFailedError.isInstance(error), String(error)).toBe(true);
    expect(performed).toHaveLength(1);
    const odd = error.record.calls.filter((c) => c.index === 1);
    expect(odd.map((c) => [c.name, c.callId.startsWith("c1-\ufffd-")])).toEqual(Array(3).fill(["pa\ufffdy", true]));
    expect(error.record.effects).toEqual([expect.objectContaining({ name: "pay", effect: "happened" })]);
    expect(await store.records("conv-lone-name")).toEqual([expect.objectContaining({ kind: "failed_turn", effects: error.record.effects })]);
  });
});
