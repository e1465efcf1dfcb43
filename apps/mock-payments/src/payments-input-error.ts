import { PaymentsError } from "./payments-error.js";

/** Shared by every copy of this package (ESM and CJS, two versions), so `isInstance` agrees across copies. */
const BRAND: unique symbol = Symbol.for("dispatch-once.mock-payments.input-error") as never;

/**
 * The client refused its own input before sending anything: an option or argument it cannot
 * use (`field` names it). The effect did not happen, and the same call fails the same way, as
 * for a 400 ("rejected", disposition "definite"). Thrown by `createPaymentsClient` for its
 * options, and as the rejection of a call for the call's arguments.
 */
export class PaymentsInputError extends PaymentsError {
  readonly code = "invalid_argument" as const;
  readonly outcome = "rejected" as const;
  readonly field: string;
  declare readonly [BRAND]: true;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.name = "PaymentsInputError";
    this.field = field;
    Object.defineProperty(this, BRAND, { value: true });
  }

  /** True for a PaymentsInputError of any copy of this package (by brand, not `instanceof`). */
  static isInstance(error: unknown): error is PaymentsInputError {
    if (typeof error !== "object" || error === null) return false;
    try {
      return (error as Record<symbol, unknown>)[BRAND] === true;
    } catch {
      return false;
    }
  }
}
