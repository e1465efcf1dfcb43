import type { FailurePosition } from "@dispatch-once/anthropic";

/**
 * Where in a turn a stream can fail, in stream order. A module of its own so that the CLI's
 * thread, which only prints the result, loads none of the run's modules (the SDKs, the mock
 * servers, the ledgers): it kept 55 MB of RSS for nothing.
 */
export const POSITIONS: readonly FailurePosition[] = [
  "before_any_call",
  "arguments_streaming",
  "during_dispatch",
  "after_dispatch_before_stop",
];

/** Positions inside the window: the payment may already have been made. */
export const IN_WINDOW: ReadonlySet<FailurePosition> = new Set(["during_dispatch", "after_dispatch_before_stop"]);
