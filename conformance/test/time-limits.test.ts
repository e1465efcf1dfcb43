import { describe, expect, it } from "vitest";
import { DEFAULT_CHECK_TIMEOUT_MS, END_TO_END_RUNS_PER_CHECK_TIMEOUT, endToEndTimeoutMs, propertyTimeoutMs } from "../src/ledger/index.js";

describe("time limits of the properties", () => {
  it("a ledger property gets the check limit for every 100 runs; a replay is one run", () => {
    expect(propertyTimeoutMs(60_000, 1)).toBe(60_000);
    expect(propertyTimeoutMs(60_000, 100)).toBe(60_000);
    expect(propertyTimeoutMs(60_000, 101)).toBe(120_000);
    expect(propertyTimeoutMs(60_000, 1000, true)).toBe(60_000);
  });

  it("the end-to-end property gets the check limit for every 20 runs: a run is a whole conversation", () => {
    expect(END_TO_END_RUNS_PER_CHECK_TIMEOUT).toBe(20);
    expect(endToEndTimeoutMs(60_000, 3)).toBe(60_000);
    expect(endToEndTimeoutMs(60_000, 20)).toBe(60_000);
    expect(endToEndTimeoutMs(60_000, 21)).toBe(120_000);
    expect(endToEndTimeoutMs(60_000, 1000, true)).toBe(60_000);
    // A certification at the defaults: 200 runs get 10 minutes (PostgreSQL needed about 110 s
    // here, over the 120 s that 100 runs per limit gave it once fast-check's 0.9 was applied),
    // and 1,000 runs 50 minutes, inside the whole run's default hour.
    expect(endToEndTimeoutMs(DEFAULT_CHECK_TIMEOUT_MS, 200)).toBe(600_000);
    expect(endToEndTimeoutMs(DEFAULT_CHECK_TIMEOUT_MS, 1000)).toBe(3_000_000);
  });
});
