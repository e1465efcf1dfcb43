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
  | "resolution_refused";

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

  /** True for an error of any copy of this package (optionally with the given code). */
  static isInstance(error: unknown, code?: DispatchOnceErrorCode): error is DispatchOnceError {
    return isDispatchOnceError(error, code);
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

/** A key component is outside its alphabet or range (spec KEY-2..KEY-4). */
export class InvalidKeyInputError extends DispatchOnceError {
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_key_input", `${field}: ${message}`);
    this.field = field;
  }
}

export type CanonicalizationProblem =
  | "non_finite_number"
  | "lone_surrogate"
  | "unsupported_type"
  | "cycle"
  /** Nested deeper than MAX_CANONICAL_DEPTH: refused with a typed error, never a stack overflow. */
  | "too_deep"
  /** A member JSON would silently drop: symbol-keyed, non-enumerable, or a named property on an array. */
  | "hidden_member"
  /** Reading the value threw (a throwing getter, a revoked proxy). */
  | "unreadable";

/** A value has no RFC 8785 form (spec KEY-6). `path` is a JSON Pointer to the offending value. */
export class CanonicalizationError extends DispatchOnceError {
  readonly problem: CanonicalizationProblem;
  readonly path: string;
  constructor(problem: CanonicalizationProblem, path: string, message: string) {
    super("not_canonicalizable", `${message} at ${path === "" ? "(root)" : path}`);
    this.problem = problem;
    this.path = path;
  }
}

export class UnknownToolError extends DispatchOnceError {
  readonly toolName: string;
  constructor(toolName: unknown) {
    const name = typeof toolName === "string" ? toolName : describeValue(toolName);
    super("unknown_tool", `no tool named ${typeof toolName === "string" ? JSON.stringify(toolName) : name} is registered`);
    this.toolName = name;
  }
}

/**
 * A short description of an untrusted value for an error message; never throws (a bigint,
 * a cycle, a revoked proxy or a throwing toString all get a description).
 */
export function describeValue(value: unknown): string {
  try {
    switch (typeof value) {
      case "string":
        return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
      case "bigint":
        return `${value}n`;
      case "symbol":
      case "function":
      case "undefined":
        return typeof value;
      case "object":
        if (value === null) return "null";
        return Array.isArray(value) ? "an array" : "an object";
      default:
        return String(value);
    }
  } catch {
    return "an unreadable value";
  }
}

export class InvalidToolDefinitionError extends DispatchOnceError {
  constructor(message: string) {
    super("invalid_tool_definition", message);
  }
}

export interface ToolInputIssue {
  path: (string | number)[];
  message: string;
}

