import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { RunDeadline, RunDeadlines } from "../src/run-deadlines.js";

class Entry extends RunDeadline {
  expiredAt: number | undefined;
  constructor(private readonly onExpire: (entry: Entry) => void = () => {}) {
    super();
  }
  expire(): void {
    this.expiredAt = Date.now();
    this.onExpire(this);
  }
}

// DISPATCH-18's bound is kept with one timer per distinct bound; these check that a run is
// expired at its own deadline whatever settled before it, and that no timer outlives the runs.
describe("DISPATCH-18 RunDeadlines: one timer per bound, each run expired at its own deadline", () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("a head that settles first leaves the timer armed; it fires, expires nothing, and arms itself for the next run's deadline", () => {
    const deadlines = new RunDeadlines();
    const first = new Entry();
    const second = new Entry();
    deadlines.add(first, 100);
    vi.advanceTimersByTime(50);
    deadlines.add(second, 100);
    deadlines.remove(first);
    vi.advanceTimersByTime(60); // first's deadline has passed
    expect(first.expiredAt).toBeUndefined();
    expect(second.expiredAt).toBeUndefined();
    vi.advanceTimersByTime(39);
    expect(second.expiredAt).toBeUndefined();
    vi.advanceTimersByTime(1);
    expect(second.expiredAt).toBe(1_000_150);
  });

  it("runs of one bound expire in the order they started, each at its own deadline; removed ones never", () => {
    const deadlines = new RunDeadlines();
    const entries = Array.from({ length: 6 }, () => new Entry());
    for (const entry of entries) {
      deadlines.add(entry, 100);
      vi.advanceTimersByTime(10);
    }
    deadlines.remove(entries[2]!);
    deadlines.remove(entries[5]!);
    vi.advanceTimersByTime(200);
    expect(entries.map((e) => e.expiredAt)).toEqual([1_000_100, 1_000_110, undefined, 1_000_130, 1_000_140, undefined]);
  });

  it("distinct bounds keep their own order: a short bound added after a long one expires first", () => {
    const deadlines = new RunDeadlines();
    const patient = new Entry();
    const hasty = new Entry();
    deadlines.add(patient, 300);
    deadlines.add(hasty, 20);
    vi.advanceTimersByTime(20);
    expect(hasty.expiredAt).toBe(1_000_020);
    expect(patient.expiredAt).toBeUndefined();
    vi.advanceTimersByTime(280);
    expect(patient.expiredAt).toBe(1_000_300);
  });

  it("an expiry that settles other runs (they remove themselves) or starts new ones keeps every other deadline", () => {
    const deadlines = new RunDeadlines();
    const later = new Entry();
    const started = new Entry();
    const sibling = new Entry();
    const first = new Entry(() => {
      deadlines.remove(sibling);
      deadlines.add(started, 100);
    });
    deadlines.add(first, 100);
    deadlines.add(sibling, 100);
    vi.advanceTimersByTime(30);
    deadlines.add(later, 100);
    vi.advanceTimersByTime(70);
    expect(first.expiredAt).toBe(1_000_100);
    expect(sibling.expiredAt).toBeUndefined();
    vi.advanceTimersByTime(30);
    expect(later.expiredAt).toBe(1_000_130);
    vi.advanceTimersByTime(70);
    expect(started.expiredAt).toBe(1_000_200);
  });
});

/** Timers that keep this process alive (an unref'd one does not). */
const refedTimers = () => process.getActiveResourcesInfo().filter((r) => r === "Timeout").length;

describe("DISPATCH-18 RunDeadlines keeps a process alive only while a bounded run is pending", () => {
  it("the timer is refed while a run is pending, unrefed once the last one settles, refed again by the next run; never one per run", () => {
    const deadlines = new RunDeadlines();
    const before = refedTimers();
    const a = new Entry();
    const b = new Entry();
    deadlines.add(a, 300_000);
    deadlines.add(b, 300_000);
    expect(refedTimers() - before).toBe(1);
    deadlines.remove(a);
    expect(refedTimers() - before).toBe(1);
    deadlines.remove(b);
    expect(refedTimers() - before).toBe(0);
    deadlines.remove(b);
    const c = new Entry();
    deadlines.add(c, 300_000);
    expect(refedTimers() - before).toBe(1);
    deadlines.remove(c);
    expect(refedTimers() - before).toBe(0);
  });
});
