/** Codes of the errors this package raises itself; the guard also answers core's codes (MCP-6). */
export type McpGuardErrorCode = "idempotency_key_missing" | "idempotency_key_malformed" | "tool_identity_mismatch" | "tool_result_invalid" | "unguarded_call_failed";

/** Shared by every copy of this package (ESM and CJS, two versions), so checks agree across copies. */
const BRAND: unique symbol = Symbol.for("dispatch-once.mcp.error") as never;

export class McpGuardError extends Error {
  readonly code: McpGuardErrorCode;
  declare readonly [BRAND]: true;
  constructor(code: McpGuardErrorCode, message: string) {
    super(message);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, BRAND, { value: true });
  }

  /**
   * The code of a subclass's errors (each declares its own); none on this base class, whose
   * `isInstance` recognises every code.
   */
  static readonly code: McpGuardErrorCode | undefined = undefined;

  /**
   * True for an error of any copy of this package (by brand and code; not `instanceof`): called
   * on a subclass, only for that subclass's code (`IdempotencyKeyMissingError.isInstance(e)`
   * narrows `e` to that class); on McpGuardError, for every code, or for `code` when given.
   */
  static isInstance<T>(this: { readonly code: McpGuardErrorCode | undefined; prototype: T }, error: unknown, code?: McpGuardErrorCode): error is T {
    const own = this.code;
    if (own !== undefined && code !== undefined && code !== own) return false;
    const wanted = own ?? code;
    if (typeof error !== "object" || error === null) return false;
    try {
      const branded = (error as Record<symbol, unknown>)[BRAND] === true;
      return branded && (wanted === undefined || (error as { code?: unknown }).code === wanted);
    } catch {
      return false;
    }
  }
}
