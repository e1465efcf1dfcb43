// The kit's conversation-store contract, run against this store on real database files.
import { describe, it } from "vitest";
import { registerConversationStoreChecks } from "@dispatch-once/conformance";
import { createSqliteConversationSubject } from "./subject.js";

registerConversationStoreChecks(createSqliteConversationSubject(), { describe, it });
