const BRAND: unique symbol = Symbol.for("dispatch-once.conformance.check-inconclusive") as never;

/**
 * Thrown by a check that could not conclude on this run (CONF-5): what it measures in real time
 * was spoilt by something that is not the subject's verdict, such as a store answering too slowly
 * for the reads to land inside the window the check looks at, or the kit's own process stalled
 * past an operation's deadline. It is not a ConformanceFailure: the subject was not seen breaking
 * the rule, and nothing was certified either. The kit runs the check again on a fresh fixture
 * (INCONCLUSIVE_ATTEMPTS in all); still inconclusive, the check is reported "inconclusive (no
 * violation found; not certified)", and the subject does not conform.
 *
 * Recognised with `CheckInconclusive.isInstance` (a `Symbol.for` brand), never `instanceof`: a
 * level in another package may throw it from another copy of this module.
 */
export class CheckInconclusive extends Error {
  readonly code = "check_inconclusive" as const;
  declare readonly [BRAND]: true;
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "CheckInconclusive";
    Object.defineProperty(this, BRAND, { value: true });
  }

  /** True for a signal thrown by any copy of the kit. */
  static isInstance(error: unknown): error is CheckInconclusive {
    return typeof error === "object" && error !== null && (error as { [BRAND]?: unknown })[BRAND] === true;
  }
}
