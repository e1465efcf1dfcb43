import { InvalidKeyInputError, describeValue } from "./errors/index.js";
import { CONVERSATION_ID_PATTERN } from "./key.js";

/** A tenant namespace: the conversation-id alphabet without ":", which separates it (KEY-11). */
export const TENANT_PATTERN = /^[A-Za-z0-9_.~-]{1,64}$/;

/**
 * The conversation id of `conversationId` inside `tenant`: `tenant:conversationId` (KEY-11).
 * Conversation ids must be unique across everything that shares a ledger or a downstream key
 * space; two tenants' `conv-1` would otherwise share keys, and one would be answered with the
 * other's payment. The tenant cannot contain ":", so the first ":" always separates the two.
 *
 * @example
 * runner.send(tenantConversationId("acme-corp", "conv-1"), message) // "acme-corp:conv-1"
 */
export function tenantConversationId(tenant: string, conversationId: string): string {
  if (typeof tenant !== "string" || !TENANT_PATTERN.test(tenant)) {
    throw new InvalidKeyInputError("tenant", `must match ${TENANT_PATTERN.source}, got ${describeValue(tenant)}`);
  }
  const id = `${tenant}:${typeof conversationId === "string" ? conversationId : ""}`;
  if (typeof conversationId !== "string" || !CONVERSATION_ID_PATTERN.test(id) || conversationId.length === 0) {
    throw new InvalidKeyInputError(
      "conversationId",
      `with its tenant it must match ${CONVERSATION_ID_PATTERN.source}, got ${describeValue(conversationId)}`,
    );
  }
  return id;
}
