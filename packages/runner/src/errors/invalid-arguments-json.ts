import { DispatchOnceError } from "@dispatch-once/core";

/** A complete call whose arguments are not JSON: a fact about the call, sent to the model as an error. */
export class InvalidArgumentsJsonError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "invalid_arguments_json" as const;
  readonly toolName: string;
  constructor(toolName: string, detail: string) {
    super("invalid_arguments_json", `arguments for ${toolName} are not JSON: ${detail}`);
    this.toolName = toolName;
  }
}
