import { inspect, isDeepStrictEqual } from "node:util";
import type { Counterexample } from "./types.js";

/** A property its time limit stopped: the runs it made (none failed), of how many, and the limit. */
export interface PropertyInterruption {
  numRuns: number;
  runs: number;
  timeLimitMs: number;
}

const FAILURE_BRAND: unique symbol = Symbol.for("dispatch-once.conformance.failure") as never;

/**
 * Thrown by a check that found the subject breaking a rule. `violates` names the rule when
 * it differs from the check's own (a model check covers several rules).
 *
 * Recognised with `ConformanceFailure.isInstance` (a `Symbol.for` brand), never `instanceof`: a
 * level in another package (`@dispatch-once/conformance-e2e`) may throw it from another copy of
 * this module (its CJS build, or another version), and the report must still read its rule.
 */
export class ConformanceFailure extends Error {
  readonly violates: string | undefined;
  readonly counterexample: Counterexample | undefined;
  /**
   * Set when a property's time limit stopped it before its runs were done and none of the runs it
   * made broke a rule: a failure only because it certifies nothing, which the report says.
   */
  readonly interrupted: PropertyInterruption | undefined;
  declare readonly [FAILURE_BRAND]: true;
  constructor(message: string, options: { violates?: string; counterexample?: Counterexample; interrupted?: PropertyInterruption; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = "ConformanceFailure";
    this.violates = options.violates;
    this.counterexample = options.counterexample;
    this.interrupted = options.interrupted;
    Object.defineProperty(this, FAILURE_BRAND, { value: true });
  }

  /** True for a failure thrown by any copy of the kit. */
  static isInstance(error: unknown): error is ConformanceFailure {
    return typeof error === "object" && error !== null && (error as { [FAILURE_BRAND]?: unknown })[FAILURE_BRAND] === true;
  }
}

export function show(value: unknown): string {
  if (typeof value === "string" && value.length > 200) {
    return `${inspect(value.slice(0, 120))}…(${value.length} chars)`;
  }
  return inspect(value, { depth: 6, breakLength: Infinity, maxStringLength: 200, maxArrayLength: 20 });
}

export function must(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ConformanceFailure(message);
}

export function mustEqual(actual: unknown, expected: unknown, what: string): void {
  if (!isDeepStrictEqual(actual, expected)) {
    throw new ConformanceFailure(`${what}: expected ${show(expected)}, got ${show(actual)}`);
  }
}

/** The stable `code` of a thrown value, if it has one (codes cross package copies; instanceof does not). */
export function codeOf(error: unknown): string | undefined {
  if (typeof error === "object" && error !== null && "code" in error) {
    const code = (error as { code: unknown }).code;
    return typeof code === "string" ? code : undefined;
  }
  return undefined;
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = codeOf(error);
    return code === undefined ? `${error.name}: ${error.message}` : `${error.name} [${code}]: ${error.message}`;
  }
  return show(error);
}

/** Awaits `promise` and requires it to reject with the given stable code. */
export async function mustRejectWith(promise: Promise<unknown>, code: string, what: string): Promise<unknown> {
  let outcome: unknown;
  try {
    outcome = await promise;
  } catch (error) {
    if (codeOf(error) !== code) {
      throw new ConformanceFailure(`${what}: expected an error with code ${code}, got ${describeError(error)}`, {
        cause: error,
      });
    }
    return error;
  }
  throw new ConformanceFailure(`${what}: expected an error with code ${code}, but it succeeded with ${show(outcome)}`);
}
