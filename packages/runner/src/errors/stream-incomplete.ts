import { DispatchOnceError } from "@dispatch-once/core";

/**
 * A stream that ended without the event that finishes a turn (`message_stop`,
 * `response.completed`): a clean close, or an error the provider reported inside the stream.
 * The SDKs raise nothing for either, so the runner raises this (STREAM-1).
 */
export class StreamIncompleteError extends DispatchOnceError {
  /** The code of this class's errors: `isInstance` recognises these, from any copy of the package. */
  static override readonly code = "stream_incomplete" as const;
  readonly eventsSeen: number;
  /** The event that did not arrive (with `finalStop`, the event that finishes a turn the runner commits). */
  readonly finishEvent: string;
  /** What the provider said inside the stream before it ended, when it said anything (`error`, `response.failed`). */
  readonly streamError: string | undefined;
  /**
   * The provider's reason when it ended the response for good (STREAM-13): asking again with the
   * same request ends the same way, so the runner does not retry it.
   */
  readonly finalStop: string | undefined;
  /**
   * Set when the stream did not end but went silent: no event came for this many milliseconds
   * (the runner's `streamIdleTimeoutMs`), and the runner aborted the request (STREAM-16).
   */
  readonly idleMs: number | undefined;
  constructor(eventsSeen: number, finishEvent = "message_stop", streamError?: string, finalStop?: string, idleMs?: number) {
    super(
      "stream_incomplete",
      (idleMs !== undefined
        ? `the stream was idle for ${idleMs} ms (streamIdleTimeoutMs) after ${eventsSeen} events without ${finishEvent}; the request was aborted`
        : finalStop !== undefined
          ? // The finishing event may have come (Chat Completions' finish_reason "length", a Messages
            // API message_stop after max_tokens), with a reason that ends the response for good.
            `the response stopped for good after ${eventsSeen} events (${finalStop}), so the same request is not sent again`
          : `the stream ended after ${eventsSeen} events without ${finishEvent}`) + (streamError !== undefined ? ` (${streamError})` : ""),
    );
    this.idleMs = idleMs;
    this.eventsSeen = eventsSeen;
    this.finishEvent = finishEvent;
    this.streamError = streamError;
    this.finalStop = finalStop;
  }
}
