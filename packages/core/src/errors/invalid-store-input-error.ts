import { DispatchOnceError } from "./dispatch-once-error.js";

/** An option or argument a conversation store cannot accept. */
export class InvalidStoreInputError extends DispatchOnceError {
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_store_input", `${field}: ${message}`);
    this.field = field;
  }
}
