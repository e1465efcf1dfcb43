// The first oracle's index: what the chaos run counts as payments per reference must not change
// when a reference is settled (its message audited) and only its count is kept.
import { describe, expect, it } from "vitest";
import { EffectIndex, countDuplicates } from "../src/world.js";

const pay = (n: number) => ({ resourceId: `pay_${n}`, idempotencyKey: `key-${n}` });

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
    const before = index.counts();
    index.settle("T-1");
    index.settle("T-1");
    index.settle("T-never");
    expect(index.counts()).toEqual(before);
    // A duplicate that lands after the audit is still a duplicate in the run's counts.
    index.add("T-1", pay(4));
    expect(index.counts()).toEqual(new Map([["T-1", 3], ["T-2", 1]]));
    expect(countDuplicates(index.counts(), ["T-1", "T-2"])).toEqual({ payments: 4, duplicates: 2, duplicatedReferences: ["T-1"] });
    expect(() => index.effectsOf("T-1")).toThrow(/settled/);
    expect(index.effectsOf("T-2")).toEqual([pay(3)]);
  });
});
