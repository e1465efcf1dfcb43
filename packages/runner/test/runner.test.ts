import { describe, expect, it } from "vitest";
import { TurnFailedError } from "../src/index.js";
import { ToyAccumulator, payCall, world } from "./toy.js";

describe("TurnRunner over a provider-free StreamProvider", () => {
  it("STREAM-5 a cut after the call ran and before the finish event: retried with a new call id and memo, the effect happens once", async () => {
    const { runner, performed, events, store } = world((n, input) => {
      if ((input.at(-1) as { role?: string }).role !== "user") return [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
      return n === 1 ? [...payCall("c1", "first"), "cut"] : [...payCall(`c${n}`, "reworded"), { t: "end" }];
    }, true);
    const result = await runner.send("conv-toy", { id: "m1", content: "pay acme" });
    expect(performed).toHaveLength(1);
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, position: "after_dispatch_before_stop" });
    expect(result.turns.map((t) => [t.attempts, t.stopReason, t.text])).toEqual([
      [2, "calls", ""],
      [1, "end", "Paid."],
    ]);
    // The answer is the first request's, memo and all: the report says which request it belongs to (IDENT-3).
    expect(result.turns[0]!.calls).toEqual([
      expect.objectContaining({ callId: "c2", replayed: true, result: { n: 1 }, storedRequest: { to: "acme", memo: "first" } }),
    ]);
    expect(performed).toEqual([expect.objectContaining({ memo: "first" })]);
    // The commit shape is the provider's: one result, under the retried response's call id.
    expect(await store.log("conv-toy")).toEqual([{ role: "user", content: "pay acme" }, [{ call: "c2" }], [{ id: "c2", ok: '{"n":1}' }], [{ text: "Paid." }]]);
  });

  it("RECORD-5 a failed turn's record names the stored request each re-worded replay was answered with (IDENT-3)", async () => {
    const { runner, performed } = world((n) => (n === 1 ? [...payCall("c1", "first"), "cut"] : [...payCall(`c${n}`, "reworded"), "cut"]), true);
    const error = (await runner.send("conv-toy", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(performed).toEqual([{ to: "acme", memo: "first" }]);
    expect(error.record.calls.map((c) => [c.attempt, c.status, c.effect, c.replayed, c.storedRequest])).toEqual([
      [1, "completed", "happened", false, undefined],
      [2, "completed", "happened", true, { to: "acme", memo: "first" }],
      [3, "completed", "happened", true, { to: "acme", memo: "first" }],
    ]);
  });

  it("STREAM-1 a stream that ends without its finish event fails with the provider's finish event and in-band error named", async () => {
    const { runner, performed } = world(() => [{ t: "oops", message: "overloaded" }]);
    const error = (await runner.send("conv-toy", { id: "m1", content: "x" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record).toMatchObject({ position: "before_any_call", attempts: 3, error: { name: "StreamIncompleteError", code: "stream_incomplete" } });
    expect(error.record.error.message).toBe("the stream ended after 1 events without end (overloaded)");
    expect(performed).toEqual([]);
  });

  it("STREAM-3 a call whose arguments are cut is abandoned, never dispatched, and reported with its partial arguments", async () => {
    const { runner, performed, events } = world(() => [...payCall("c", "m").slice(0, 2), "cut"]);
    const error = (await runner.send("conv-toy", { id: "m1", content: "x" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error.record.calls.map((c) => [c.status, c.partialArguments])).toEqual(Array(3).fill(["not_run", `{"to":"acme",`]));
    expect(events.filter((e) => e.type === "call_abandoned")).toHaveLength(3);
    expect(events.filter((e) => e.type === "call_complete")).toHaveLength(0);
    expect(performed).toEqual([]);
  });
});

describe("CallPhases", () => {
  it("STREAM-2 the position is read from the phases, a running call first", () => {
    const acc = new ToyAccumulator();
    expect(acc.failurePosition()).toBe("before_any_call");
    acc.apply({ t: "call", index: 0, id: "a", name: "pay" });
    expect(acc.failurePosition()).toBe("arguments_streaming");
    acc.apply({ t: "args", index: 0, json: "{}" });
    const done = acc.apply({ t: "done", index: 0 })!;
    acc.apply({ t: "call", index: 1, id: "b", name: "pay" });
    expect(acc.failurePosition()).toBe("during_dispatch");
    done.phase = "resolved";
    expect(acc.failurePosition()).toBe("arguments_streaming");
    expect(acc.abandonOpenCalls().map((c) => c.callId)).toEqual(["b"]);
    expect(acc.failurePosition()).toBe("arguments_streaming");
  });

  it("a repeated completion does not hand the call out twice; late fragments are ignored; non-object arguments are refused when asked", () => {
    const acc = new ToyAccumulator();
    acc.apply({ t: "call", index: 0, id: "a", name: "pay" });
    acc.apply({ t: "args", index: 0, json: "[1]" });
    const first = acc.apply({ t: "done", index: 0 });
    expect(first).toMatchObject({ phase: "complete", inputError: "arguments are not a JSON object" });
    expect(acc.apply({ t: "done", index: 0 })).toBeUndefined();
    acc.apply({ t: "args", index: 0, json: "junk" });
    expect(first!.partialJson).toBe("[1]");
  });
});

describe("a call whose claim was lost after its run performed the effect (DISPATCH-8, RECORD-2)", () => {
  it("is recorded as happened, not may_have_happened; a stale claim that knows nothing stays may_have_happened", async () => {
    const { StaleClaimError } = await import("@dispatch-once/core");
    const { classifyCallError } = await import("../src/index.js");
    const performed = new StaleClaimError("k".repeat(32), 1, "the effect happened", { effectHappened: true });
    expect(classifyCallError(performed, false)).toMatchObject({ status: "error", effect: "happened" });
    expect(classifyCallError(new StaleClaimError("k".repeat(32), 1), false)).toMatchObject({ status: "error", effect: "may_have_happened" });
  });
});

describe("send() refuses a message member it does not have (ERR-1)", () => {
  it("an idempotencyKey beside id and content is refused naming it, before anything is stored or run: ignored, a re-send under a new id with the same idempotencyKey would pay twice", async () => {
    const { runner, performed, store } = world((_n, input) => ((input.at(-1) as { role?: string }).role === "user" ? [...payCall("c1", "first"), { t: "end" }] : [{ t: "text", index: 0, text: "Paid." }, { t: "end" }]));
    const outcome = await runner.send("conv-members", { id: "m1", content: "pay acme", idempotencyKey: "order-7" } as never).then(
      (result) => `sent: ${result.status}, payments ${performed.length}`,
      (error: unknown) => error,
    );
    expect(outcome).toMatchObject({ code: "invalid_argument", field: "message.idempotencyKey" });
    expect(performed).toEqual([]);
    expect(await store.message("conv-members", "m1")).toBeUndefined();
  });
});
