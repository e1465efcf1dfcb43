import { isDispatchOnceError } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { DispatchTelemetry, dispatchTelemetry } from "../src/index.js";

/**
 * Findings of the adoption trial (part 2): the telemetry's options were not checked at all. Its
 * event handlers never throw (OTEL-3), so a tracer or clock that is not one was swallowed at every
 * event: no span, no metric, and no word.
 */
function refusal(f: () => unknown): [string, string | undefined] | "accepted" {
  try {
    f();
  } catch (error) {
    if (!isDispatchOnceError(error)) return [`untyped ${(error as Error)?.name}: ${(error as Error)?.message}`, undefined];
    return [error.code, (error as { field?: string }).field];
  }
  return "accepted";
}

describe("adoption trial (opentelemetry): the options are checked when the telemetry is made", () => {
  it("ERR-1 options that are not an object, and an option it does not take, are refused", () => {
    expect(refusal(() => new DispatchTelemetry(null as never))).toEqual(["invalid_argument", "options"]);
    expect(refusal(() => dispatchTelemetry(5 as never))).toEqual(["invalid_argument", "options"]);
    expect(refusal(() => dispatchTelemetry({ maxOpenSpan: 5 } as never))).toEqual(["invalid_argument", "options.maxOpenSpan"]);
  });

  it("OTEL-3 a tracer, meter or clock that is not one is refused, not swallowed at every event", () => {
    expect(refusal(() => dispatchTelemetry({ tracer: {} as never }))).toEqual(["invalid_argument", "options.tracer"]);
    expect(refusal(() => dispatchTelemetry({ tracer: 5 as never }))).toEqual(["invalid_argument", "options.tracer"]);
    expect(refusal(() => dispatchTelemetry({ meter: {} as never }))).toEqual(["invalid_argument", "options.meter"]);
    expect(refusal(() => dispatchTelemetry({ now: 5 as never }))).toEqual(["invalid_argument", "options.now"]);
  });

  it("ERR-1 maxOpenSpans must be a whole number of at least 1 (NaN, -1 and 0 ended every span at once; '10' compared as a string)", () => {
    for (const maxOpenSpans of [Number.NaN, -1, 0, 1.5, "10"]) {
      expect(refusal(() => dispatchTelemetry({ maxOpenSpans: maxOpenSpans as never })), String(maxOpenSpans)).toEqual(["invalid_argument", "options.maxOpenSpans"]);
    }
    expect(refusal(() => dispatchTelemetry({ maxOpenSpans: 1, now: () => 0 }))).toBe("accepted");
    expect(refusal(() => dispatchTelemetry())).toBe("accepted");
  });
});
