/**
 * The exit status of every `dispatch-once` command. Scripts branch on these, so they are part of
 * the public contract: a number never changes meaning.
 */
export const EXIT_CODES = Object.freeze({
  /** The command did what it was asked. */
  ok: 0,
  /** The store failed or answered something unexpected (unreachable, corrupt row, a bug). */
  error: 1,
  /** The command line is wrong: unknown command or option, missing or malformed value. Nothing was read or written. */
  usage: 2,
  /** The key has no row in the ledger (never claimed, or swept after its retention). */
  notFound: 3,
  /**
   * The ledger refused, or nothing could be done: resolve on a row that is not open or a stale
   * `--expected-fence`, an operation the ledger does not support, a reconcile that settled nothing,
   * a `resolve --not-performed` of an unkeyed row, or a `resolve --failed` of any row, within `--grace`,
   * a resolve or reconcile of one of Dispatch-Once's own bookkeeping rows (no effect, EFFECT-8).
   */
  refused: 4,
  /** `audit --strict` found a tool whose double-fire is not guarded well enough. */
  risky: 5,
  /** The adapter package for the target (or its driver) is not installed. */
  missingPackage: 6,
} as const);

export type ExitCode = (typeof EXIT_CODES)[keyof typeof EXIT_CODES];
