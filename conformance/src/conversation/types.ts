import type { ConversationStore, JsonValue, MessageState } from "@dispatch-once/core";
import type { StoreAddress } from "../silent/silence-proxy.js";

/**
 * What a conversation store's test gives the kit (the conversation-store counterpart of
 * LedgerSubject). Checks that need a capability the subject does not declare are reported
 * "not applicable", never silently skipped.
 */
export interface ConversationStoreSubject {
  /** e.g. "conversation-sqlite" */
  name: string;
  capabilities: ConversationSubjectCapabilities;
  /**
   * What the store documents. Required with `capabilities.silentStore`: `operationBoundMs` is
   * TURN-21's bound on every method (waiting for a connection, connecting and retries included) of
   * an instance from `raw.openVia`.
   */
  limits?: { operationBoundMs?: number };
  /** A store over a FRESH, ISOLATED namespace (new file / schema / map). Called many times. */
  create(): Promise<ConversationStoreFixture>;
  /**
   * Optional, for the end-to-end level (`dispatch-once-conformance --store <module> --level e2e`):
   * the store as the turn runner uses it, a fresh one (its own namespace: conversation ids repeat
   * from case to case) per conversation of each case. Synchronous: a store that needs an async
   * open creates its tables on its first call. `now` is the case's clock, which the kit moves to
   * expire a dead worker's turn lease: a store on its server's clock adds `now() - Date.now()` to
   * it (a test-only offset). The kit closes each store when its case ends. Without it the
   * subject runs the conversation level only.
   */
  conversationStore?(options: { now: () => number }): ConversationStore;
}

export interface ConversationSubjectCapabilities {
  /** Several instances over one store (reopen()) are one store: races between them have one winner. */
  sharedAcrossProcesses: boolean;
  /** A fresh instance (reopen()) sees everything an earlier one wrote (TURN-14). */
  survivesRestart: boolean;
  /** raw.corrupt is implemented: the kit can damage a stored message (store_corrupt). */
  corruption: boolean;
  /** raw.disconnected is implemented: a store whose storage cannot be reached (store_unavailable). */
  unavailability: boolean;
  /**
   * Optional: the store offers the OPTIONAL `listFailedTurns` (TURN-17). Declared true, the store
   * must have the method (checked), and the TURN-17 checks run, `reopenable` included where the
   * store gives it. Absent means false: they are reported not applicable, whatever the store
   * offers (declare it to have them run).
   */
  listFailedTurns?: boolean;
  /**
   * Optional: the store offers the OPTIONAL `listStalledMessages` (TURN-22). Declared true, the
   * store must have the method (checked), and the TURN-22 checks run. Absent means false.
   */
  listStalledMessages?: boolean;
  /**
   * The store keeps a commit's record in the commit's own write (its capabilities say
   * recordsWithCommit). Optional: absent is false, for subjects written before it.
   */
  recordsWithCommit?: boolean;
  /**
   * Optional: raw.forgetFailedAt is implemented, so the kit can make a failed message look as a
   * store version from before `failedAt` existed left it (TURN-17: such a turn is listed with
   * `failedAt` 0). Absent means false: that check is reported not applicable.
   */
  legacyFailedRows?: boolean;
  /**
   * Optional: the store declares `supports.leaseGrants` (TURN-10's lease grant ids: acquireLease
   * takes a grant id, releaseLeaseGrant exists). Declared true, the store must declare the flag
   * and have the method (checked), and the grant-id checks run. Absent means false: they are
   * reported not applicable.
   */
  leaseGrants?: boolean;
  /**
   * Optional: the store declares `supports.reopenWindow` (TURN-12's re-send window:
   * appendUserMessage takes `{ reopenWithinMs }`). Declared true, the store must declare the flag
   * (checked), and the window checks run. Absent means false: they are reported not applicable.
   */
  reopenWindow?: boolean;
  /**
   * Optional: the store declares `supports.boundAt` (TURN-11: a bound message shows the time of
   * its first binding on the store's clock). Declared true, the store must declare the flag
   * (checked), and its check runs. Absent means false: it is reported not applicable.
   */
  boundAt?: boolean;
  /**
   * Optional: the store declares `supports.callKeys` (TURN-24: a commit keeps its calls' keys with
   * the turn, and turnsOf gives them back). Declared true, the store must declare the flag
   * (checked), and its checks run. Absent means false: they are reported not applicable.
   */
  callKeys?: boolean;
  /**
   * Optional: raw.skewedInstance is implemented, so the kit can give an instance a process clock
   * that reads wrong (TURN-10: the turn lease is measured on the store's clock). Absent means false:
   * that check is reported not applicable.
   */
  clockSkew?: boolean;
  /**
   * Optional: the store reaches its storage over TCP, the fixture lets the kit put its
   * SilenceProxy in front of it (raw.storeAddress, raw.openVia), and the subject declares the
   * store's bound (`limits.operationBoundMs`). TURN-21's silent-store checks then make the storage
   * stop answering, after and before the instance connects. Absent means false: they are
   * reported not applicable (an embedded store such as SQLite has no connection to go silent).
   */
  silentStore?: boolean;
}

