import { IDEMPOTENCY_KEY_META } from "../meta.js";
import { McpGuardError } from "./base.js";

/** A guarded tool was called without a key in `_meta`, and the guard refuses unkeyed calls (MCP-4). */
export class IdempotencyKeyMissingError extends McpGuardError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "idempotency_key_missing" as const;
  readonly toolName: string;
  constructor(toolName: string) {
    super(
      "idempotency_key_missing",
      `tool ${toolName} is guarded: send the call's idempotency key in params._meta["${IDEMPOTENCY_KEY_META}"]`,
    );
    this.toolName = toolName;
  }
}
