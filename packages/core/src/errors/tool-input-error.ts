import { DispatchOnceError } from "./dispatch-once-error.js";

export interface ToolInputIssue {
  path: (string | number)[];
  message: string;
}

/** The model's arguments failed the tool's schema; nothing was claimed (spec DISPATCH-2). */
export class ToolInputError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "tool_input_invalid" as const;
  readonly toolName: string;
  readonly issues: ToolInputIssue[];
  constructor(toolName: string, issues: ToolInputIssue[]) {
    super(
      "tool_input_invalid",
      `arguments for ${toolName} are invalid: ${issues
        .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
        .join("; ")}`,
    );
    this.toolName = toolName;
    this.issues = issues;
  }
}
