import { MODEL_CHECK_PREFIX } from "../ledger/index.js";
import { PendingOperations } from "../ledger/tracking.js";
import { trackConversationSubject } from "./tracking.js";
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
  checks: (subject, o) => {
    // Checks run one after another: the store's calls in flight are those of the check that runs
    // (a timed-out check's calls are dropped when the next starts), named when it times out.
    const pending = new PendingOperations();
    return conversationStoreChecks(trackConversationSubject(subject, pending), {
      runs: o.runs,
      seed: o.seed,
      checkTimeoutMs: o.checkTimeoutMs,
      ...(o.path === undefined ? {} : { path: o.path }),
    }).map((c) => ({
      ...c,
      pending: () => pending.list(),
      run: () => {
        pending.clear();
        return c.run();
      },
    }));
  },
  replayable: (c) => c.name.startsWith(CONVERSATION_MODEL_CHECK_NAME),
  property: () => MODEL_CHECK_PREFIX,
};
