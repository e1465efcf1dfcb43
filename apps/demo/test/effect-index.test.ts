// The first oracle's index: what the chaos run counts as payments per reference must not change
// when a reference is settled (its message audited) and only its count is kept, nor with how a
// count is stored (an array slot for a run's `<ROUTE>-<n>` references, a Map entry otherwise).
import { describe, expect, it } from "vitest";
import { EffectIndex, ReferenceCounts, countDuplicates } from "../src/world.js";

const pay = (n: number) => ({ resourceId: `pay_${n}`, idempotencyKey: `key-${n}` });
const snapshot = (counts: ReferenceCounts) => new Map(counts.entries());

describe("EffectIndex", () => {
  it("gives the oracle every effect of a reference in log order until it is settled", () => {
    const index = new EffectIndex();
    index.add("T-1", pay(1));
    index.add("T-2", pay(2));
    index.add("T-1", pay(3));
    expect(index.effectsOf("T-1")).toEqual([pay(1), pay(3)]);
    expect(index.effectsOf("T-9")).toEqual([]);
  });

  it("keeps counting a settled reference, a later effect included, and refuses to read it again", () => {
    const index = new EffectIndex();
    index.add("T-1", pay(1));
    index.add("T-1", pay(2));
    index.add("T-2", pay(3));
    const before = snapshot(index.counts());
    index.settle("T-1");
    index.settle("T-1");
    index.settle("T-never");
    expect(snapshot(index.counts())).toEqual(before);
    // A duplicate that lands after the audit is still a duplicate in the run's counts.
    index.add("T-1", pay(4));
    expect(snapshot(index.counts())).toEqual(new Map([["T-1", 3], ["T-2", 1]]));
    expect(countDuplicates(index.counts(), ["T-1", "T-2"])).toEqual({ payments: 4, duplicates: 2, duplicatedReferences: ["T-1"] });
    expect(countDuplicates(index.counts())).toEqual({ payments: 4, duplicates: 2, duplicatedReferences: ["T-1"] });
    expect(() => index.effectsOf("T-1")).toThrow(/settled/);
    expect(index.effectsOf("T-2")).toEqual([pay(3)]);
  });

  it("counts, and never hands the oracle, an effect that lands on a reference settled before any effect", () => {
    const index = new EffectIndex();
    index.settle("RS-4");
    index.add("RS-4", pay(1));
    expect(index.counts().get("RS-4")).toBe(1);
    expect(() => index.effectsOf("RS-4")).toThrow(/settled/);
  });
});

describe("ReferenceCounts", () => {
  it("answers as a Map<string, number> would, for every kind of reference", () => {
    const counts = new ReferenceCounts();
    const map = new Map<string, number>();
    // Run references (array slots, across growth), look-alikes that must not share a slot, and free text.
    const references = ["T-0", "T-1", "T-5000", "RS-17", "RD-3", "T-01", "T-1 ", "t-1", "T--1", "T-99999999", "TOOLONG-1", "memo", ""];
    for (let round = 0; round < 3; round++) {
      for (const [i, reference] of references.entries()) {
        if ((i + round) % 2 === 0) continue;
        counts.bump(reference);
        map.set(reference, (map.get(reference) ?? 0) + 1);
      }
    }
    for (const reference of [...references, "T-2", "RS-0", "nothing"]) expect(counts.get(reference), reference).toBe(map.get(reference));
    expect(snapshot(counts)).toEqual(map);
  });

  it("keeps a count past an array slot's range exactly", () => {
    const counts = new ReferenceCounts();
    counts.set("T-7", 0xffff);
    counts.bump("T-7");
    counts.bump("T-7");
    expect(counts.get("T-7")).toBe(0x10001);
    expect(snapshot(counts)).toEqual(new Map([["T-7", 0x10001]]));
    counts.set("T-7", 2);
    expect(snapshot(counts)).toEqual(new Map([["T-7", 2]]));
  });
});
