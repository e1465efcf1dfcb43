import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { MemoryLedger, type DispatchEvent } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { McpToolGuard, REPLAYED_META, mcpTurn } from "../src/index.js";

let payments: MockPaymentsServer;
let http: Server;
let url: URL;
let events: DispatchEvent[];
let open: () => void;
let started: number;

beforeEach(async () => {
  payments = await startMockPayments();
  events = [];
  started = 0;
  const gate = new Promise<void>((resolve) => (open = resolve));
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_http" });
  // One guard (one ledger) for the process; a new McpServer per request, as the SDK's stateless mode does.
  const guard = new McpToolGuard({
    ledger: new MemoryLedger(),
    dispatcher: { allowVolatileLedgerForUnkeyedWrites: true, logger: { warn: () => {} }, onEvent: (e) => events.push(e) },
  });
  http = createServer((req, res) => void serve(req, res));
  async function serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    guard.registerTool(
      server,
      "create_invoice",
      { inputSchema: { customer: z.string(), amount: z.number().int() }, effect: "unkeyed_write" },
      async ({ customer, amount }) => {
        started++;
        await gate;
        const { body } = await api.createInvoice({ customer, amount, currency: "EUR" });
        return { content: [{ type: "text", text: `invoice ${body.id}` }] };
      },
    );
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on("close", () => void server.close());
    await server.connect(transport);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    await transport.handleRequest(req, res, chunks.length > 0 ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : undefined);
  }
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  url = new URL(`http://127.0.0.1:${(http.address() as AddressInfo).port}/mcp`);
});
afterEach(async () => {
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
  await payments.close();
});

async function connect(): Promise<Client> {
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(url));
  return client;
}

const invoice = { name: "create_invoice", arguments: { customer: "acme", amount: 12_500 } };

describe("over streamable HTTP (stateless), through a dropped connection", () => {
  it("MCP-5: the client's connection drops while the tool runs; the re-sent call on a new connection is answered from the ledger", async () => {
    const first = await connect();
    const lost = mcpTurn(first, { conversationId: "c_http", turnIndex: 0 }).callTool(invoice);
    lost.catch(() => {});
    await until(() => started === 1);
    // The agent's connection dies while the invoice is being created: it never sees the result.
    await first.close();
    open();
    await until(() => events.some((e) => e.type === "recorded" && e.state === "completed"));
    expect(payments.effects().length).toBe(1);

    const second = await connect();
    try {
      // MCP-15 over stateless HTTP: the listing request reaches a fresh McpServer, which the guard answers on too.
      const rerun = mcpTurn(second, { conversationId: "c_http", turnIndex: 0 });
      expect((await rerun.unansweredCalls()).calls.map((c) => [c.name, c.effect, c.result])).toEqual([
        ["create_invoice", "happened", { content: [{ type: "text", text: `invoice ${payments.effects()[0]!.resourceId}` }] }],
      ]);
      const again = (await rerun.callTool(invoice)) as CallToolResult;
      expect(again._meta?.[REPLAYED_META]).toBe(true);
      expect(again.content).toEqual([{ type: "text", text: `invoice ${payments.effects()[0]!.resourceId}` }]);
      expect(payments.effects().length).toBe(1);
      expect(started).toBe(1);
      expect(await rerun.unansweredCalls()).toEqual({ listed: true, calls: [] });
    } finally {
      await second.close();
    }
  });
});

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 2));
}
