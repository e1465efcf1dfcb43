import { DispatchOnceError } from "./dispatch-once-error.js";

/** A public API was called with an argument it does not accept (e.g. `dispatch(null)`). */
export class InvalidArgumentError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "invalid_argument" as const;
  /** The argument or option that was refused, e.g. "call", "call.name", "context.ordinal". */
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_argument", `${field}: ${message}`);
    this.field = field;
  }
}
