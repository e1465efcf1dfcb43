import { DispatchOnceError } from "./dispatch-once-error.js";

export class InvalidToolDefinitionError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "invalid_tool_definition" as const;
  constructor(message: string) {
    super("invalid_tool_definition", message);
  }
}
