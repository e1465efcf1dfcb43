/**
 * Every error Dispatch-Once raises is a DispatchOnceError with a stable `code`.
 * Codes are part of the public contract (spec §10, ERR-1): match on `code`, not on
 * `instanceof`, when errors cross package copies or process boundaries.
 */
export type DispatchOnceErrorCode =
  | "invalid_key_input"
  | "not_canonicalizable"
  | "unknown_tool"
  | "invalid_tool_definition"
  | "tool_input_invalid"
  | "in_flight_elsewhere"
  | "outcome_unknown"
  | "tool_failed"
  | "stale_claim"
  | "ledger_unavailable"
  | "ledger_corrupt"
  | "result_not_storable"
  | "durability_mismatch"
  | "invalid_ledger_input"
  | "unsafe_store_config";

export class DispatchOnceError extends Error {
  readonly code: DispatchOnceErrorCode;
  constructor(code: DispatchOnceErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
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
  | "cycle";

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
  constructor(toolName: string) {
    super("unknown_tool", `no tool named ${JSON.stringify(toolName)} is registered`);
    this.toolName = toolName;
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
  constructor(key: string, reason: string) {
    super("outcome_unknown", `outcome of call ${key} is unknown (${reason}); it will not be re-run`);
    this.key = key;
    this.reason = reason;
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

/**
 * How a tool tells the dispatcher what its failure means for the effect (spec LEDGER-8).
 * - "definite": the effect did not happen and a re-run would fail the same way (a declined
 *   card, a validation error from the downstream API). Recorded and replayed identically.
 * - "not_performed": the effect certainly did not happen and a re-run may succeed (a 503
 *   before the request was accepted, a refused connection). The claim is released.
 * Any other thrown value means the outcome is unknown: a keyed_write's claim is released
 * (the downstream key collapses a re-run); an unkeyed_write's row becomes unknown.
 */
export type FailureDisposition = "definite" | "not_performed";

export class ToolError extends Error {
  readonly disposition: FailureDisposition;
  readonly code: string | undefined;
  readonly details: unknown;
  constructor(
    message: string,
    options: { disposition?: FailureDisposition; code?: string; details?: unknown; cause?: unknown } = {},
  ) {
    super(message, { cause: options.cause });
    this.name = "ToolError";
    this.disposition = options.disposition ?? "definite";
    this.code = options.code;
    this.details = options.details;
  }
}
