import { McpGuardError } from "./base.js";

/**
 * A guarded write ran (its effect happened, and the ledger holds its result), but the result does
 * not match the tool's `outputSchema` (MCP-13). McpServer would answer its own "Output validation
 * error", which reads as a failed call: a model told that calls the tool again, under a new key,
 * and pays again. The guard answers this instead: the effect happened; do not call it again.
 */
export class ToolResultInvalidError extends McpGuardError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "tool_result_invalid" as const;
  readonly toolName: string;
  /** What the result's structured content lacks, as the output schema says it. */
  readonly problem: string;
  constructor(toolName: string, problem: string) {
    super("tool_result_invalid", `tool ${toolName} ran and its effect happened, but its result does not match the tool's outputSchema (${problem}) (MCP-13)`);
    this.toolName = toolName;
    this.problem = problem;
  }
}
