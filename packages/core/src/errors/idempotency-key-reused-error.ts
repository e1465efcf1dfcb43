import { DispatchOnceError } from "./dispatch-once-error.js";

/**
 * A call under a key whose stored request is another one, to a tool that refuses differing
 * requests (spec IDENT-6; an MCP client's key reused for other arguments, MCP-9). Nothing ran for
 * this call and the other request's outcome was not handed to it: send it under a key of its own.
 */
export class IdempotencyKeyReusedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "idempotency_key_reused" as const;
  readonly key: string;
  readonly toolName: string;
  constructor(key: string, toolName: string) {
    super(
      "idempotency_key_reused",
      `call ${key} to ${toolName} is stored with other arguments; this request was not run, and the stored request's outcome is not its own`,
    );
    this.key = key;
    this.toolName = toolName;
  }
}
