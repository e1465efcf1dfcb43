import { StreamIncompleteError } from "./errors/stream-incomplete.js";
import { notSettledByResend, type CallRecord } from "./record.js";
import type { FailurePosition } from "./phases.js";

export type AttemptFailure =
  | { kind: "stream"; position: FailurePosition; error: unknown }
  /** The stream finished but a dispatched call could not be resolved (in flight elsewhere, unknown, released). */
  | { kind: "call"; error: unknown; calls: CallRecord[] }
  /** The store refused to keep the turn the stream established (content it cannot store, e.g. nested past KEY-6's bound). */
  | { kind: "commit"; error: unknown };

export interface RetryPolicy {
  /**
   * Attempts of one turn, the first included.
   * @default 3
   * @example new TurnRunner(provider, { dispatcher, store, retry: { attempts: 5 } })
   */
  attempts: number;
  /**
   * Delay before retry number n (1 for the first retry).
   * @default (n) => 100 * 2 ** (n - 1)
   * @example new TurnRunner(provider, { dispatcher, store, retry: { backoffMs: (n) => Math.min(250 * 2 ** (n - 1), 5_000) } })
   */
  backoffMs(retry: number): number;
  /**
   * Whether a failed attempt is worth another one.
   * @default every stream failure except a permanent 4xx (any 4xx but 408, 409 and 429) and a response the provider ended for good (STREAM-13); every unresolved call except an unknown outcome or a result that could not be stored; never a turn the conversation store refused to keep (`kind: "commit"`)
   * @example new TurnRunner(provider, { dispatcher, store, retry: { shouldRetry: (failure) => failure.kind === "stream" && defaultRetryPolicy.shouldRetry(failure) } })
   */
  shouldRetry(failure: AttemptFailure): boolean;
}

/** Client errors that a retry cannot fix: a malformed request, bad credentials (both SDKs carry `status`). */
export function isPermanentRequestError(error: unknown): boolean {
  const status = (error as { status?: unknown } | undefined)?.status;
  return typeof status === "number" && status >= 400 && status < 500 && ![408, 409, 429].includes(status);
}

/** A stream the provider ended for good: the same request ends the same way (STREAM-13). */
export function isFinalStop(error: unknown): boolean {
  return error instanceof StreamIncompleteError && error.finalStop !== undefined;
}

export const defaultRetryPolicy: RetryPolicy = {
  attempts: 3,
  backoffMs: (retry) => 100 * 2 ** (retry - 1),
  // A retry is safe at every position because the ledger answers repeats (STREAM-5); only what
  // asking again cannot settle is left for a person: an unknown outcome, an effect that happened
  // without its result in hand (an unstorable result, a claim lost after the run: ERR-4).
  shouldRetry: (failure) =>
    failure.kind === "stream"
      ? !isPermanentRequestError(failure.error) && !isFinalStop(failure.error)
      : failure.kind === "commit"
        ? false
        : !failure.calls.some(notSettledByResend),
};
