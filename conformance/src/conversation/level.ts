import { MODEL_CHECK_PREFIX } from "../ledger/index.js";
import type { ConformanceLevel } from "../types.js";
import { conversationStoreChecks } from "./index.js";
import { CONVERSATION_MODEL_CHECK_NAME } from "./model.js";
import type { ConversationStoreSubject } from "./types.js";

/**
 * The conversation-store level as the CLI drives it (`--store <module>`, `--level conversation`):
 * the same report, exit status and replay as the ledger level. Its one property is the
 * model-based check, so `--only model-based:` names it in a printed replay command.
 */
export const conversationLevel: ConformanceLevel<ConversationStoreSubject> = {
  checks: (subject, o) =>
    conversationStoreChecks(subject, {
      runs: o.runs,
      seed: o.seed,
      checkTimeoutMs: o.checkTimeoutMs,
      ...(o.path === undefined ? {} : { path: o.path }),
    }),
  replayable: (c) => c.name.startsWith(CONVERSATION_MODEL_CHECK_NAME),
  property: () => MODEL_CHECK_PREFIX,
};
