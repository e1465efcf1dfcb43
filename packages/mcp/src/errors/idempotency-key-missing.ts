import { IDEMPOTENCY_KEY_META } from "../meta.js";
import { McpGuardError } from "./base.js";

/** A guarded tool was called without a key in `_meta`, and the guard refuses unkeyed calls (MCP-4). */
export class IdempotencyKeyMissingError extends McpGuardError {
  readonly toolName: string;
  constructor(toolName: string) {
    super(
      "idempotency_key_missing",
      `tool ${toolName} is guarded: send the call's idempotency key in params._meta["${IDEMPOTENCY_KEY_META}"]`,
    );
    this.toolName = toolName;
  }
}
