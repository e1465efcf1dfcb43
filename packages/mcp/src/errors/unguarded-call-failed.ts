import { McpGuardError } from "./base.js";

/**
 * A write run unguarded (`unkeyedCalls: "run"`: the call carried no key) threw (MCP-4). Nothing was
 * claimed, so nothing recorded it and a re-send runs it again. `effect` says what the failure
 * means for the effect: "no" for a `ToolError` whose disposition is `definite` or `not_performed`,
 * "possibly" for any other (`unknown`, `request_mismatch`, an unclassified error). The handler's
 * error is the `cause`.
 */
export class UnguardedCallFailedError extends McpGuardError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "unguarded_call_failed" as const;
  readonly toolName: string;
  /** Whether the effect may have happened, read from the handler's error. */
  readonly effect: "no" | "possibly";
  constructor(toolName: string, effect: "no" | "possibly", cause: unknown) {
    const what = cause instanceof Error ? cause.message : String(cause);
    super("unguarded_call_failed", `tool ${toolName} ran unguarded (the call carried no idempotency key) and failed: ${what}`);
    this.toolName = toolName;
    this.effect = effect;
    Object.defineProperty(this, "cause", { value: cause, enumerable: false, configurable: true, writable: true });
  }
}
