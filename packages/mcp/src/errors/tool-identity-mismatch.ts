import { McpGuardError } from "./base.js";

/**
 * Client and server disagree on a tool's identity (MCP-11): a declared identity contradicts the
 * one the server lists, or a call was keyed over an identity the tool no longer has (the server
 * changed between `tools/list` and `tools/call`). Keyed over one projection and compared over
 * another, a re-worded regenerate either pays again or is refused as another request; nothing runs.
 */
export class ToolIdentityMismatchError extends McpGuardError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "tool_identity_mismatch" as const;
  readonly toolName: string;
  constructor(toolName: string, keyed: unknown, compared: readonly string[] | undefined) {
    const list = (names: unknown) => (names === undefined ? "every argument" : (JSON.stringify(names) ?? typeof names).slice(0, 200));
    super("tool_identity_mismatch", `tool ${toolName}: the call is keyed over ${list(keyed)}, but its identity is ${list(compared)} (MCP-11)`);
    this.toolName = toolName;
  }
}
