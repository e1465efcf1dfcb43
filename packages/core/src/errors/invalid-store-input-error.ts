import { DispatchOnceError } from "./dispatch-once-error.js";

/** An option or argument a conversation store cannot accept. */
export class InvalidStoreInputError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "invalid_store_input" as const;
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_store_input", `${field}: ${message}`);
    this.field = field;
  }
}
