/**
 * One bound on a store operation, whatever its storage does (LEDGER-12, TURN-21). A server that is
 * paused, or a partition that sends no reset, accepts bytes and never answers: neither the driver's
 * timeouts nor the server's own (statement_timeout is enforced by the server) end the wait. The
 * adapter races every await of an operation against one deadline and drops what arrives late.
 */

/** An operation did not settle within its bound. Adapters wrap it in their unavailable error as the cause. */
export class DeadlineError extends Error {
  readonly code = "DISPATCH_ONCE_TIMEOUT";
  constructor(
    readonly waitingFor: string,
    readonly timeoutMs: number,
    /** What a caller must know about a write already sent (the store may still apply it). */
    lateWrite: string,
  ) {
    super(`no answer within timeoutMs = ${timeoutMs} ms (waiting for ${waitingFor}); nothing is reported as done (${lateWrite})`);
    this.name = "DeadlineError";
  }
}

/** Where an operation stands against its bound, and what to do with what arrives after it. */
export interface Deadline<T> {
  /** When the operation's bound runs out, on performance.now()'s clock. */
  deadline: number;
  /** The bound itself, for the message. */
  timeoutMs: number;
  /** What the operation was waiting for ("a connection", "the statement"). */
  waitingFor: string;
  /** The DeadlineError's note on a write already sent. */
  lateWrite: string;
  /** Gets what the promise resolves to after the deadline (a connection to put back); else it is dropped. */
  late?: (value: T) => void;
}

/** `promise`, or a DeadlineError once the deadline has passed. */
export function withDeadline<T>(promise: Promise<T>, options: Deadline<T>): Promise<T> {
  const { deadline, timeoutMs, waitingFor, lateWrite, late } = options;
  return new Promise<T>((resolve, reject) => {
    let expired = false;
    let settled = false;
    // Expire after the poll phase: a timer due during a stall runs before that turn's I/O is
    // read, when the answer may be waiting already.
    const timer = setTimeout(
      () =>
        setImmediate(() => {
          if (settled) return;
          expired = true;
          reject(new DeadlineError(waitingFor, timeoutMs, lateWrite));
        }),
      Math.max(0, deadline - performance.now()),
    );
    promise.then(
      (value) => {
        if (!expired) {
          settled = true;
          clearTimeout(timer);
          resolve(value);
        } else late?.(value);
      },
      (error: unknown) => {
        if (!expired) {
          settled = true;
          clearTimeout(timer);
          reject(error);
        }
      },
    );
  });
}
