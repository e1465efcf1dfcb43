// Blind round K (conformance/README.md): single mutations of this store's REAL source, each a bug
// an adopter's own store mapping could carry, written down from the spec (§4.2, §9) and src/
// before the kit's checks were read. mutatedEntry (@dispatch-once/test-processes) bundles a copy
// of src/index.ts with the patches applied; src/ itself is never written.
import type { SourceMutant } from "@dispatch-once/test-processes";

export type BlindKMutant = SourceMutant;

export const MUTANTS: readonly BlindKMutant[] = [
  {
    id: "cp-lock-without-for-update",
    rule: "TURN-10",
    cause: "the conversation row read with a plain SELECT (the FOR UPDATE dropped, or lost in an ORM's find()): writers of one conversation no longer run one at a time",
    patches: [{ file: "sql.ts", from: "lease_grant, lease_grant_fence FROM ${q.conv} WHERE conversation_id = $1 FOR UPDATE`,", to: "lease_grant, lease_grant_fence FROM ${q.conv} WHERE conversation_id = $1`," }],
  },
  {
    id: "cp-fail-moves-first-failure",
    rule: "TURN-12",
    cause: "the failure statement sets first_failed_at = now() on every failure, as failed_at, instead of keeping the first",
    patches: [{ file: "sql.ts", from: "first_failed_at = coalesce(first_failed_at, ${NOW_MS}) WHERE", to: "first_failed_at = ${NOW_MS} WHERE" }],
  },
  {
    id: "cp-regrant-revives-expired",
    rule: "TURN-10",
    cause: "a re-sent acquire recognised by its grant id without asking whether that grant's lease is still live: an expired grant is revived for a late copy",
    patches: [{ file: "sql.ts", from: "AND c.lease_grant = $2 AND c.lease_grant_fence = c.fence AND c.lease_expires_at > n.now", to: "AND c.lease_grant = $2 AND c.lease_grant_fence = c.fence" }],
  },
  {
    id: "cp-renew-after-release",
    rule: "TURN-10",
    cause: "renew as an update keyed on (conversation, fence) only: a released lease is taken back by its former holder's renewal",
    patches: [
      {
        file: "sql.ts",
        from: "WHERE conversation_id = $1 AND lease_owner IS NOT NULL AND fence = $2 RETURNING lease_expires_at`,",
        to: "WHERE conversation_id = $1 AND fence = $2 RETURNING lease_expires_at`,",
      },
    ],
  },
  {
    id: "cp-rebind-redates",
    rule: "TURN-11",
    cause: "bound_at = now() on every binding (a reopen binds the message again), not only on the first",
    patches: [{ file: "sql.ts", from: "l.message_id <> $2)) ELSE bound_at END", to: "l.message_id <> $2)) ELSE ${NOW_MS} END" }],
  },
  {
    id: "cp-commit-without-version",
    rule: "TURN-5",
    cause: "the commit checks the fence and the message but not the log's version (the expected turn count): an append at any index not yet taken succeeds",
    patches: [
      {
        file: "postgres-conversation-store.ts",
        from: "if (state === undefined || state.turn_count !== c.turnIndex) return { committed: false };",
        to: "if (state === undefined) return { committed: false };",
      },
    ],
  },
];
