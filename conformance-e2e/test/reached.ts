import { expect } from "vitest";

/**
 * Whether the runs draw from the tests' own seeds. Each test's required kinds (the hard cases) were
 * counted at its own seed and CI's run count; CONFORMANCE_SEED, set to replay a failure, draws other
 * scenarios, among which a rare kind may not fall at those counts (at the AI SDK profile's 30 runs,
 * 3 of 8 random seeds missed one). That says nothing of the library: the property's verdict still
 * stands, and the kinds not reached are printed instead of failing the test.
 */
const ownSeeds = process.env.CONFORMANCE_SEED === undefined;

/** The runs reached `kind` at least once (required at the tests' own seeds, printed otherwise). */
export function expectReached(seen: Record<string, number>, kind: string): void {
  if (ownSeeds) expect(seen[kind] ?? 0, kind).toBeGreaterThan(0);
  else if (!((seen[kind] ?? 0) > 0)) console.warn(`CONFORMANCE_SEED=${process.env.CONFORMANCE_SEED}: the runs did not reach ${kind} (required at the tests' own seeds)`);
}
