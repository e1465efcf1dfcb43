import { MemoryLedger } from "@dispatch-once/core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, REPLAYED_META, McpToolGuard, mcpTurn } from "../src/index.js";

/*
 * MCP-13: the guard checks a write's result against the tool's outputSchema after the effect
 * happened. The schema is application code: a refine or transform that throws (a bug, or a
 * lookup it makes that fails) must not turn a payment made and recorded into McpServer's bare
 * error text, which says nothing of the effect and invites a call that pays again (MCP-6).
 */
const text = (result: CallToolResult) => result.content.map((c) => (c.type === "text" ? c.text : "")).join("\n");

describe("MCP-13 an outputSchema whose check throws, after the effect happened", () => {
  const schemas = {
    shape: { paymentId: z.string().refine(() => { throw new Error("refine bug"); }) },
    schema: z.object({ paymentId: z.string() }).transform(() => { throw new Error("transform bug"); }),
  };
  it.each(Object.keys(schemas))("(outputSchema as a %s) is told as the guard's error that says it happened, with the tool's own content; a re-send says the same from the ledger", async (form) => {
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    const guard = new McpToolGuard({ ledger: new MemoryLedger(), dispatcher: { logger: { warn: () => {} } } });
    let paid = 0;
    guard.registerTool(server, "send_payment", { inputSchema: { payee: z.string() }, outputSchema: schemas[form as keyof typeof schemas] as never, effect: "keyed_write" }, async () => {
      paid++;
      return { content: [{ type: "text", text: "payment pay_1" }], structuredContent: { paymentId: "pay_1" } } as never;
    });
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    try {
      const turn = mcpTurn(client, { conversationId: `c_hostile_${form}`, turnIndex: 0 });
      const first = (await turn.callTool({ name: "send_payment", arguments: { payee: "acme" } })) as CallToolResult;
      const again = (await turn.resend({ name: "send_payment", arguments: { payee: "acme" } })) as CallToolResult;
      expect(paid).toBe(1);
      for (const result of [first, again]) {
        expect(result.isError).toBe(true);
        expect(result._meta?.[ERROR_META]).toMatchObject({ code: "tool_result_invalid", effect: "yes", retryable: "no" });
        expect(text(result)).toContain("payment pay_1");
        expect(text(result)).toMatch(/Effect: it happened; do not call it again/);
      }
      expect(again._meta?.[REPLAYED_META]).toBe(true);
    } finally {
      await client.close();
      await server.close();
    }
  });
});
