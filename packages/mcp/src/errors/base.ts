/** Codes of the errors this package raises itself; the guard also answers core's codes (MCP-6). */
export type McpGuardErrorCode = "idempotency_key_missing" | "idempotency_key_malformed";

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

  /** True for an error of any copy of this package (optionally with the given code); not `instanceof`. */
  static isInstance(error: unknown, code?: McpGuardErrorCode): error is McpGuardError {
    if (typeof error !== "object" || error === null) return false;
    try {
      const branded = (error as Record<symbol, unknown>)[BRAND] === true;
      return branded && (code === undefined || (error as { code?: unknown }).code === code);
    } catch {
      return false;
    }
  }
}
