/**
 * A ready-made raw.skewedInstance for adapters with no clock injection point: the instance is the
 * adapter as configured, but while one of its calls runs, this process's wall clock (Date.now()
 * and `new Date()`) reads `offsetMs` off — what the instance would see on a host whose clock is
 * wrong. A ledger that measures leases on the store's clock (SQL now(), Redis TIME) never reads it
 * and behaves as through any other instance; one that reads Date.now() issues leases `offsetMs`
 * off and takes over live claims, which the LEDGER-20 check rejects.
 *
 * One process has one Date, so the skew is global while a skewed call runs: skewed calls are
 * serialised, and the hook is meant for the kit's store-clock check, which makes one call at a
 * time. performance.now() (a monotonic clock, not the host's wall clock) is left alone.
 */
import type { ConversationStore, Ledger } from "@dispatch-once/core";

const RealDate = globalThis.Date;
let queue: Promise<unknown> = Promise.resolve();

async function withSkew<T>(offsetMs: number, call: () => Promise<T>): Promise<T> {
  const turn = queue.then(async () => {
    const realNow = RealDate.now;
    class SkewedDate extends RealDate {
      constructor(...args: unknown[]) {
        if (args.length === 0) super(realNow() + offsetMs);
        else super(...(args as [string]));
      }
      static override now(): number {
        return realNow() + offsetMs;
      }
    }
    globalThis.Date = SkewedDate as DateConstructor;
    try {
      return await call();
    } finally {
      globalThis.Date = RealDate;
    }
  });
  queue = turn.catch(() => undefined);
  return turn;
}

/** `ledger`, every call of which runs with this process's wall clock `offsetMs` off. */
export function skewProcessClock(ledger: Ledger, offsetMs: number): Ledger {
  if (!Number.isFinite(offsetMs)) throw new TypeError(`skewProcessClock: offsetMs must be a finite number, got ${offsetMs}`);
  return {
    get capabilities() {
      return ledger.capabilities;
    },
    claim: (request) => withSkew(offsetMs, () => ledger.claim(request)),
    renew: (key, fence, leaseMs) => withSkew(offsetMs, () => ledger.renew(key, fence, leaseMs)),
    complete: (key, fence, result) => withSkew(offsetMs, () => ledger.complete(key, fence, result)),
    fail: (key, fence, error) => withSkew(offsetMs, () => ledger.fail(key, fence, error)),
    markUnknown: (key, fence, reason) => withSkew(offsetMs, () => ledger.markUnknown(key, fence, reason)),
    release: (key, fence) => withSkew(offsetMs, () => ledger.release(key, fence)),
    lookup: (key) => withSkew(offsetMs, () => ledger.lookup(key)),
    sweep: () => withSkew(offsetMs, () => ledger.sweep()),
    ...(ledger.listExpiredInFlight === undefined
      ? {}
      : { listExpiredInFlight: (options?: { olderThanMs?: number; limit?: number }) => withSkew(offsetMs, () => ledger.listExpiredInFlight!(options)) }),
    close: () => ledger.close(),
  };
}

/**
 * The conversation store's counterpart (TURN-10: the turn lease is measured on the store's clock):
 * `store`, every method call of which runs with this process's wall clock `offsetMs` off. A store
 * whose lease decisions read Date.now() grants and takes leases `offsetMs` off, which the TURN-10
 * clock check rejects; one on its store's clock (SQL now(), SQLite's julianday('now')) does not
 * notice. `close` runs unskewed.
 */
export function skewStoreProcessClock(store: ConversationStore, offsetMs: number): ConversationStore {
  if (!Number.isFinite(offsetMs)) throw new TypeError(`skewStoreProcessClock: offsetMs must be a finite number, got ${offsetMs}`);
  return new Proxy(store, {
    get(target, property, receiver) {
      const value: unknown = Reflect.get(target, property, receiver);
      if (typeof value !== "function" || property === "close") return value;
      return (...args: unknown[]) => withSkew(offsetMs, () => Promise.resolve((value as (...a: unknown[]) => unknown).apply(target, args)));
    },
  });
}
