import { DispatchOnceError } from "./dispatch-once-error.js";

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
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "not_canonicalizable" as const;
  readonly problem: CanonicalizationProblem;
  readonly path: string;
  constructor(problem: CanonicalizationProblem, path: string, message: string) {
    super("not_canonicalizable", `${message} at ${path === "" ? "(root)" : path}`);
    this.problem = problem;
    this.path = path;
  }
}
