import { MemoryLedger } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, IDEMPOTENCY_KEY_META, McpToolGuard, mcpTurn, type CallToolParams } from "../src/index.js";

/**
 * Two identical payments the model asked for in one turn (DISPATCH-6: both are made), sent at
 * once; the first one's response is lost after the server ran it. The host re-sends the call whose
 * result never arrived: it must be answered with that call's payment, not the other one's.
 */
let payments: MockPaymentsServer;
let client: Client;
let server: McpServer;
const paymentOf = (result: unknown) => (result as CallToolResult).content.map((c) => (c.type === "text" ? c.text : "")).join("");

beforeEach(async () => {
  payments = await startMockPayments();
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_mcp_resend" });
  server = new McpServer({ name: "billing", version: "1.0.0" });
  new McpToolGuard({ ledger: new MemoryLedger(), dispatcher: { logger: { warn: () => {} } } }).registerTool(
    server,
    "send_payment",
    { inputSchema: { payee: z.string(), amount: z.number().int() }, effect: "keyed_write" },
    async ({ payee, amount }, { idempotencyKey }) => {
      const { body } = await api.createPayment({ payee, amount, currency: "EUR", reference: "R-1" }, { idempotencyKey: idempotencyKey! });
      return { content: [{ type: "text", text: body.id }] };
    },
  );
  client = new Client({ name: "agent", version: "1.0.0" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
});
afterEach(async () => {
  await client.close();
  await server.close();
  await payments.close();
});

describe("resend after a lost response, among identical calls", () => {
  it("of two identical calls sent at once, the one whose response was lost is re-sent with its own key: each call is told its own payment", async () => {
    let sent = 0;
    // The first request's response is lost on the way back (the server ran it).
    const lossy = {
      callTool: async (params: CallToolParams) => {
        const first = sent++ === 0;
        const result = await client.callTool(params);
        if (first) throw new Error("socket hang up");
        return result;
      },
    };
    const turn = mcpTurn(lossy, { conversationId: "c_resend", turnIndex: 0 });
    const pay = { name: "send_payment", arguments: { payee: "acme", amount: 100 } };
    const [a, b] = await Promise.allSettled([turn.callTool(pay), turn.callTool(pay)]);
    expect(a.status).toBe("rejected");
    const told = [paymentOf(await turn.resend(pay)), paymentOf((b as PromiseFulfilledResult<unknown>).value)];
    const made = payments.effects().filter((e) => e.kind === "payment_created").map((e) => e.resourceId);
    expect(made).toHaveLength(2);
    // Each payment made is told once: the re-sent call is answered with its own.
    expect([...told].sort()).toEqual([...made].sort());
  });

  it("MCP-14 the oldest identical call whose outcome is unknown (its send rejected, or answered 'in flight: re-send with the same key') is the one re-sent; with none, the last; a re-send that is answered closes it", async () => {
    const keys: string[] = [];
    const answers: unknown[] = [
      { isError: true, content: [], _meta: { [ERROR_META]: { code: "in_flight_elsewhere", retryable: "same_message", effect: "possibly" } } },
      { content: [] },
    ];
    const recording = {
      callTool: async (params: CallToolParams) => {
        keys.push(params._meta![IDEMPOTENCY_KEY_META] as string);
        return (answers.shift() ?? { content: [] }) as CallToolResult;
      },
    };
    const turn = mcpTurn(recording, { conversationId: "c_resend_unit", turnIndex: 0 });
    const pay = { name: "send_payment", arguments: { payee: "acme", amount: 100 } };
    await turn.callTool(pay);
    await turn.callTool(pay);
    await turn.callTool(pay); // answered
    await turn.resend(pay); // the in-flight ordinal 0, now answered
    await turn.resend(pay); // none unknown: the last, ordinal 2
    expect(keys.slice(3)).toEqual([keys[0], keys[2]]);
  });
});
