import { DispatchOnceError } from "./dispatch-once-error.js";
import type { RowState } from "../ledger.js";

/**
 * resolve() met a row whose outcome is not open: a live in-flight claim (its owner may still
 * record the truth) or a completed or failed row (replays already answer it). Nothing changed
 * (RESOLVE-2). An absent row is refused too (`state: "absent"`).
 */
export class ResolutionRefusedError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "resolution_refused" as const;
  readonly key: string;
  readonly state: RowState | "absent";
  constructor(key: string, state: RowState | "absent", message?: string) {
    super(
      "resolution_refused",
      message ??
        `key ${key}: a ${state} row cannot be resolved; only an unknown row, or an in-flight row whose lease has expired, can`,
    );
    this.key = key;
    this.state = state;
  }
}
