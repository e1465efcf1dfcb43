import type { ClaimRequest, Ledger } from "@dispatch-once/core";
import type { LedgerFixture, LedgerSubject } from "../types.js";
import type { StoreAddress } from "../silent/silence-proxy.js";

/**
 * What the subject is doing right now: every call into the subject (create, reopen, the ledger's
 * methods, the raw hooks, destroy) is registered while it runs, so that a check that times out can
 * say which of the adapter's promises never settled ("ledger#2.claim(key 3f2a19c0, owner racer-3)
 * pending for 60,004 ms") instead of only "timed out".
 */
export class PendingOperations {
  private readonly open = new Map<number, { what: string; since: number }>();
  private next = 0;

  /** Runs `operation`, registered as pending under `what` until it settles. */
  track<T>(what: string, operation: () => Promise<T> | T): Promise<T> {
    const id = this.next++;
    this.open.set(id, { what, since: performance.now() });
    let result: Promise<T>;
    try {
      result = Promise.resolve(operation());
    } catch (error) {
      result = Promise.reject(error);
    }
    return result.finally(() => this.open.delete(id));
  }

  /** One line per operation still in flight, oldest first. */
  list(): string[] {
    const now = performance.now();
    return [...this.open.values()].map((o) => `${o.what} pending for ${Math.round(now - o.since)} ms`);
  }

  clear(): void {
    this.open.clear();
  }
}

/** The contract's asynchronous methods, the optional ones included: what a report lists as pending. */
export const LEDGER_METHODS: ReadonlySet<string> = new Set(["claim", "renew", "complete", "fail", "markUnknown", "release", "lookup", "sweep", "close", "listExpiredInFlight", "listRows", "resolve", "auditTrail", "retire"]);

function describeArgs(method: string, args: unknown[]): string {
  if (method === "claim") {
    const r = args[0] as Partial<ClaimRequest> | undefined;
    return `key ${String(r?.key).slice(0, 8)}, owner ${String(r?.owner)}, ${String(r?.effect)}, leaseMs ${String(r?.leaseMs)}`;
  }
  if (args.length === 0) return "";
  const [key, fence] = args;
  return `key ${String(key).slice(0, 8)}${fence === undefined ? "" : `, fence ${String(fence)}`}`;
}

/**
 * The subject as the checks see it: the same behaviour, every call registered in `pending`. Each
 * distinct ledger instance gets a number (ledger#1 is the fixture's own), so a report can tell
 * which instance hung.
 */
export function trackSubject(subject: LedgerSubject, pending: PendingOperations): LedgerSubject {
  let fixtures = 0;
  return {
    name: subject.name,
    capabilities: subject.capabilities,
    ...(subject.limits === undefined ? {} : { limits: subject.limits }),
    async create(options) {
      const n = ++fixtures;
      const inner = await pending.track(`create(${options === undefined ? "" : JSON.stringify(options)}) of fixture #${n}`, () => subject.create(options));
      return trackFixture(inner, pending, `fixture#${n}`);
    },
  };
}

function trackFixture(inner: LedgerFixture, pending: PendingOperations, label: string): LedgerFixture {
  const wrappers = new Map<Ledger, Ledger>();
  const wrap = (ledger: Ledger): Ledger => {
    // The same instance twice (a subject whose reopen returns the one instance) stays the same object.
    let wrapped = wrappers.get(ledger);
    if (wrapped !== undefined) return wrapped;
    const name = `${label}/ledger#${wrappers.size + 1}`;
    wrapped = trackLedger(ledger, pending, name);
    wrappers.set(ledger, wrapped);
    return wrapped;
  };
  const raw = inner.raw;
  const hook = <A extends unknown[], R>(name: string, fn: ((...args: A) => Promise<R>) | undefined) =>
    fn === undefined ? undefined : (...args: A) => pending.track(`${label} raw.${name}(${args.map((a) => String(a).slice(0, 12)).join(", ")})`, () => fn.apply(raw, args));
  const trackedRaw: LedgerFixture["raw"] = {
    ...trackInstanceHooks(raw, pending, label, wrap),
    read: hook("read", raw.read)!,
    expireLease: hook("expireLease", raw.expireLease)!,
    expireRetention: hook("expireRetention", raw.expireRetention)!,
  };
  if (raw.corrupt !== undefined) trackedRaw.corrupt = hook("corrupt", raw.corrupt)!;
  if (raw.expireRetired !== undefined) trackedRaw.expireRetired = hook("expireRetired", raw.expireRetired)!;
  return {
    ledger: wrap(inner.ledger),
    reopen: async () => wrap(await pending.track(`${label} reopen()`, () => inner.reopen())),
    raw: trackedRaw,
    destroy: () => pending.track(`${label} destroy()`, () => inner.destroy()),
  };
}

