// Blind round K (conformance/README.md): single mutations of this store's REAL source, each a bug
// an adopter's own store mapping could carry, written down from the spec (§4.2, §9) and src/
// before the kit's checks were read. mutatedEntry (@dispatch-once/test-processes) bundles a copy
// of src/index.ts with the patches applied; src/ itself is never written.
import type { SourceMutant } from "@dispatch-once/test-processes";

export type BlindKMutant = SourceMutant;

export const MUTANTS: readonly BlindKMutant[] = [
  {
    id: "cs-process-clock",
    rule: "TURN-10",
    cause: "the lease decided on the Node process's clock (Date.now()) instead of SQLite's: processes on hosts or containers whose clocks disagree take each other's live leases",
    patches: [
      {
        file: "sqlite-conversation-store.ts",
        from: "const row = this.stmts.conversation.get(conversationId);",
        to: "const row = this.stmts.conversation.get(conversationId);\n    if (row !== undefined) row.now = Date.now();",
      },
    ],
  },
  {
    id: "cs-earlier-grant-dropped",
    rule: "TURN-10",
    cause: "a new grant overwrites the conversation row's grant id and fence without keeping the superseded grant's id: a late copy of that acquire meets a free lease and takes it",
    patches: [
      {
        file: "sqlite-conversation-store.ts",
        from: "        if (row.lease_grant !== null && row.lease_grant_fence !== null) this.stmts.keepGrant.run(conversationId, row.lease_grant, row.lease_grant_fence, row.now);\n",
        to: "",
      },
    ],
  },
  {
    id: "cs-cursor-without-message",
    rule: "TURN-17",
    cause: "the failed-turns cursor compares (failed_at, conversation_id) only, the message id kept in the cursor but not compared",
    patches: [
      {
        file: "sqlite-conversation-store.ts",
        from: "(m.failed_at, m.conversation_id, m.message_id) > (:after, :afterConversation, :afterMessage)",
        to: "(m.failed_at, m.conversation_id) > (:after, :afterConversation) AND :afterMessage IS NOT NULL",
      },
    ],
  },
  {
    id: "cs-commit-unbound-message",
    rule: "TURN-11",
    cause: "the commit checks that the message exists, not that it is the one in progress: a turn is committed for a queued message nobody bound",
    patches: [
      {
        file: "sqlite-conversation-store.ts",
        from: 'if (stored === undefined || decodeStoredMessage(conversationId, stored).state !== "in_progress") return { committed: false };',
        to: "if (stored === undefined) return { committed: false };",
      },
    ],
  },
  {
    id: "cs-reopen-restarts-window",
    rule: "TURN-12",
    cause: "the reopen copies the last failure's time into first_failed_at (coalesce(failed_at, 0)), so every retry that fails restarts the re-send window",
    patches: [
      {
        file: "sqlite-conversation-store.ts",
        from: "first_failed_at = coalesce(first_failed_at, failed_at, 0) WHERE conversation_id = ? AND message_id = ?",
        to: "first_failed_at = coalesce(failed_at, 0) WHERE conversation_id = ? AND message_id = ?",
      },
    ],
  },
];
