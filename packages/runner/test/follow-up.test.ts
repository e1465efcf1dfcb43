import { describe, expect, it } from "vitest";
import { payCall, world } from "./toy.js";

describe("open() is told a message's later turns (STREAM-18)", () => {
  it("STREAM-18 followUp is false for a message's first turn, true for its later ones, the same on every attempt of a turn, and false again for the next message", async () => {
    // 1: cut; 2: the call, again; 3: the follow-up, cut; 4: the follow-up again; 5: the next message's first turn.
    const { runner, provider } = world((n) => (n === 1 || n === 3 ? ["cut"] : n === 2 ? [...payCall("c1", "m"), { t: "end" }] : [{ t: "text", index: 0, text: "ok" }, { t: "end" }]));
    await runner.send("conv-follow", { id: "m1", content: "pay" });
    await runner.send("conv-follow", { id: "m2", content: "thanks" });
    expect(provider.followUps).toEqual([false, false, true, true, false]);
  });
});
