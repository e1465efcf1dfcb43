import { IDEMPOTENCY_KEY_META, IDEMPOTENCY_KEY_PATTERN } from "../meta.js";
import { McpGuardError } from "./base.js";

/**
 * The key in `_meta` is not a string in the accepted alphabet (MCP-3). Always refused, whatever
 * `unkeyedCalls` says: the client meant to guard this call, and running it unguarded would drop
 * that guard without anyone noticing.
 */
export class IdempotencyKeyMalformedError extends McpGuardError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "idempotency_key_malformed" as const;
  readonly toolName: string;
  constructor(toolName: string, description: string) {
    super(
      "idempotency_key_malformed",
      `tool ${toolName}: params._meta["${IDEMPOTENCY_KEY_META}"] must match ${IDEMPOTENCY_KEY_PATTERN.source}, got ${description}`,
    );
    this.toolName = toolName;
  }
}
