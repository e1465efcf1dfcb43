import { expect } from "vitest";

/** A planted bug's failure is readable: the shrunk scenario's timeline, and the seed and path to replay it. */
export function expectReadable(error: unknown, seed: number): string {
  expect(error).toBeInstanceOf(Error);
  const message = (error as Error).message;
  expect(message).toContain("timeline of the shrunk scenario:");
  expect(message).toMatch(new RegExp(`seed ${seed}, path "[0-9:]+"`));
  return message;
}

/**
 * The shrink budget of the planted-bug tests (EndToEndOptions.shrinkTimeLimitMs): shrinking whole
 * conversations ran on to each test's time cap (40-56 s for some), and a verdict needs the rule and
 * a readable, replayable counterexample, not the smallest one. A test whose assertion needs more
 * shrinking gives itself more, and says why.
 */
export const SHRINK_BUDGET_MS = 3_000;

/**
 * The shrink modes of a planted-bug test whose full shrink is slow (each candidate waits out
 * lapsed leases): CI runs the verdict with shrinking off, and CONFORMANCE_E2E_FULL_SHRINK=1 runs
 * it fully shrunk too.
 */
export const FULL_SHRINK = process.env.CONFORMANCE_E2E_FULL_SHRINK === "1";
export const SHRINKS = [["shrinking off", 0], ...(FULL_SHRINK ? [["fully shrunk", undefined] as const] : [])] as const;
