import { MemoryLedger, ToolError, isDispatchOnceError, type DispatchEvent } from "@dispatch-once/core";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  ERROR_META,
  IDEMPOTENCY_KEY_META,
  REPLAYED_META,
  McpToolGuard,
  idempotencyKeyFor,
  mcpTurn,
  type GuardErrorMeta,
  type McpToolGuardOptions,
} from "../src/index.js";

let payments: MockPaymentsServer;
beforeEach(async () => {
  payments = await startMockPayments();
});
afterEach(async () => {
  await payments.close();
});

interface Setup {
  client: Client;
  guard: McpToolGuard;
  /** Keys the handlers saw, in order. */
  seen: (string | undefined)[];
  events: DispatchEvent[];
  close(): Promise<void>;
}

/**
 * An McpServer with two guarded tools (an unkeyed invoice, a keyed payment) and a client,
 * connected over the SDK's in-memory transport.
 */
async function setup(options: Partial<McpToolGuardOptions> = {}, gate?: Promise<void>): Promise<Setup> {
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_mcp" });
  const seen: (string | undefined)[] = [];
  const events: DispatchEvent[] = [];
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({
    ledger: new MemoryLedger(),
    ...options,
    // The in-memory ledger is volatile; these tests are about the wire, not durability (LEDGER-14 is tested below).
    dispatcher: { allowVolatileLedgerForUnkeyedWrites: true, pollMs: 5, logger: { warn: () => {} }, onEvent: (e) => events.push(e), ...options.dispatcher },
  });
  guard.registerTool(
    server,
    "create_invoice",
    { description: "Bill a customer (the API deduplicates nothing)", inputSchema: { customer: z.string(), amount: z.number().int() }, effect: "unkeyed_write" },
    async ({ customer, amount }, extra) => {
      seen.push(extra.clientKey);
      await gate;
      if (customer === "explode") throw new Error("connection reset after the request was sent");
      const { body } = await api.createInvoice({ customer, amount, currency: "EUR" });
      return { content: [{ type: "text", text: `invoice ${body.id}` }], structuredContent: { id: body.id } };
    },
  );
  guard.registerTool(
    server,
    "send_payment",
    { inputSchema: { payee: z.string(), amount: z.number().int() }, effect: "keyed_write" },
    async ({ payee, amount }, { idempotencyKey, clientKey }) => {
      seen.push(clientKey);
      if (payee === "nobody") throw new ToolError("payee unknown", { disposition: "definite", code: "payee_unknown" });
      const { body } = await api.createPayment({ payee, amount, currency: "EUR", reference: "R-1" }, { idempotencyKey: idempotencyKey! });
      return { content: [{ type: "text", text: `payment ${body.id}` }] };
    },
  );
  const client = new Client({ name: "agent", version: "1.0.0" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  return {
    client,
    guard,
    seen,
    events,
    close: async () => {
      await client.close();
      await server.close();
    },
  };
}

const invoice = { name: "create_invoice", arguments: { customer: "acme", amount: 12_500 } };
const text = (result: unknown) => (result as CallToolResult).content.map((c) => (c.type === "text" ? c.text : "")).join("");
const errorMeta = (result: unknown) => (result as CallToolResult)._meta?.[ERROR_META] as GuardErrorMeta | undefined;

describe("MCP-1, MCP-2: the client carries core's key in _meta", () => {
  it("mcpTurn sends idempotencyKeyFor(conversation, turn, ordinal, name, arguments) under io.github.dispatch-once/idempotency-key", async () => {
    const s = await setup();
    try {
      const turn = mcpTurn(s.client, { conversationId: "c_1", turnIndex: 4 });
      await turn.callTool(invoice);
      await turn.callTool(invoice); // the same call again in the same turn: ordinal 1 (TURN-4)
      expect(IDEMPOTENCY_KEY_META).toBe("io.github.dispatch-once/idempotency-key");
      expect(s.seen).toEqual([
        idempotencyKeyFor({ conversationId: "c_1", turnIndex: 4, ordinal: 0 }, invoice),
        idempotencyKeyFor({ conversationId: "c_1", turnIndex: 4, ordinal: 1 }, invoice),
      ]);
      expect(payments.effects().length).toBe(2);
    } finally {
      await s.close();
    }
  });

  it("resend re-sends the last identical call with its key; callTool again is the next call", async () => {
    const s = await setup();
    try {
      const turn = mcpTurn(s.client, { conversationId: "c_r", turnIndex: 0 });
      const first = await turn.callTool(invoice);
      const resent = await turn.resend(invoice);
      expect(payments.effects().length).toBe(1);
      expect((resent as CallToolResult)._meta?.[REPLAYED_META]).toBe(true);
      expect(text(resent)).toBe(text(first));
      await turn.callTool(invoice);
      expect(payments.effects().length).toBe(2);
      expect(() => turn.resend({ name: "create_invoice", arguments: { customer: "never", amount: 1 } })).toThrow(/no call/);
    } finally {
      await s.close();
    }
  });

  it("keeps the caller's other _meta members", async () => {
    const s = await setup();
    try {
      const turn = mcpTurn(s.client, { conversationId: "c_1", turnIndex: 0 });
      const key = turn.peekKey(invoice);
      await turn.callTool({ ...invoice, _meta: { "com.example/trace": "t1" } });
      expect(s.seen).toEqual([key]);
    } finally {
      await s.close();
    }
  });
});

describe("MCP-3, MCP-5: the guard claims before the handler runs and replays a repeated key", () => {
  it("a re-sent tools/call with the same key creates one invoice (effect log) and answers the stored result", async () => {
    const s = await setup();
    try {
      const first = await mcpTurn(s.client, { conversationId: "c_1", turnIndex: 2 }).callTool(invoice);
      // The turn replayed after a cut stream: a new attempt, the same call, so the same key.
      const again = await mcpTurn(s.client, { conversationId: "c_1", turnIndex: 2 }).callTool(invoice);
      expect(payments.effects({ kind: "invoice_created" } as never).length).toBe(1);
      expect(s.seen.length).toBe(1);
      expect(text(again)).toBe(text(first));
      expect((again as CallToolResult).structuredContent).toEqual((first as CallToolResult).structuredContent);
      expect((again as CallToolResult)._meta?.[REPLAYED_META]).toBe(true);
      expect((first as CallToolResult)._meta?.[REPLAYED_META]).toBeUndefined();
    } finally {
      await s.close();
    }
  });

  it("two concurrent calls with one key run the handler once; both get its result", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const s = await setup({}, gate);
    try {
      const a = mcpTurn(s.client, { conversationId: "c_2", turnIndex: 0 }).callTool(invoice);
      const b = mcpTurn(s.client, { conversationId: "c_2", turnIndex: 0 }).callTool(invoice);
      // Hold the first run until the second call has met its claim in flight.
      await until(() => s.events.some((e) => e.type === "waiting"));
      open();
      const [ra, rb] = await Promise.all([a, b]);
      expect(payments.effects().length).toBe(1);
      expect(s.seen.length).toBe(1);
      expect(text(ra)).toBe(text(rb));
    } finally {
      await s.close();
    }
  });

  it("MCP-5: a client that times out (the SDK cancels the request) does not abort the claimed run; the re-sent key gets its result", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const api = createPaymentsClient({ baseURL: payments.url, token: "acct_mcp" });
    const guard = new McpToolGuard({ ledger: new MemoryLedger(), dispatcher: { allowVolatileLedgerForUnkeyedWrites: true, logger: { warn: () => {} } } });
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    let runs = 0;
    guard.registerTool(
      server,
      "create_invoice",
      { inputSchema: { customer: z.string(), amount: z.number().int() }, effect: "unkeyed_write" },
      // A careful handler: it stops its downstream request when its signal aborts (as fetch does).
      async ({ customer, amount }, { signal }) => {
        runs += 1;
        await gate;
        signal.throwIfAborted();
        const { body } = await api.createInvoice({ customer, amount, currency: "EUR" });
        return { content: [{ type: "text", text: `invoice ${body.id}` }] };
      },
    );
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    try {
      const turn = mcpTurn(client, { conversationId: "c_cancel", turnIndex: 0 });
      // The response is lost to the client's timeout: the SDK sends notifications/cancelled.
      await expect(turn.callTool(invoice, undefined, { timeout: 20 })).rejects.toThrow(/timed out/);
      await client.ping(); // the server has read the cancellation (messages arrive in order)
      open();
      const resent = (await turn.resend(invoice)) as CallToolResult;
      expect(errorMeta(resent)).toBeUndefined();
      expect(text(resent)).toMatch(/^invoice inv_/);
      expect(runs).toBe(1);
      expect(payments.effects().length).toBe(1);
    } finally {
      await client.close();
      await server.close();
    }
  });

  it("a different turn or a different conversation runs again", async () => {
    const s = await setup();
    try {
      await mcpTurn(s.client, { conversationId: "c_3", turnIndex: 0 }).callTool(invoice);
      await mcpTurn(s.client, { conversationId: "c_3", turnIndex: 1 }).callTool(invoice);
      await mcpTurn(s.client, { conversationId: "c_4", turnIndex: 0 }).callTool(invoice);
      expect(payments.effects().length).toBe(3);
      expect(new Set(s.seen).size).toBe(3);
    } finally {
      await s.close();
    }
  });

  it("DISPATCH-4, MCP-16: a keyed_write handler forwards the call's row key downstream as Idempotency-Key", async () => {
    const s = await setup();
    const call = { name: "send_payment", arguments: { payee: "acme", amount: 700 } };
    try {
      await mcpTurn(s.client, { conversationId: "c_5", turnIndex: 1 }).callTool(call);
      const [effect] = payments.effects();
      const rowKey = s.guard.ledgerKeyFor("send_payment", idempotencyKeyFor({ conversationId: "c_5", turnIndex: 1 }, call));
      expect(rowKey).toMatch(/^[0-9a-f]{32}$/);
      // The payments API's effect log names the ledger row an operator inspects or resolves.
      expect(effect?.idempotencyKey).toBe(rowKey);
      expect((await s.guard.dispatcher.ledger.lookup(effect!.idempotencyKey!))?.state).toBe("completed");
    } finally {
      await s.close();
    }
  });
});