/** The model's arguments failed the tool's schema; nothing was claimed (spec DISPATCH-2). */
export class ToolInputError extends DispatchOnceError {
  readonly toolName: string;
  readonly issues: ToolInputIssue[];
  constructor(toolName: string, issues: ToolInputIssue[]) {
    super(
      "tool_input_invalid",
      `arguments for ${toolName} are invalid: ${issues
        .map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`)
        .join("; ")}`,
    );
    this.toolName = toolName;
    this.issues = issues;
  }
}

/** Another attempt holds a live claim on this key and did not finish within the wait bound (LEDGER-9). */
export class InFlightElsewhereError extends DispatchOnceError {
  readonly key: string;
  readonly waitedMs: number;
  constructor(key: string, waitedMs: number) {
    super(
      "in_flight_elsewhere",
      `call ${key} is in flight in another attempt; still unfinished after ${waitedMs} ms`,
    );
    this.key = key;
    this.waitedMs = waitedMs;
  }
}

/**
 * Whether the effect happened cannot be known, and the tool has no downstream key to
 * make a re-run safe (an expired claim on an unkeyed_write, or an unclassified error
 * from one). It is never re-run automatically (LEDGER-6); a human or a reconciler decides.
 */
export class OutcomeUnknownError extends DispatchOnceError {
  readonly key: string;
  readonly reason: string;
  constructor(key: string, reason: string, options?: { cause?: unknown }) {
    super("outcome_unknown", `outcome of call ${key} is unknown (${reason}); it will not be re-run`, options);
    this.key = key;
    this.reason = reason;
  }
}

/**
 * The tool raised an error that does not settle the call, and the claim was released so that
 * a later attempt re-runs it with the same key and the stored request (LEDGER-8, LEDGER-21):
 * a not-performed failure (the effect did not happen) or an unclassified error of a
 * keyed_write (it may have happened; the downstream collapses the re-run on the same key).
 * The tool's own error is the `cause`.
 */
export class ClaimReleasedError extends DispatchOnceError {
  readonly key: string;
  /** True when the tool could not say the effect did not happen. */
  readonly effectMayHaveHappened: boolean;
  constructor(key: string, effectMayHaveHappened: boolean, cause: unknown) {
    const what = cause instanceof Error ? cause.message : String(cause);
    super(
      "claim_released",
      effectMayHaveHappened
        ? `call ${key} may have been performed (${what}); released so a re-run with the same key and request settles it`
        : `call ${key} was not performed (${what}); released so a re-run may perform it`,
      { cause },
    );
    this.key = key;
    this.effectMayHaveHappened = effectMayHaveHappened;
  }
}

/** The JSON form in which a failure is stored in the ledger and replayed. */
export interface StoredError {
  name: string;
  message: string;
  code?: string;
  details?: unknown;
}

/** A recorded, definite failure: the first attempt's error, replayed identically (LEDGER-8). */
export class ToolFailedError extends DispatchOnceError {
  readonly key: string;
  readonly error: StoredError;
  readonly replayed: boolean;
  constructor(key: string, error: StoredError, replayed: boolean) {
    super("tool_failed", `tool failed: ${error.message}`);
    this.key = key;
    this.error = error;
    this.replayed = replayed;
  }
}

/** The fencing token presented no longer owns the row (LEDGER-5). */
export class StaleClaimError extends DispatchOnceError {
  readonly key: string;
  readonly fence: number;
  constructor(key: string, fence: number, message = "claim is no longer held") {
    super("stale_claim", `${message}: key ${key}, fence ${fence}`);
    this.key = key;
    this.fence = fence;
  }
}

/** The store could not be reached or refused the operation; nothing is assumed to have happened (LEDGER-12). */
export class LedgerUnavailableError extends DispatchOnceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("ledger_unavailable", message, options);
  }
}

/** A row exists but cannot be read back; it is never treated as absent (LEDGER-11). */
export class LedgerCorruptError extends DispatchOnceError {
  readonly key: string;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super("ledger_corrupt", `ledger row ${key} cannot be read: ${message}`, options);
    this.key = key;
  }
}

/** The tool's result is not JSON or is over the size limit; the claim is not released (LEDGER-10). */
export class ResultNotStorableError extends DispatchOnceError {
  readonly key: string;
  constructor(key: string, message: string, options?: { cause?: unknown }) {
    super("result_not_storable", `result of call ${key} cannot be stored: ${message}`, options);
    this.key = key;
  }
}

/** An option or argument a ledger adapter cannot accept (a bad table name, a negative lease, ...). */
export class InvalidLedgerInputError extends DispatchOnceError {
  /** The option or argument that was refused, e.g. "table" or "leaseMs". */
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_ledger_input", `${field}: ${message}`);
    this.field = field;
  }
}

/**
 * The store is configured in a way that breaks the ledger's guarantee (an evicting Redis
 * maxmemory-policy forgets claims); adapters refuse to start on it (LEDGER-14).
 */
export class UnsafeStoreConfigError extends DispatchOnceError {
  readonly setting: string;
  readonly value: string;
  readonly node: string;
  constructor(node: string, setting: string, value: string, message: string) {
    super("unsafe_store_config", `${node}: ${setting}=${value}: ${message}`);
    this.node = node;
    this.setting = setting;
    this.value = value;
  }
}

/** An unkeyed_write tool registered against a ledger that can lose acknowledged rows (LEDGER-14). */
export class DurabilityMismatchError extends DispatchOnceError {
  readonly tools: string[];
  constructor(tools: string[], message: string) {
    super("durability_mismatch", message);
    this.tools = tools;
  }
}

/** A public API was called with an argument it does not accept (e.g. `dispatch(null)`). */
export class InvalidArgumentError extends DispatchOnceError {
  /** The argument or option that was refused, e.g. "call", "call.name", "context.ordinal". */
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_argument", `${field}: ${message}`);
    this.field = field;
  }
}

/**
 * How a tool tells the dispatcher what its failure means for the effect (spec LEDGER-8).
 * - "definite": the effect did not happen and a re-run would fail the same way (a declined
 *   card, a validation error from the downstream API). Recorded and replayed identically.
 * - "not_performed": the effect certainly did not happen and a re-run may succeed (a 503
 *   before the request was accepted, a refused connection). The claim is released.
 * - "unknown": the effect may have happened (a timeout or a lost response after the request
 *   was sent). A keyed_write's claim is released, since its re-run sends the same request
 *   under the same key and the downstream collapses it; an unkeyed_write's row becomes unknown.
 * - "request_mismatch": the downstream holds this key for a DIFFERENT request (HTTP 422 in the
 *   IETF Idempotency-Key draft, Stripe's idempotency_error). The first request may have been
 *   performed and no re-run can tell: the row becomes unknown for either class (EFFECT-6).
 * A thrown value that is not a ToolError is "unknown". There is no default: a ToolError
 * constructed without a disposition is "unknown", the safe reading (LEDGER-8).
 */
export type FailureDisposition = "definite" | "not_performed" | "unknown" | "request_mismatch";

const FAILURE_DISPOSITIONS: readonly FailureDisposition[] = ["definite", "not_performed", "unknown", "request_mismatch"];

const TOOL_ERROR_BRAND: unique symbol = Symbol.for("dispatch-once.tool-error") as never;

/** Thrown by a tool's run function to say what its failure means for the effect. */
export class ToolError extends Error {
  readonly disposition: FailureDisposition;
  readonly code: string | undefined;
  readonly details: unknown;
  declare readonly [TOOL_ERROR_BRAND]: true;
  constructor(
    message: string,
    options: { disposition: FailureDisposition; code?: string; details?: unknown; cause?: unknown },
  ) {
    super(message, { cause: options?.cause });
    this.name = "ToolError";
    const disposition = (options as { disposition?: unknown } | undefined)?.disposition;
    // A missing or misspelt disposition must never read as "did not happen".
    this.disposition = FAILURE_DISPOSITIONS.includes(disposition as FailureDisposition)
      ? (disposition as FailureDisposition)
      : "unknown";
    this.code = options?.code;
    this.details = options?.details;
    Object.defineProperty(this, TOOL_ERROR_BRAND, { value: true });
  }

  /** True for a ToolError of any copy of this package. */
  static isInstance(error: unknown): error is ToolError {
    if (typeof error !== "object" || error === null) return false;
    try {
      return (error as Record<symbol, unknown>)[TOOL_ERROR_BRAND] === true;
    } catch {
      return false;
    }
  }
}

/**
 * Another worker holds the conversation's turn lease and did not finish the message within
 * the wait bound (TURN-10). Retryable: re-send the SAME message id later; it is queued, not lost.
 */
export class ConversationBusyError extends DispatchOnceError {
  readonly conversationId: string;
  readonly messageId: string;
  readonly waitedMs: number;
  constructor(conversationId: string, messageId: string, waitedMs: number) {
    super(
      "conversation_busy",
      `conversation ${conversationId} is busy with another turn; message ${messageId} is queued ` +
        `(waited ${waitedMs} ms); re-send the same message id to get its answer`,
    );
    this.conversationId = conversationId;
    this.messageId = messageId;
    this.waitedMs = waitedMs;
  }
}

/** The conversation's turn lease presented no longer holds it: another worker took it over (TURN-10). */
export class ConversationLeaseLostError extends DispatchOnceError {
  readonly conversationId: string;
  readonly fence: number;
  constructor(conversationId: string, fence: number) {
    super("conversation_lease_lost", `turn lease ${fence} of conversation ${conversationId} is no longer held`);
    this.conversationId = conversationId;
    this.fence = fence;
  }
}

/** The conversation store could not be reached or refused the operation. */
export class StoreUnavailableError extends DispatchOnceError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("store_unavailable", message, options);
  }
}

/** Stored conversation data cannot be read back; it is never treated as absent. */
export class StoreCorruptError extends DispatchOnceError {
  readonly conversationId: string;
  constructor(conversationId: string, message: string, options?: { cause?: unknown }) {
    super("store_corrupt", `conversation ${conversationId} cannot be read: ${message}`, options);
    this.conversationId = conversationId;
  }
}

/** An option or argument a conversation store cannot accept. */
export class InvalidStoreInputError extends DispatchOnceError {
  readonly field: string;
  constructor(field: string, message: string) {
    super("invalid_store_input", `${field}: ${message}`);
    this.field = field;
  }
}
