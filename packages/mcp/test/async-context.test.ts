import { asyncStoragesRunBy } from "@dispatch-once/test-processes";
import { MemoryLedger } from "@dispatch-once/core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { McpToolGuard, mcpTurn } from "../src/index.js";

/*
 * On Node 20 an AsyncLocalStorage that has run once stays in the process's list of storages for
 * good, and every promise the process creates afterwards walks that list: with a storage per
 * `McpToolGuard`, a server that makes its guard per session or per request (the SDK's stateless
 * Streamable HTTP pattern makes a server per request) slows every promise of the process a little
 * more with each (1 000 of them: about 0.1 ms a promise). The AI SDK wrapper had the same.
 */


/** A fresh server and guard (as a server made per request), one guarded call through it. */
async function oneSession(i: number, paid: string[]): Promise<void> {
  const guard = new McpToolGuard({ ledger: new MemoryLedger() });
  const mcp = new McpServer({ name: "billing", version: "1" });
  guard.registerTool(mcp, "pay", { effect: "keyed_write", inputSchema: { to: z.string() } }, async ({ to }) => {
    paid.push(to);
    return { content: [] };
  });
  const agent = new Client({ name: "agent", version: "1" });
  const [a, b] = InMemoryTransport.createLinkedPair();
  await Promise.all([mcp.connect(b), agent.connect(a)]);
  await mcpTurn(agent, { conversationId: `conv-${i}`, turnIndex: 1 }).callTool({ name: "pay", arguments: { to: "acme" } });
  await agent.close();
}

describe("async context: one storage for every McpToolGuard", () => {
  it("MCP-5 the guarded calls of any number of McpToolGuard run in the same AsyncLocalStorage instances as those of one", async () => {
    const paid: string[] = [];
    const one = await asyncStoragesRunBy(() => oneSession(0, paid));
    expect(one.size).toBeGreaterThan(0);
    const many = await asyncStoragesRunBy(async () => {
      for (let i = 1; i <= 3; i++) await oneSession(i, paid);
    });
    expect(paid).toEqual(["acme", "acme", "acme", "acme"]);
    expect([...many].filter((storage) => !one.has(storage)), "storages made by later McpToolGuard instances (each stays in Node 20's list for good)").toEqual([]);
  });
});