/** The raw hooks both levels' fixtures offer that give an instance (or its store's address). */
export interface InstanceHooks<T> {
  disconnected?(): Promise<T>;
  storeAddress?(): Promise<StoreAddress>;
  openVia?(via: StoreAddress): Promise<T>;
  skewedInstance?(offsetMs: number): Promise<T>;
}

/**
 * Those of `raw`'s instance hooks it has, each registered in `pending` while it runs and each
 * instance it gives wrapped by `wrap` (tracked as the fixture's own). Shared by both levels.
 */
export function trackInstanceHooks<T>(raw: InstanceHooks<T>, pending: PendingOperations, label: string, wrap: (instance: T) => T): InstanceHooks<T> {
  const tracked: InstanceHooks<T> = {};
  const { disconnected, storeAddress, openVia, skewedInstance } = raw;
  if (disconnected !== undefined) tracked.disconnected = async () => wrap(await pending.track(`${label} raw.disconnected()`, () => disconnected.call(raw)));
  if (storeAddress !== undefined) tracked.storeAddress = () => pending.track(`${label} raw.storeAddress()`, () => storeAddress.call(raw));
  if (openVia !== undefined) tracked.openVia = async (via) => wrap(await pending.track(`${label} raw.openVia(${via.host}:${via.port})`, () => openVia.call(raw, via)));
  if (skewedInstance !== undefined) tracked.skewedInstance = async (offsetMs) => wrap(await pending.track(`${label} raw.skewedInstance(${offsetMs})`, () => skewedInstance.call(raw, offsetMs)));
  return tracked;
}

/**
 * The ledger behind a Proxy: the contract's methods are tracked, anything else (an optional method
 * the ledger does not have, an adapter's own helpers, `capabilities`) reads through unchanged, so
 * the checks see exactly the adapter's surface.
 */
function trackLedger(ledger: Ledger, pending: PendingOperations, name: string): Ledger {
  return trackMethods(ledger, pending, name, LEDGER_METHODS, describeArgs);
}

/**
 * `target` behind a Proxy whose methods named in `tracked` are registered in `pending` while they
 * run (as `name.method(description)`); anything else (an optional method the subject does not have,
 * its own helpers, `capabilities`) reads through unchanged, so the checks see exactly its surface.
 * Shared by the ledger and conversation levels.
 */
export function trackMethods<T extends object>(target: T, pending: PendingOperations, name: string, tracked: ReadonlySet<string>, describe: (method: string, args: unknown[]) => string): T {
  // One wrapper per method value, so `t.claim === t.claim` holds and a replaced method is seen.
  const wrapped = new Map<PropertyKey, { value: unknown; fn: unknown }>();
  return new Proxy(target, {
    get(inner, property) {
      const value = Reflect.get(inner, property, inner) as unknown;
      if (typeof value !== "function") return value;
      const cached = wrapped.get(property);
      if (cached?.value === value) return cached.fn;
      const method = String(property);
      const call = value as (...a: unknown[]) => unknown;
      const fn = tracked.has(method)
        ? (...args: unknown[]) => pending.track(`${name}.${method}(${describe(method, args)})`, () => call.apply(inner, args) as Promise<unknown>)
        : call.bind(inner);
      wrapped.set(property, { value, fn });
      return fn;
    },
  });
}
