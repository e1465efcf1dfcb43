// For the conformance CLI, which runs plain node: certifies the BUILT store (dist/; run
// `pnpm --filter @dispatch-once/conversation-sqlite build` first). The subject's hooks are the same
// TypeScript as the vitest suite's, loaded through tsx.
//   pnpm conformance --store packages/conversation-sqlite/test/conformance-subject.mjs --level conversation
//   pnpm conformance --store packages/conversation-sqlite/test/conformance-subject.mjs --level e2e --e2e-runs 50
import { tsImport } from "tsx/esm/api";
import { SqliteConversationStore } from "../dist/index.js";

const { createSqliteConversationSubject } = await tsImport("./subject.ts", import.meta.url);

export default {
  ...createSqliteConversationSubject("conversation-sqlite", SqliteConversationStore),
  // The end-to-end level's store, one per conversation: a private in-memory database (a fresh
  // namespace, as conversation ids repeat from case to case) on the case's clock, which the kit
  // moves to expire a dead worker's turn lease.
  conversationStore: ({ now }) => new SqliteConversationStore({ path: ":memory:", now }),
};
