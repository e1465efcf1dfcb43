/**
 * Every error Dispatch-Once raises is a DispatchOnceError with a stable `code`.
 * Codes are part of the public contract (spec §11, ERR-1): match on `code` with
 * `isDispatchOnceError(error, code)`, never on `instanceof`. Two copies of this package in
 * one process (ESM and CJS, or two versions) have two different classes; the brand below is
 * a `Symbol.for` key, shared by every copy, so the checks agree across copies (ERR-3).
 */
export type DispatchOnceErrorCode =
  | "invalid_key_input"
  | "not_canonicalizable"
  | "invalid_argument"
  | "unknown_tool"
  | "invalid_tool_definition"
  | "tool_input_invalid"
  | "in_flight_elsewhere"
  | "claim_released"
  | "outcome_unknown"
  | "tool_failed"
  | "stale_claim"
  | "ledger_unavailable"
  | "ledger_corrupt"
  | "result_not_storable"
  | "durability_mismatch"
  | "invalid_ledger_input"
  | "unsafe_store_config"
  | "invalid_arguments_json"
  | "stream_incomplete"
  | "turn_failed"
  | "conversation_busy"
  | "conversation_lease_lost"
  | "store_unavailable"
  | "store_corrupt"
  | "invalid_store_input"
  | "resolution_refused"
  | "idempotency_key_reused"
  | "tool_definition_changed"
  | "message_id_reused";

/** The brand every copy of this package puts on its errors. */
const ERROR_BRAND: unique symbol = Symbol.for("dispatch-once.error") as never;

export class DispatchOnceError extends Error {
  readonly code: DispatchOnceErrorCode;
  declare readonly [ERROR_BRAND]: true;
  constructor(code: DispatchOnceErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, ERROR_BRAND, { value: true });
  }

  /**
   * The code of a subclass's errors (each declares its own); none on this base class, whose
   * `isInstance` recognises every code.
   */
  static readonly code: DispatchOnceErrorCode | undefined = undefined;

  /**
   * True for an error of any copy of this package (by brand and code, ERR-3): called on a
   * subclass, only for that subclass's code (`TurnFailedError.isInstance(e)` narrows `e` to a
   * TurnFailedError); on DispatchOnceError, for every code, or for `code` when given.
   */
  static isInstance<T>(this: { readonly code: DispatchOnceErrorCode | undefined; prototype: T }, error: unknown, code?: DispatchOnceErrorCode): error is T {
    const own = this.code;
    if (own !== undefined && code !== undefined && code !== own) return false;
    return isDispatchOnceError(error, own ?? code);
  }
}

/**
 * True when `error` was raised by any copy of Dispatch-Once (a `Symbol.for` brand, not
 * `instanceof`), and, when `code` is given, carries that code.
 */
export function isDispatchOnceError<C extends DispatchOnceErrorCode>(
  error: unknown,
  code?: C,
): error is DispatchOnceError & { code: C } {
  if (typeof error !== "object" || error === null) return false;
  let branded: boolean;
  try {
    branded = (error as Record<symbol, unknown>)[ERROR_BRAND] === true;
  } catch {
    return false; // a revoked proxy or a throwing getter is not our error
  }
  return branded && (code === undefined || (error as { code?: unknown }).code === code);
}
