// The SQLite conversation store as a conformance subject (API: @dispatch-once/conformance
// ConversationStoreSubject). Every create() gets its own database file; the raw hooks read and
// write the tables over a second, independent connection with plain SQL, never the store.
import Database from "better-sqlite3";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ConversationStore, JsonValue } from "@dispatch-once/core";
import { skewStoreProcessClock, type ConversationStoreFixture, type ConversationStoreSubject, type RawMessage, type RawTurn } from "@dispatch-once/conformance";
import { STORE_NOW_SQL, SqliteConversationStore, tablesFor } from "../src/index.js";

const T = tablesFor();

function parse(text: unknown): JsonValue {
  return JSON.parse(String(text)) as JsonValue;
}

/** `StoreClass` is the class to certify (a blind round's mutant of it, test/round-k-blind.test.ts). */
export function createSqliteConversationSubject(name = "conversation-sqlite", StoreClass: typeof SqliteConversationStore = SqliteConversationStore): ConversationStoreSubject {
  return {
    name,
    // silentStore: n/a. SQLite is a library in this process over a local file: no connection can go
    // silent, so TURN-21's silent-store checks are reported not applicable (a stuck file lock is a
    // busy wait, bounded by busyTimeoutMs).
    capabilities: { sharedAcrossProcesses: true, survivesRestart: true, corruption: true, unavailability: true, listFailedTurns: true, listStalledMessages: true, recordsWithCommit: true, legacyFailedRows: true, leaseGrants: true, reopenWindow: true, boundAt: true, callKeys: true, clockSkew: true, silentStore: false },
    async create(): Promise<ConversationStoreFixture> {
      // The kit checks semantics, not the disk: a memory-backed filesystem keeps
      // synchronous=FULL (the default) cheap. The restart and race tests use a real temp dir.
      // One directory per fixture, removed by its destroy (a shared root outlived every process).
      const dir = mkdtempSync(join(existsSync("/dev/shm") ? "/dev/shm" : tmpdir(), "conversation-sqlite-conformance-"));
      const path = join(dir, "conversations.db");
      const stores: SqliteConversationStore[] = [];
      const open = (): SqliteConversationStore => {
        const store = new StoreClass({ path });
        stores.push(store);
        return store;
      };
      const store = open();
      const raw = new Database(path, { timeout: 5000 });
      return {
        store,
        reopen: async (): Promise<ConversationStore> => open(),
        raw: {
          async lease(conversationId) {
            const row = raw.prepare(`SELECT fence, lease_owner, lease_expires_at FROM "${T.conversations}" WHERE conversation_id = ?`).get(conversationId) as
              | { fence: number; lease_owner: string | null; lease_expires_at: number | null }
              | undefined;
            if (row === undefined) return undefined;
            return row.lease_owner === null ? { fence: row.fence } : { fence: row.fence, owner: row.lease_owner, expiresAt: Number(row.lease_expires_at) };
          },
          async messages(conversationId) {
            const rows = raw
              .prepare(`SELECT message_id, seq, state, content, turn_index, failure FROM "${T.messages}" WHERE conversation_id = ? ORDER BY seq`)
              .all(conversationId) as { message_id: string; seq: number; state: RawMessage["state"]; content: string; turn_index: number | null; failure: string | null }[];
            return rows.map((r) => {
              const m: RawMessage = { id: r.message_id, content: parse(r.content), seq: r.seq, state: r.state };
              if (r.turn_index !== null) m.turnIndex = r.turn_index;
              if (r.state === "failed") m.failure = parse(r.failure);
              return m;
            });
          },
          async turns(conversationId) {
            const rows = raw
              .prepare(`SELECT turn_index, message_id, assistant, tool_results, stop_reason FROM "${T.turns}" WHERE conversation_id = ? ORDER BY turn_index`)
              .all(conversationId) as { turn_index: number; message_id: string; assistant: string; tool_results: string | null; stop_reason: string | null }[];
            return rows.map((r) => {
              const t: RawTurn = { turnIndex: r.turn_index, messageId: r.message_id, assistant: parse(r.assistant), stopReason: r.stop_reason };
              if (r.tool_results !== null) t.toolResults = parse(r.tool_results);
              return t;
            });
          },
          async records(conversationId) {
            return (raw.prepare(`SELECT record FROM "${T.records}" WHERE conversation_id = ? ORDER BY seq`).all(conversationId) as { record: string }[]).map((r) =>
              parse(r.record),
            );
          },
          // The store's clock is SQLite's ('now' on this host): one millisecond before it.
          async expireLease(conversationId) {
            raw.prepare(`UPDATE "${T.conversations}" SET lease_expires_at = ${STORE_NOW_SQL} - 1 WHERE conversation_id = ? AND lease_owner IS NOT NULL`).run(conversationId);
          },
          async corrupt(conversationId, messageId) {
            const { changes } = raw.prepare(`UPDATE "${T.messages}" SET content = '{"role":"user",' WHERE conversation_id = ? AND message_id = ?`).run(conversationId, messageId);
            if (changes !== 1) throw new Error(`corrupt: no message ${messageId} in ${conversationId}`);
          },
          // What migrate() leaves in a row that failed before failed_at existed (failedAtUpgradeSql): 0.
          async forgetFailedAt(conversationId, messageId) {
            const { changes } = raw.prepare(`UPDATE "${T.messages}" SET failed_at = 0 WHERE conversation_id = ? AND message_id = ? AND state = 'failed'`).run(conversationId, messageId);
            if (changes !== 1) throw new Error(`forgetFailedAt: no failed message ${messageId} in ${conversationId}`);
          },
          // clockSkew: the store decides leases on SQLite's clock, never this process's, so another
          // instance whose calls run with this process's Date off must grant and respect the same leases.
          skewedInstance: async (offsetMs) => skewStoreProcessClock(open(), offsetMs),
          async disconnected() {
            // A store whose connection is gone (closed under it): every call must fail closed.
            const broken = open();
            broken.database.close();
            return broken;
          },
        },
        async destroy() {
          for (const s of stores) await s.close();
          raw.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  };
}
