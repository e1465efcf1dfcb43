import { DispatchOnceError } from "./dispatch-once-error.js";

/** A key component is outside its alphabet or range (spec KEY-2..KEY-4). */
export class InvalidKeyInputError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "invalid_key_input" as const;
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_key_input", `${field}: ${message}`);
    this.field = field;
  }
}