describe("MCP-9: a key reused for other arguments is refused", () => {
  // A client that assigns its own keys (a UUID per user action) and reuses one after an edit.
  const key = "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47";
  const keyed = (args: Record<string, unknown>) => ({ name: "create_invoice", arguments: args, _meta: { [IDEMPOTENCY_KEY_META]: key } });

  it("a finished key called with other arguments: idempotency_key_reused, the handler does not run, the first result is not handed over", async () => {
    const s = await setup();
    try {
      const first = await s.client.callTool(keyed({ customer: "acme", amount: 12_500 }));
      const other = await s.client.callTool(keyed({ customer: "acme", amount: 99_000 }));
      expect((other as CallToolResult).isError).toBe(true);
      expect(errorMeta(other)).toMatchObject({ code: "idempotency_key_reused", retryable: "no", effect: "no", key });
      expect(text(other)).not.toContain(text(first));
      expect((other as CallToolResult).structuredContent).toBeUndefined();
      // One invoice, for the first request; the stored row is still the first one's.
      expect(payments.effects().length).toBe(1);
      expect(s.seen).toEqual([key]);
      const row = await s.guard.dispatcher.ledger.lookup(s.guard.ledgerKeyFor("create_invoice", key));
      expect(row).toMatchObject({ state: "completed", fence: 1 });
      expect(JSON.parse(row!.request)).toEqual({ key, args: { customer: "acme", amount: 12_500 }, downstream: "scoped" });
      // The first request re-sent is still answered from the ledger.
      const again = await s.client.callTool(keyed({ amount: 12_500, customer: "acme" }));
      expect((again as CallToolResult)._meta?.[REPLAYED_META]).toBe(true);
      expect(text(again)).toBe(text(first));
    } finally {
      await s.close();
    }
  });

  it("IDENT-7 arguments holding a number beyond 2^53 - 1 are refused, so two account ids rounded to one double are not one request", async () => {
    const server = new McpServer({ name: "bank", version: "1.0.0" });
    const guard = new McpToolGuard({ ledger: new MemoryLedger(), dispatcher: { logger: { warn: () => {} } } });
    const ran: unknown[] = [];
    guard.registerTool(server, "transfer", { inputSchema: { account: z.number(), amount: z.number().int() }, effect: "keyed_write" }, async (args) => {
      ran.push(args);
      return { content: [{ type: "text", text: `sent to ${args.account}` }] };
    });
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    try {
      // Two accounts the agent's JSON parser has already rounded to one double.
      for (const text of ['{"account":1234567890123456789,"amount":5}', '{"account":1234567890123456788,"amount":5}']) {
        const result = await client.callTool({ name: "transfer", arguments: JSON.parse(text), _meta: { [IDEMPOTENCY_KEY_META]: key } });
        expect((result as CallToolResult).isError).toBe(true);
        expect(errorMeta(result)).toMatchObject({ code: "tool_input_invalid", effect: "no" });
      }
      expect(ran).toEqual([]);
    } finally {
      await client.close();
      await server.close();
    }
  });

  it("a key in flight for other arguments is refused at once (no wait), and the first call completes", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const s = await setup({ dispatcher: { waitMs: 60_000 } }, gate);
    try {
      const first = s.client.callTool(keyed({ customer: "acme", amount: 1 }));
      await until(() => s.events.some((e) => e.type === "run_started"));
      const other = await s.client.callTool(keyed({ customer: "globex", amount: 1 }));
      expect(errorMeta(other)?.code).toBe("idempotency_key_reused");
      open();
      expect((await first as CallToolResult).isError).toBeFalsy();
      expect(payments.effects().length).toBe(1);
      expect(s.seen).toEqual([key]);
    } finally {
      open();
      await s.close();
    }
  });

  it("a keyed write whose handler said nothing ran is re-run only for its own arguments", async () => {
    const s = await setup();
    const pay = (amount: number) => ({ name: "send_payment", arguments: { payee: "acme", amount }, _meta: { [IDEMPOTENCY_KEY_META]: key } });
    try {
      await payments.close();
      // The payments API is down: the client's fetch fails before anything is sent; the claim is released.
      const down = await s.client.callTool(pay(700));
      expect(errorMeta(down)?.code).toBe("claim_released");
      const other = await s.client.callTool(pay(701));
      expect(errorMeta(other)?.code).toBe("idempotency_key_reused");
      expect(s.seen).toEqual([key]);
      const row = await s.guard.dispatcher.ledger.lookup(s.guard.ledgerKeyFor("send_payment", key));
      expect(row?.state).toBe("released");
      expect(JSON.parse(row!.request)).toEqual({ key, args: { payee: "acme", amount: 700 }, downstream: "scoped" });
    } finally {
      payments = await startMockPayments(); // for afterEach
      await s.close();
    }
  });
});

