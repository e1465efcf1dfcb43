import { DispatchOnceError } from "./dispatch-once-error.js";

export class InvalidToolDefinitionError extends DispatchOnceError {
  constructor(message: string) {
    super("invalid_tool_definition", message);
  }
}
