// The kit's conversation-store contract, run against this store on the real server (DATABASE_URL).
import { describe, it } from "vitest";
import { registerConversationStoreChecks } from "@dispatch-once/conformance";
import { createPostgresConversationSubject } from "./subject.js";

registerConversationStoreChecks(createPostgresConversationSubject(), { describe, it });
