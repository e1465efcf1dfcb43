// The renewal wheel's entry list (issue 14) against the Set it replaced: the same renewals, at
// the same times, in the same order, for any sequence of adds, removes and elapsed time.
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { RenewalWheel, type RenewalEntry } from "../src/renewals.js";

/** The wheel as it was written with a Set: the general way the linked entries stand in for. */
class SetWheel {
  private readonly entries = new Set<{ due: number; fire: () => void }>();
  private readonly tickMs: number;
  private timer: ReturnType<typeof setInterval> | undefined;
  constructor(private readonly periodMs: number) {
    this.tickMs = Math.max(1, Math.floor(periodMs / 4));
  }
  add(fire: () => void): { due: number; fire: () => void } {
    const entry = { due: Date.now() + this.periodMs, fire };
    this.entries.add(entry);
    if (this.timer === undefined) this.timer = setInterval(() => this.tick(), this.tickMs);
    return entry;
  }
  remove(entry: { due: number; fire: () => void }): void {
    this.entries.delete(entry);
  }
  private tick(): void {
    if (this.entries.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const now = Date.now();
    for (const entry of this.entries) {
      if (entry.due > now + this.tickMs) continue;
      entry.due = now + this.periodMs;
      entry.fire();
    }
  }
}

type Step = { op: "add" } | { op: "remove"; which: number } | { op: "wait"; ms: number } | { op: "removeNeverAdded"; flag: boolean };
const step: fc.Arbitrary<Step> = fc.oneof(
  fc.constant({ op: "add" as const }),
  fc.record({ op: fc.constant("removeNeverAdded" as const), flag: fc.boolean() }),
  fc.record({ op: fc.constant("remove" as const), which: fc.nat(20) }),
  fc.record({ op: fc.constant("wait" as const), ms: fc.integer({ min: 0, max: 120 }) }),
);

describe("RenewalWheel (LEDGER-9)", () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("LEDGER-9 renews exactly what the Set-based wheel renews, when it renews it, in the same order; removing an entry never added changes nothing", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 40 }), fc.array(step, { maxLength: 60 }), (periodMs, steps) => {
        vi.clearAllTimers();
        vi.setSystemTime(0);
        const fired: Record<"list" | "set", string[]> = { list: [], set: [] };
        type Entry = RenewalEntry & { id: number };
        const list = new RenewalWheel<Entry>(periodMs, (entry) => fired.list.push(`${Date.now()}:${entry.id}`));
        const set = new SetWheel(periodMs);
        const entries: { list: Entry; set: ReturnType<SetWheel["add"]> }[] = [];
        for (const s of steps) {
          if (s.op === "add") {
            const id = entries.length;
            const entry: Entry = { id, due: 0, prev: undefined, next: undefined, removed: false };
            list.add(entry);
            entries.push({ list: entry, set: set.add(() => fired.set.push(`${Date.now()}:${id}`)) });
          } else if (s.op === "remove") {
            // Removing twice, or an entry long removed, does nothing.
            const entry = entries[s.which % Math.max(1, entries.length)];
            if (entry !== undefined) {
              list.remove(entry.list);
              set.remove(entry.set);
            }
          } else if (s.op === "removeNeverAdded") {
            // An entry that was never added, whatever its flag says, is not the wheel's to
            // unlink: removing it must leave every added one renewed.
            list.remove({ id: -1, due: 0, prev: undefined, next: undefined, removed: s.flag });
          } else {
            vi.advanceTimersByTime(s.ms);
          }
        }
        vi.advanceTimersByTime(periodMs * 2);
        expect(fired.list).toEqual(fired.set);
        for (const entry of entries) {
          list.remove(entry.list);
          set.remove(entry.set);
        }
        // Both stop their timer at the first tick that finds nothing to renew.
        vi.advanceTimersByTime(periodMs);
        expect(vi.getTimerCount()).toBe(0);
      }),
      { numRuns: 300 },
    );
  });
});
