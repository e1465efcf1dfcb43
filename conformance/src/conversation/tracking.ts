import type { ConversationStore } from "@dispatch-once/core";
import { PendingOperations, trackInstanceHooks, trackMethods } from "../ledger/tracking.js";
import type { ConversationStoreFixture, ConversationStoreSubject } from "./types.js";

/** The contract's asynchronous methods, the optional ones included: what a timeout report lists as pending. */
export const STORE_METHODS: ReadonlySet<string> = new Set([
  "appendUserMessage",
  "message",
  "acquireLease",
  "renewLease",
  "releaseLease",
  "releaseLeaseGrant",
  "beginTurn",
  "commitTurn",
  "failMessage",
  "turnsOf",
  "log",
  "addRecord",
  "records",
  "listFailedTurns",
  "listStalledMessages",
  "close",
]);

/** The ids a call names (conversation, then message or fence), cut short: enough to tell calls apart. */
function describeArgs(args: unknown[]): string {
  return args
    .slice(0, 3)
    .filter((a) => typeof a === "string" || typeof a === "number")
    .map((a) => String(a).slice(0, 24))
    .join(", ");
}

/**
 * The subject as the conversation level's checks see it, as trackSubject does a ledger's: the same
 * behaviour, every call into it (create, reopen, the store's methods, the raw hooks, destroy)
 * registered in `pending` while it runs, so that a check that times out names the store's promises
 * that never settled (`fixture#1/store#2.acquireLease(c-1, worker-a, 30000) pending for 1003 ms`).
 */
export function trackConversationSubject(subject: ConversationStoreSubject, pending: PendingOperations): ConversationStoreSubject {
  let fixtures = 0;
  const tracked: ConversationStoreSubject = {
    name: subject.name,
    capabilities: subject.capabilities,
    async create() {
      const n = ++fixtures;
      const inner = await pending.track(`create() of fixture #${n}`, () => subject.create());
      return trackFixture(inner, pending, `fixture#${n}`);
    },
  };
  if (subject.conversationStore !== undefined) tracked.conversationStore = subject.conversationStore.bind(subject);
  return tracked;
}

function trackFixture(inner: ConversationStoreFixture, pending: PendingOperations, label: string): ConversationStoreFixture {
  // The same instance twice (a subject whose reopen returns the one instance) stays the same object.
  const wrappers = new Map<ConversationStore, ConversationStore>();
  const wrap = (store: ConversationStore): ConversationStore => {
    let wrapped = wrappers.get(store);
    if (wrapped === undefined) {
      wrapped = trackStore(store, pending, `${label}/store#${wrappers.size + 1}`);
      wrappers.set(store, wrapped);
    }
    return wrapped;
  };
  const raw = inner.raw;
  const hook = <A extends unknown[], R>(name: string, fn: (...args: A) => Promise<R>) => (...args: A) =>
    pending.track(`${label} raw.${name}(${describeArgs(args)})`, () => fn.apply(raw, args));
  const trackedRaw: ConversationStoreFixture["raw"] = {
    ...trackInstanceHooks(raw, pending, label, wrap),
    lease: hook("lease", raw.lease),
    messages: hook("messages", raw.messages),
    turns: hook("turns", raw.turns),
    records: hook("records", raw.records),
    expireLease: hook("expireLease", raw.expireLease),
  };
  if (raw.corrupt !== undefined) trackedRaw.corrupt = hook("corrupt", raw.corrupt);
  if (raw.forgetFailedAt !== undefined) trackedRaw.forgetFailedAt = hook("forgetFailedAt", raw.forgetFailedAt);
  return {
    store: wrap(inner.store),
    reopen: async () => wrap(await pending.track(`${label} reopen()`, () => inner.reopen())),
    raw: trackedRaw,
    destroy: () => pending.track(`${label} destroy()`, () => inner.destroy()),
  };
}

/**
 * The store behind a Proxy: the contract's methods are tracked, anything else (an optional method
 * the store does not have, its own helpers, `capabilities`) reads through unchanged, so the checks
 * see exactly the store's surface.
 */
function trackStore(store: ConversationStore, pending: PendingOperations, name: string): ConversationStore {
  return trackMethods(store, pending, name, STORE_METHODS, (_method, args) => describeArgs(args));
}
