import { describe, expect, it } from "vitest";
import { Dispatcher, MemoryLedger, isDispatchOnceError } from "../src/index.js";
import { fakePayments, recordingLogger } from "./helpers.js";

/**
 * ERR-1: a Dispatcher option it cannot use is refused when the Dispatcher is made, with
 * `invalid_argument` naming the option, never accepted and acted on at dispatch time (a lease of
 * 0 ms ends at its claim: a second attempt takes the row over while the tool still runs).
 */
describe("ERR-1 Dispatcher options are checked once, at construction", () => {
  const base = () => ({ tools: [fakePayments().tool], ledger: new MemoryLedger(), logger: recordingLogger().logger });
  const refused: Array<[string, Record<string, unknown>]> = [
    ["leaseMs", { leaseMs: 0 }],
    ["leaseMs", { leaseMs: -1 }],
    ["leaseMs", { leaseMs: Number.NaN }],
    ["leaseMs", { leaseMs: "30000" }],
    ["leaseMs", { leaseMs: 1.5 }],
    ["leaseMs", { leaseMs: 367 * 24 * 60 * 60 * 1000 }],
    ["waitMs", { waitMs: -1 }],
    ["waitMs", { waitMs: Number.POSITIVE_INFINITY }],
    ["pollMs", { pollMs: 0 }],
    ["pollMs", { pollMs: "20" }],
    ["maxPollMs", { maxPollMs: 0 }],
    ["maxPollMs", { pollMs: 100, maxPollMs: 50 }],
    ["claimRetryMs", { claimRetryMs: -5 }],
    ["owner", { owner: "" }],
    ["owner", { owner: 42 }],
    ["logger", { logger: { info: () => {} } }],
    ["onEvent", { onEvent: 5 }],
  ];
  for (const [field, bad] of refused) {
    it(`refuses ${JSON.stringify(bad, (_k, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v))} with invalid_argument (options.${field})`, () => {
      let caught: unknown;
      try {
        new Dispatcher({ ...base(), ...bad } as never);
      } catch (error) {
        caught = error;
      }
      expect(isDispatchOnceError(caught, "invalid_argument")).toBe(true);
      expect((caught as { field?: string }).field).toBe(`options.${field}`);
    });
  }

  it("names what the logger lacks: the Dispatcher and the runner share one check (internal loggerOption)", () => {
    const message = (logger: unknown) => {
      try {
        new Dispatcher({ ...base(), logger } as never);
      } catch (error) {
        return (error as Error).message;
      }
      return undefined;
    };
    expect(message({ info: () => {} })).toBe("options.logger: must be an object with a warn(message, fields) method, got an object whose warn is undefined");
    expect(message(null)).toBe("options.logger: must be an object with a warn(message, fields) method, got null");
    expect(message(console.warn)).toBe("options.logger: must be an object with a warn(message, fields) method, got function");
    expect(message(console)).toBeUndefined();
    expect(message(undefined)).toBeUndefined();
  });

  it("accepts the bounds: a 1 ms lease, waits and retries of 0, equal poll bounds, 366 days", () => {
    expect(() => new Dispatcher({ ...base(), leaseMs: 1, waitMs: 0, claimRetryMs: 0, recordRetryMs: 0, pollMs: 5, maxPollMs: 5 })).not.toThrow();
    expect(() => new Dispatcher({ ...base(), leaseMs: 366 * 24 * 60 * 60 * 1000 })).not.toThrow();
  });
});
