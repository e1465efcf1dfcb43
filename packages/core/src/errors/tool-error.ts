import { describeValue } from "./describe-value.js";
import { InvalidArgumentError } from "./invalid-argument-error.js";

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

/**
 * The codes Dispatch-Once reads back from a stored failure or a call's record as facts about the
 * call (ERR-6): a failed row under result_not_storable is an effect that happened (LEDGER-10), a
 * call recorded under invalid_arguments_json was never dispatched, one under
 * tool_definition_changed was refused by IDENT-10's guard and answered nothing.
 */
const RESERVED_CODES = Object.freeze(["result_not_storable", "invalid_arguments_json", "tool_definition_changed"] as const);

const isReserved = (code: unknown): boolean => (RESERVED_CODES as readonly unknown[]).includes(code);

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
    const code = options?.code;
    // Stored and recorded in the field that carries Dispatch-Once's own codes, one of those would be
    // read back as Dispatch-Once's (a failed row under result_not_storable HAPPENED, LEDGER-10): ERR-6.
    if (code !== undefined && typeof code !== "string") throw new InvalidArgumentError("options.code", `must be a string, got ${describeValue(code)}`);
    if (isReserved(code)) {
      throw new InvalidArgumentError("options.code", `${JSON.stringify(code)} is a code Dispatch-Once reads back from stored failures as a fact about the call (one of ${RESERVED_CODES.join(", ")}); name the tool's own failure otherwise, e.g. "card_declined" (ERR-6)`);
    }
    this.code = code;
    this.details = options?.details;
    Object.defineProperty(this, TOOL_ERROR_BRAND, { value: true });
  }

  /**
   * The codes a tool's failure may not carry (ERR-6): Dispatch-Once reads them back from stored
   * failures and records as facts about the call. Any other code is the tool's own, kept as given.
   */
  static readonly reservedCodes: readonly string[] = RESERVED_CODES;

  /**
   * The disposition the dispatcher reads from a value a tool threw (LEDGER-8): a ToolError's own,
   * and "unknown" for anything else, for a disposition this version does not know, and for a
   * ToolError carrying one of `reservedCodes`, which another copy of the package (or a change
   * after construction) let through (ERR-6).
   */
  static dispositionOf(error: unknown): FailureDisposition {
    if (!ToolError.isInstance(error)) return "unknown";
    try {
      const { disposition, code } = error;
      return FAILURE_DISPOSITIONS.includes(disposition) && !isReserved(code) ? disposition : "unknown";
    } catch {
      return "unknown";
    }
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
