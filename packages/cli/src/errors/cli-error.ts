import type { ExitCode } from "../exit-codes.js";

/** Stable codes of the CLI's own errors; match on `code`, never on the message. */
export type CliErrorCode =
  | "usage"
  | "invalid_target"
  | "adapter_missing"
  | "key_not_found"
  | "unsupported_operation"
  | "tools_module"
  | "nothing_settled"
  | "too_soon"
  | "fence_moved"
  | "mismatch_not_releasable"
  | "record_row";

/** Shared by every copy of this package (ESM and CJS, two versions), unlike `instanceof`. */
const CLI_ERROR_BRAND: unique symbol = Symbol.for("dispatch-once.cli-error") as never;

/** Every error the CLI raises itself: a stable `code` and the exit status it ends the process with. */
export class CliError extends Error {
  readonly code: CliErrorCode;
  readonly exitCode: ExitCode;
  declare readonly [CLI_ERROR_BRAND]: true;
  constructor(code: CliErrorCode, exitCode: ExitCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.exitCode = exitCode;
    this.name = new.target.name;
    Object.defineProperty(this, CLI_ERROR_BRAND, { value: true });
  }

  /** True for a CLI error of any copy of this package (optionally with the given code). */
  static isInstance(error: unknown, code?: CliErrorCode): error is CliError {
    if (typeof error !== "object" || error === null) return false;
    try {
      if ((error as Record<symbol, unknown>)[CLI_ERROR_BRAND] !== true) return false;
    } catch {
      return false;
    }
    return code === undefined || (error as { code?: unknown }).code === code;
  }
}
