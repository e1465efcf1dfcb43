import { EXIT_CODES } from "../exit-codes.js";
import { CliError } from "./cli-error.js";

/**
 * `resolve --not-performed` of a row left `unknown` after `request_mismatch` (its reason begins
 * with `request_mismatch`, RECON-6): the downstream holds the row's key for another request, which
 * may have been performed. Released, every re-run sends the stored request under that key and meets
 * the same refusal; once the downstream has forgotten the key, the re-run performs it a second
 * time. Settle it with `--completed` (the downstream's result for the key) or `reconcile`. Nothing
 * was written. Exit 4.
 */
export class MismatchNotReleasableError extends CliError {
  readonly key: string;
  constructor(key: string) {
    super(
      "mismatch_not_releasable",
      EXIT_CODES.refused,
      `resolve --not-performed refused for ${key}, nothing was written: the row was left unknown after request_mismatch, so the downstream holds its key for another request, which may have been performed (RECON-6); released, every re-run would meet the same refusal, and once the downstream forgets the key it would run again. Look the key up downstream and settle it with --completed (its result) or reconcile`,
    );
    this.key = key;
  }
}
