import { describe, expect, it } from "vitest";
import type { StreamStep } from "../src/index.js";
import { TurnFailedError } from "../src/index.js";
import { payCall, world, type ToyAccumulator, type ToyEvent } from "./toy.js";

// STREAM-11 at the runner, whatever the stream side: a response that reached its finish event
// while holding a call the runner never dispatched (still open, or made final by the side without
// a StreamStep saying so) is not committed. Committed, it would store a call without its result:
// the provider refuses every later request of the conversation, and the call's effect is told nowhere.
describe("STREAM-11 a finished response holding a call the runner did not dispatch is a failed stream", () => {
  const paid = (n: number): (ToyEvent | "cut")[] => [...payCall(`c${n}`, "rent"), { t: "end" }];
  const reply: (ToyEvent | "cut")[] = [{ t: "text", index: 0, text: "Paid." }, { t: "end" }];
  const isFollowUp = (input: unknown[]) => (input.at(-1) as { role?: string }).role !== "user";

  it("a call still open at the finish event: not committed, retried; the retry's call is paid once and committed with its result", async () => {
    const { runner, performed, events, store } = world((n, input) => {
      if (isFollowUp(input)) return reply;
      // The first response finishes while its call never got its completing event.
      return n === 1 ? [...payCall("c1", "rent").slice(0, 3), { t: "end" }] : paid(n);
    });
    const result = await runner.send("conv-open", { id: "m1", content: "pay acme" });
    expect(events.find((e) => e.type === "stream_failed")).toMatchObject({ attempt: 1, error: expect.stringContaining("c1") });
    expect(events.filter((e) => e.type === "call_abandoned").map((e) => (e as { callId: string }).callId)).toEqual(["c1"]);
    expect(performed).toEqual([{ to: "acme", memo: "rent" }]);
    expect(result.turns[0]!.attempts).toBe(2);
    expect(await store.log("conv-open")).toEqual([{ role: "user", content: "pay acme" }, [{ call: "c2" }], [{ id: "c2", ok: '{"n":1}' }], [{ text: "Paid." }]]);
  });

  it("a call the stream side made final without reporting it: not committed, never run; every attempt fails alike and the turn fails, told as not run", async () => {
    const { runner, performed, events, store, provider } = world(() => paid(1));
    // A stream side whose apply() drops the StreamStep of its completing event (a bug in the side).
    const apply = provider.apply.bind(provider);
    provider.apply = (accumulator: ToyAccumulator, event: ToyEvent): StreamStep => {
      const { complete: _dropped, ...rest } = apply(accumulator, event);
      return rest;
    };
    const error = (await runner.send("conv-unreported", { id: "m1", content: "pay acme" }).catch((e: unknown) => e)) as TurnFailedError;
    expect(error).toBeInstanceOf(TurnFailedError);
    expect(error.record.error).toMatchObject({ code: "stream_incomplete" });
    expect(error.record.error.message).toContain("pay (c1, final but never handed to the runner)");
    expect(error.record.calls.map((c) => [c.status, c.effect])).toEqual(Array(3).fill(["not_run", "not_happened"]));
    expect(events.filter((e) => e.type === "turn_committed")).toHaveLength(0);
    expect(performed).toEqual([]);
    expect((await store.log("conv-unreported")).filter((entry) => Array.isArray(entry))).toEqual([]);
  });
});
