import { MemoryConversationStore, type JsonValue, type StoredMessage, type StoredTurn } from "@dispatch-once/core";
import type { ConversationStoreFixture, ConversationStoreSubject, RawLease, RawMessage, RawTurn } from "./types.js";

/** MemoryConversationStore's private state, as the raw hooks and the model reach into it. */
export interface MemoryConversationState {
  messages: Map<string, StoredMessage>;
  order: StoredMessage[];
  turns: StoredTurn[];
  log: JsonValue[];
  lastBound: string | undefined;
  lease: { fence: number; owner: string; expiresAt: number } | undefined;
  fence: number;
  records: JsonValue[];
  /** When each failed message failed; a message without an entry failed at an unknown time (TURN-17). */
  failedAt: Map<string, number>;
}

/**
 * The private per-conversation map of a MemoryConversationStore, reached the way a SQL
 * subject's hooks reach its tables. It is the reference store, so a change to its layout is
 * caught by the kit's own tests, which certify it through these hooks.
 */
export function memoryConversationState(store: MemoryConversationStore, conversationId: string): MemoryConversationState | undefined {
  const map = (store as unknown as { conversations?: unknown }).conversations;
  if (!(map instanceof Map)) throw new Error("MemoryConversationStore no longer keeps its state in `conversations`: update the memory subject");
  return map.get(conversationId) as MemoryConversationState | undefined;
}

/** A monotonic wall clock, so expiring one lease ("now - 1") never moves any other. */
export function monotonicClock(): () => number {
  let last = 0;
  return () => (last = Math.max(last, Date.now()));
}

function rawMessage(m: StoredMessage): RawMessage {
  return structuredClone(m) as RawMessage;
}

/** The raw hooks over a memory store's state (also used by the model-based check for its model). */
export function memoryRaw(store: MemoryConversationStore, now: () => number): ConversationStoreFixture["raw"] {
  return {
    async lease(conversationId): Promise<RawLease | undefined> {
      const state = memoryConversationState(store, conversationId);
      if (state === undefined) return undefined;
      return state.lease === undefined ? { fence: state.fence } : { fence: state.fence, owner: state.lease.owner, expiresAt: state.lease.expiresAt };
    },
    async messages(conversationId) {
      return (memoryConversationState(store, conversationId)?.order ?? []).map(rawMessage);
    },
    async turns(conversationId): Promise<RawTurn[]> {
      return structuredClone(memoryConversationState(store, conversationId)?.turns ?? []);
    },
    async records(conversationId) {
      return structuredClone(memoryConversationState(store, conversationId)?.records ?? []);
    },
    async expireLease(conversationId) {
      const lease = memoryConversationState(store, conversationId)?.lease;
      if (lease !== undefined) lease.expiresAt = now() - 1;
    },
    // A message failed before the store kept failure times has no entry.
    async forgetFailedAt(conversationId, messageId) {
      memoryConversationState(store, conversationId)?.failedAt.delete(messageId);
    },
  };
}

/**
 * The in-memory reference store as a conformance subject: one process and volatile, so it
 * declares no restart, sharing, corruption or unavailability capability, and `reopen`
 * returns the same instance. `conversationStore` gives the end-to-end level a store per
 * conversation on the case's clock.
 */
export function memoryConversationSubject(name = "conversation-memory"): ConversationStoreSubject {
  return {
    name,
    capabilities: { sharedAcrossProcesses: false, survivesRestart: false, corruption: false, unavailability: false, listFailedTurns: true, listStalledMessages: true, recordsWithCommit: true, legacyFailedRows: true, leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true,
      // n/a: an in-process map has no connection that could go silent (TURN-21's silent-store checks).
      silentStore: false },
    async create(): Promise<ConversationStoreFixture> {
      const now = monotonicClock();
      const store = new MemoryConversationStore({ now });
      return {
        store,
        reopen: async () => store,
        raw: memoryRaw(store, now),
        async destroy() {
          await store.close();
        },
      };
    },
    // The end-to-end level's store per conversation, on the case's clock.
    conversationStore: ({ now }) => new MemoryConversationStore({ now }),
  };
}