export type ConversationSubjectCapability = keyof ConversationSubjectCapabilities;

/** The lease columns as stored: `fence` is the highest fence ever issued; owner/expiry only while held. */
export interface RawLease {
  fence: number;
  /** The holder, or undefined when nobody holds the lease (never taken, or released). */
  owner?: string;
  /** Epoch milliseconds on the store's clock, while held. */
  expiresAt?: number;
}

/** A message as stored, decoded by the test hook itself (not by the store). */
export interface RawMessage {
  id: string;
  seq: number;
  state: MessageState;
  content: JsonValue;
  turnIndex?: number;
  failure?: JsonValue;
}

/** A committed turn as stored, decoded by the test hook itself. */
export interface RawTurn {
  turnIndex: number;
  messageId: string;
  assistant: JsonValue;
  toolResults?: JsonValue;
  stopReason: string | null;
}

export interface ConversationStoreFixture {
  store: ConversationStore;
  /** Another store instance over the SAME namespace (a restart, or a second process's view). */
  reopen(): Promise<ConversationStore>;
  /** Direct storage access: assertions read what is stored, not only what the store answers. */
  raw: {
    /** The conversation's lease columns, or undefined when the conversation has never been written. */
    lease(conversationId: string): Promise<RawLease | undefined>;
    /** Every stored message of the conversation, in `seq` order. */
    messages(conversationId: string): Promise<RawMessage[]>;
    /** Every committed turn of the conversation, in turn order. */
    turns(conversationId: string): Promise<RawTurn[]>;
    /** Every record kept beside the conversation, oldest first. */
    records(conversationId: string): Promise<JsonValue[]>;
    /** Make the conversation's current lease lie in the past on the store's clock (nothing else changes). */
    expireLease(conversationId: string): Promise<void>;
    /** Overwrite one stored message with bytes the store cannot decode (only with capabilities.corruption). */
    corrupt?(conversationId: string, messageId: string): Promise<void>;
    /** A store instance whose storage is unreachable (only with capabilities.unavailability). */
    disconnected?(): Promise<ConversationStore>;
    /**
     * Make one failed message's stored row what a store version from before `failedAt` existed
     * left, after whatever upgrade the store runs on such rows: no failure time kept (only with
     * capabilities.legacyFailedRows). Nothing else of the row changes.
     */
    forgetFailedAt?(conversationId: string, messageId: string): Promise<void>;
    /**
     * Another instance over the same store whose process clock reads `offsetMs` off (what it would
     * see on a host whose clock is wrong); only with capabilities.clockSkew. A store without a clock
     * injection point returns `skewStoreProcessClock(anotherInstance, offsetMs)`.
     */
    skewedInstance?(offsetMs: number): Promise<ConversationStore>;
    /** Where the storage listens (TCP): the kit starts its SilenceProxy in front of it. Only with capabilities.silentStore. */
    storeAddress?(): Promise<StoreAddress>;
    /**
     * Another instance over the same namespace that reaches the storage at `via` (the kit's proxy)
     * instead, with the bound `limits.operationBoundMs`; only with capabilities.silentStore. It must
     * return without waiting for the storage (connect lazily): the kit may call it while the
     * storage is silent. destroy() closes it.
     */
    openVia?(via: StoreAddress): Promise<ConversationStore>;
  };
  /** Drop the namespace and close every store instance created from this fixture. */
  destroy(): Promise<void>;
}

export interface ConversationCheckOptions {
  /** Runs of the model-based property. Default 100 (CONFORMANCE_RUNS). */
  runs?: number;
  /** Seed of the property; random when absent (always printed on failure). */
  seed?: number;
  /** fast-check replay path printed with a counterexample. */
  path?: string;
  /** Longest random sequence. Default 40. */
  maxSteps?: number;
  /**
   * Time limit of the model-based property for every 100 of its runs (a replay is one run), in ms:
   * a property over it fails, and fast-check stops starting runs at 90 % of it (an interrupted
   * property is a failure too). The deterministic checks get it from runChecks. Default none: the
   * test runner's own limit (the CLI gives --check-timeout, else $CONFORMANCE_CHECK_TIMEOUT_MS, else 60,000).
   */
  checkTimeoutMs?: number;
}
