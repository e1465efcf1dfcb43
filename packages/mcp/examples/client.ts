import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { mcpTurn } from "@dispatch-once/mcp";

// One attempt at a turn of the agent's conversation: a regenerate or a retry after a cut
// stream makes a new one with the same conversation id and turn index, so the same calls
// carry the same keys, in params._meta["io.github.dispatch-once/idempotency-key"].
export async function payFromTurn(client: Client, conversationId: string, turnIndex: number) {
  const turn = mcpTurn(client, { conversationId, turnIndex });
  return turn.callTool({ name: "send_payment", arguments: { payee: "acme", amount: 12_500 } });
}
