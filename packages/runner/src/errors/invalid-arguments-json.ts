import { DispatchOnceError } from "@dispatch-once/core";

/** A complete call whose arguments are not JSON: a fact about the call, sent to the model as an error. */
export class InvalidArgumentsJsonError extends DispatchOnceError {
  readonly toolName: string;
  constructor(toolName: string, detail: string) {
    super("invalid_arguments_json", `arguments for ${toolName} are not JSON: ${detail}`);
    this.toolName = toolName;
  }
}