describe("MCP-8: a namespace per principal", () => {
  // A stand-in for extra.authInfo (the in-memory transport carries no authentication).
  const tenantOf = (extra: { _meta?: Record<string, unknown> }) => `billing:${String(extra._meta?.["com.example/tenant"])}`;

  it("the same key from two principals runs once for each; a repeat within one is replayed", async () => {
    const s = await setup({ namespace: tenantOf });
    const key = idempotencyKeyFor({ conversationId: "c_9", turnIndex: 0 }, invoice);
    const send = (tenant: string) => s.client.callTool({ ...invoice, _meta: { [IDEMPOTENCY_KEY_META]: key, "com.example/tenant": tenant } });
    try {
      await send("alice");
      await send("bob");
      const again = await send("alice");
      expect(payments.effects().length).toBe(2);
      expect((again as CallToolResult)._meta?.[REPLAYED_META]).toBe(true);
      expect((await s.guard.dispatcher.ledger.lookup(s.guard.ledgerKeyFor("create_invoice", key, "billing:bob")))?.state).toBe("completed");
    } finally {
      await s.close();
    }
  });

  it("a namespace function's answer outside the alphabet refuses the call with invalid_argument", async () => {
    const s = await setup({ namespace: () => "has space" });
    try {
      const result = await mcpTurn(s.client, { conversationId: "c_9", turnIndex: 0 }).callTool(invoice);
      expect(errorMeta(result)?.code).toBe("invalid_argument");
      expect(s.seen.length).toBe(0);
    } finally {
      await s.close();
    }
  });
});

