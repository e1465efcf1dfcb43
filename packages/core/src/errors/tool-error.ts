/**
 * How a tool tells the dispatcher what its failure means for the effect (spec LEDGER-8).
 * - "definite": the effect did not happen and a re-run would fail the same way (a declined
 *   card, a validation error from the downstream API). Recorded and replayed identically.
 * - "not_performed": the effect certainly did not happen and a re-run may succeed (a 503
 *   before the request was accepted, a refused connection). The claim is released.
 * - "unknown": the effect may have happened (a timeout or a lost response after the request
 *   was sent). A keyed_write's claim is released, since its re-run sends the same request
 *   under the same key and the downstream collapses it; an unkeyed_write's row becomes unknown.
 * - "request_mismatch": the downstream holds this key for a DIFFERENT request (HTTP 422 in the
 *   IETF Idempotency-Key draft, Stripe's idempotency_error). The first request may have been
 *   performed and no re-run can tell: the row becomes unknown for either class (EFFECT-6).
 * A thrown value that is not a ToolError is "unknown". There is no default: a ToolError
 * constructed without a disposition is "unknown", the safe reading (LEDGER-8).
 */
export type FailureDisposition = "definite" | "not_performed" | "unknown" | "request_mismatch";

const FAILURE_DISPOSITIONS: readonly FailureDisposition[] = ["definite", "not_performed", "unknown", "request_mismatch"];

const TOOL_ERROR_BRAND: unique symbol = Symbol.for("dispatch-once.tool-error") as never;

/** Thrown by a tool's run function to say what its failure means for the effect. */
export class ToolError extends Error {
  readonly disposition: FailureDisposition;
  readonly code: string | undefined;
  readonly details: unknown;
  declare readonly [TOOL_ERROR_BRAND]: true;
  constructor(
    message: string,
    options: { disposition: FailureDisposition; code?: string; details?: unknown; cause?: unknown },
  ) {
    super(message, { cause: options?.cause });
    this.name = "ToolError";
    const disposition = (options as { disposition?: unknown } | undefined)?.disposition;
    // A missing or misspelt disposition must never read as "did not happen".
    this.disposition = FAILURE_DISPOSITIONS.includes(disposition as FailureDisposition)
      ? (disposition as FailureDisposition)
      : "unknown";
    this.code = options?.code;
    this.details = options?.details;
    Object.defineProperty(this, TOOL_ERROR_BRAND, { value: true });
  }

  /** True for a ToolError of any copy of this package. */
  static isInstance(error: unknown): error is ToolError {
    if (typeof error !== "object" || error === null) return false;
    try {
      return (error as Record<symbol, unknown>)[TOOL_ERROR_BRAND] === true;
    } catch {
      return false;
    }
  }
}
