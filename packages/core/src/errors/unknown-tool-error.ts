import { describeValue } from "./describe-value.js";
import { DispatchOnceError } from "./dispatch-once-error.js";

export class UnknownToolError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "unknown_tool" as const;
  readonly toolName: string;
  constructor(toolName: unknown) {
    const name = typeof toolName === "string" ? toolName : describeValue(toolName);
    super("unknown_tool", `no tool named ${typeof toolName === "string" ? JSON.stringify(toolName) : name} is registered`);
    this.toolName = name;
  }
}