describe("MCP-4, MCP-6: refusals and unsettled outcomes are tool errors with a code", () => {
  it("refuses a write without a key by default (idempotency_key_missing), and runs nothing", async () => {
    const s = await setup();
    try {
      const result = await s.client.callTool(invoice);
      expect((result as CallToolResult).isError).toBe(true);
      expect(errorMeta(result)).toMatchObject({ code: "idempotency_key_missing", retryable: "no", effect: "no" });
      expect(payments.effects().length).toBe(0);
    } finally {
      await s.close();
    }
  });

  it('runs an unkeyed call unguarded under unkeyedCalls: "run" (the handler sees no key)', async () => {
    const s = await setup({ unkeyedCalls: "run" });
    try {
      await s.client.callTool(invoice);
      await s.client.callTool(invoice);
      expect(s.seen).toEqual([undefined, undefined]);
      expect(payments.effects().length).toBe(2);
    } finally {
      await s.close();
    }
  });

  it.each([["short"], [42], ["has a space in it, so it is not a key"]])("refuses a malformed key %j even under unkeyedCalls: run", async (key) => {
    const s = await setup({ unkeyedCalls: "run" });
    try {
      const result = await s.client.callTool({ ...invoice, _meta: { [IDEMPOTENCY_KEY_META]: key } });
      expect(errorMeta(result)?.code).toBe("idempotency_key_malformed");
      expect(payments.effects().length).toBe(0);
    } finally {
      await s.close();
    }
  });

  it("an unkeyed_write whose handler fails without saying what happened is outcome_unknown, and is never run again", async () => {
    const s = await setup();
    const boom = { name: "create_invoice", arguments: { customer: "explode", amount: 1 } };
    try {
      const first = await mcpTurn(s.client, { conversationId: "c_6", turnIndex: 0 }).callTool(boom);
      const again = await mcpTurn(s.client, { conversationId: "c_6", turnIndex: 0 }).callTool(boom);
      expect(errorMeta(first)).toMatchObject({ code: "outcome_unknown", retryable: "no", effect: "possibly" });
      expect(errorMeta(again)?.code).toBe("outcome_unknown");
      expect(s.seen.length).toBe(1);
    } finally {
      await s.close();
    }
  });

  it("a definite failure is recorded and replayed as tool_failed with the handler's stored error", async () => {
    const s = await setup();
    const call = { name: "send_payment", arguments: { payee: "nobody", amount: 1 } };
    try {
      await mcpTurn(s.client, { conversationId: "c_7", turnIndex: 0 }).callTool(call);
      const again = await mcpTurn(s.client, { conversationId: "c_7", turnIndex: 0 }).callTool(call);
      expect(errorMeta(again)).toMatchObject({ code: "tool_failed", error: { code: "payee_unknown", message: "payee unknown" } });
      expect(s.seen.length).toBe(1);
    } finally {
      await s.close();
    }
  });

  it("in_flight_elsewhere: a second call gives up after the wait bound while the first still runs", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const s = await setup({ dispatcher: { waitMs: 1 } }, gate);
    try {
      const a = mcpTurn(s.client, { conversationId: "c_8", turnIndex: 0 }).callTool(invoice);
      await until(() => s.seen.length === 1);
      const b = await mcpTurn(s.client, { conversationId: "c_8", turnIndex: 0 }).callTool(invoice);
      expect(errorMeta(b)).toMatchObject({ code: "in_flight_elsewhere", retryable: "same_message", effect: "possibly" });
      open();
      await a;
      expect(payments.effects().length).toBe(1);
    } finally {
      await s.close();
    }
  });

  it("DISPATCH-8 over MCP: a run that paid after its claim was lost (an operator released the row while the server was paused) is answered effect yes and not retryable; a client that re-sends whenever retryable allows creates one invoice", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const memory = new MemoryLedger();
    // A paused server renews nothing: its lease runs out while the handler holds its request.
    const paused = new Proxy(memory, {
      get: (target, property, receiver) => (property === "renew" ? () => new Promise(() => {}) : (Reflect.get(target, property, receiver) as unknown)),
    });
    const s = await setup({ ledger: paused, dispatcher: { leaseMs: 60 } }, gate);
    try {
      const turn = mcpTurn(s.client, { conversationId: "c_stale", turnIndex: 0 });
      const first = turn.callTool(invoice);
      await until(() => s.seen.length === 1);
      const key = s.guard.ledgerKeyFor("create_invoice", s.seen[0]!);
      const row = await memory.lookup(key);
      while ((await memory.listExpiredInFlight({ olderThanMs: 0, limit: 10 })).every((r) => r.key !== key)) await new Promise((resolve) => setTimeout(resolve, 5));
      // The operator finds no invoice (the request is not sent yet) and releases the row past its grace.
      await memory.resolve({ key, resolution: { outcome: "not_performed" }, actor: "alice", reason: "no invoice in the billing console", expectedFence: row!.fence });
      // The server wakes: its request goes out, the invoice is created, and its record is refused.
      open();
      const answer = await first;
      const meta = errorMeta(answer);
      expect(meta).toMatchObject({ code: "stale_claim", effect: "yes" });
      // The client does what the answer says: re-sends the same call with its key while that is "safe".
      if (meta?.retryable !== "no") await turn.resend(invoice);
      expect(payments.effects({ kind: "invoice_created" } as never).length).toBe(1);
      expect(meta?.retryable).toBe("no");
    } finally {
      open();
      await s.close();
    }
  });

  it("LEDGER-14: registering an unkeyed_write over a volatile ledger is refused", () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    let caught: unknown;
    try {
      guard.registerTool(server, "create_invoice", { effect: "unkeyed_write" }, () => ({ content: [] }));
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "durability_mismatch")).toBe(true);
  });

  it("LEDGER-14: a refused registration leaves the guard as it was: later tools register, and the refused one is not guarded", async () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger(), dispatcher: { logger: { warn: () => {} } } });
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    expect(() => guard.registerTool(server, "create_invoice", { effect: "unkeyed_write" }, () => ({ content: [] }))).toThrow(/durable ledger/);
    // The refusal is not remembered as a registered tool: it used to poison every later registration.
    let runs = 0;
    guard.registerTool(server, "send_payment", { inputSchema: { payee: z.string() }, effect: "keyed_write" }, () => {
      runs += 1;
      return { content: [{ type: "text", text: "paid" }] };
    });
    expect(guard.dispatcher.registry.has("create_invoice")).toBe(false);
    expect(() => guard.registerTool(server, "create_invoice", { effect: "unkeyed_write" }, () => ({ content: [] }))).toThrow(/durable ledger/);
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    try {
      const turn = mcpTurn(client, { conversationId: "c_14", turnIndex: 0 });
      const paid = await turn.callTool({ name: "send_payment", arguments: { payee: "acme" } });
      expect(text(paid)).toBe("paid");
      expect((await turn.resend({ name: "send_payment", arguments: { payee: "acme" } }))._meta?.[REPLAYED_META]).toBe(true);
      expect(runs).toBe(1);
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe("MCP-7: a tool's own isError result is its answer", () => {
  it("is stored and replayed like any other result: the handler does not run again", async () => {
    const ledger = new MemoryLedger();
    const guard = new McpToolGuard({ ledger, dispatcher: { allowVolatileLedgerForUnkeyedWrites: true, logger: { warn: () => {} } } });
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    let runs = 0;
    guard.registerTool(
      server,
      "create_invoice",
      { inputSchema: { customer: z.string(), amount: z.number().int() }, effect: "unkeyed_write" },
      async ({ customer }) => {
        runs += 1;
        return { isError: true, content: [{ type: "text", text: `no such customer ${customer}` }] };
      },
    );
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    try {
      const first = (await mcpTurn(client, { conversationId: "c_7", turnIndex: 0 }).callTool(invoice)) as CallToolResult;
      const again = (await mcpTurn(client, { conversationId: "c_7", turnIndex: 0 }).callTool(invoice)) as CallToolResult;
      expect(runs).toBe(1);
      expect(first.isError).toBe(true);
      expect(again.isError).toBe(true);
      expect(text(again)).toBe("no such customer acme");
      expect(again._meta?.[REPLAYED_META]).toBe(true);
      // The tool's answer is not a Dispatch-Once error: no error member, and the row is completed.
      expect(errorMeta(again)).toBeUndefined();
      const key = idempotencyKeyFor({ conversationId: "c_7", turnIndex: 0 }, invoice);
      expect((await ledger.lookup(guard.ledgerKeyFor("create_invoice", key)))?.state).toBe("completed");
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe("registering on several servers", () => {
  it("EFFECT-1: the same tool on another McpServer keeps its effect class; a different one is refused", () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    const handler = () => ({ content: [] });
    guard.registerTool(new McpServer({ name: "a", version: "1" }), "send_payment", { effect: "keyed_write" }, handler);
    guard.registerTool(new McpServer({ name: "b", version: "1" }), "send_payment", { effect: "keyed_write" }, handler);
    let caught: unknown;
    try {
      guard.registerTool(new McpServer({ name: "c", version: "1" }), "send_payment", { effect: "read" }, handler);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_tool_definition")).toBe(true);
  });
});

/** Polls a condition on the event loop (no wall-clock assertion: only the order of events matters). */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 1));
}

describe("MCP-6: the text for the model says what became of the effect and whether a re-send helps", () => {
  // A model reads only the text, not _meta: told "in flight" without more, it calls the tool again,
  // and mcpTurn gives that call the next ordinal, a new key: the payment runs twice.
  it("an unknown outcome, a call in flight elsewhere and a refusal each say it in the text", async () => {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const s = await setup({ dispatcher: { waitMs: 50 } }, gate);
    try {
      const key = idempotencyKeyFor({ conversationId: "c_text", turnIndex: 0 }, invoice);
      const first = s.client.callTool({ ...invoice, _meta: { [IDEMPOTENCY_KEY_META]: key } }).catch((error: unknown) => error);
      await until(() => s.events.some((e) => e.type === "run_started"));
      const waiting = await s.client.callTool({ ...invoice, _meta: { [IDEMPOTENCY_KEY_META]: key } });
      expect(errorMeta(waiting)).toMatchObject({ code: "in_flight_elsewhere", effect: "possibly", retryable: "same_message" });
      expect(text(waiting)).toMatch(/Effect: it may have happened; re-send this call with the same key to learn its outcome\.$/);
      open();
      await first;
      const explode = { name: "create_invoice", arguments: { customer: "explode", amount: 1 } };
      const unknown = await s.client.callTool({ ...explode, _meta: { [IDEMPOTENCY_KEY_META]: idempotencyKeyFor({ conversationId: "c_text", turnIndex: 1 }, explode) } });
      expect(errorMeta(unknown)).toMatchObject({ code: "outcome_unknown", effect: "possibly", retryable: "no" });
      expect(text(unknown)).toMatch(/Effect: it may have happened; do not call it again: ask the user\.$/);
      const missing = await s.client.callTool(invoice);
      expect(errorMeta(missing)).toMatchObject({ code: "idempotency_key_missing", effect: "no", retryable: "no" });
      expect(text(missing)).toMatch(/Effect: it did not happen; re-sending it with the same key will not help\.$/);
    } finally {
      open();
      await s.close();
    }
  });
});
