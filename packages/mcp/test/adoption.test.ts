import { MemoryLedger, isDispatchOnceError } from "@dispatch-once/core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, McpToolGuard, idempotencyKeyFor, mcpTurn, withIdempotencyKey, type GuardErrorMeta, type ToolCallingClient } from "../src/index.js";

/** Findings of the adoption trial (part 2): bad input to the MCP side's entry points. */

/** The error `f` throws (or "accepted"), as `[code, field]`. */
function refusal(f: () => unknown): [string, string | undefined] | "accepted" {
  try {
    f();
  } catch (error) {
    if (!isDispatchOnceError(error)) return [`untyped ${(error as Error)?.name}: ${(error as Error)?.message}`, undefined];
    return [error.code, (error as { field?: string }).field];
  }
  return "accepted";
}

const server = () => new McpServer({ name: "billing", version: "1" });
const handler = async () => ({ content: [] });
const context = { conversationId: "conv-1", turnIndex: 1 };
const client: ToolCallingClient = { callTool: (async (params: unknown) => params) as never };

describe("adoption trial (mcp): bad input is refused with a typed error naming the field", () => {
  it("IDENT-4 a misspelt identity in registerTool's config is refused: it was passed to McpServer and ignored, and a re-worded regenerate paid twice", async () => {
    // The attack, end to end: the tool advertised no identity, the client keyed over the memo too.
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    const mcp = server();
    const inputSchema = { to: z.string(), amount: z.number(), memo: z.string() };
    const misspelt = { effect: "keyed_write", identiy: ["to", "amount"], inputSchema };
    expect(refusal(() => guard.registerTool(mcp, "pay", misspelt as never, handler))).toEqual(["invalid_argument", "config.identiy"]);
    // The same registration spelt right keys both wordings alike: one payment.
    let payments = 0;
    guard.registerTool(mcp, "pay", { effect: "keyed_write", identity: ["to", "amount"], inputSchema }, async () => {
      payments++;
      return { content: [] };
    });
    const agent = new Client({ name: "agent", version: "1" });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await Promise.all([mcp.connect(b), agent.connect(a)]);
    const { tools } = await agent.listTools();
    for (const memo of ["rent for May", "May rent"]) {
      await mcpTurn(agent, context, { tools }).callTool({ name: "pay", arguments: { to: "acme", amount: 100, memo } });
    }
    expect(payments).toBe(1);
    await agent.close();
  });

  it("ERR-1 registerTool refuses other unknown config members and an inputSchema that is not an object (was a TypeError from the SDK)", () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    expect(refusal(() => guard.registerTool(server(), "pay", { efect: "keyed_write" } as never, handler))).toEqual(["invalid_argument", "config.efect"]);
    expect(refusal(() => guard.registerTool(server(), "pay", { effect: "keyed_write", inputSchema: 5 } as never, handler))).toEqual(["invalid_argument", "config.inputSchema"]);
    expect(refusal(() => guard.registerTool(server(), "pay", { effect: "keyed_write", title: "Pay" }, handler))).toBe("accepted");
  });

  it("ERR-1 the guard's dispatcher option must be an object without tools or ledger (5 was spread as nothing; its tools and ledger were silently replaced)", () => {
    const ledger = new MemoryLedger();
    expect(refusal(() => new McpToolGuard({ ledger, dispatcher: 5 as never }))).toEqual(["invalid_argument", "options.dispatcher"]);
    expect(refusal(() => new McpToolGuard({ ledger, dispatcher: [] as never }))).toEqual(["invalid_argument", "options.dispatcher"]);
    expect(refusal(() => new McpToolGuard({ ledger, dispatcher: { tools: [] } as never }))).toEqual(["invalid_argument", "options.dispatcher.tools"]);
    expect(refusal(() => new McpToolGuard({ ledger, dispatcher: { ledger } as never }))).toEqual(["invalid_argument", "options.dispatcher.ledger"]);
    expect(refusal(() => new McpToolGuard({ ledger, dispatcher: { pollMs: 5 } }))).toBe("accepted");
  });

  it("IDENT-4 idempotencyKeyFor refuses options it does not take: a misspelt identity left the memo in the key, and a re-worded regenerate got a new one", () => {
    const call = { name: "pay", arguments: { to: "acme", memo: "rent" } };
    expect(refusal(() => idempotencyKeyFor(context, call, { identiy: ["to"] } as never))).toEqual(["invalid_argument", "options.identiy"]);
    expect(refusal(() => idempotencyKeyFor(context, call, 5 as never))).toEqual(["invalid_argument", "options"]);
    expect(refusal(() => idempotencyKeyFor(context, call, null as never))).toEqual(["invalid_argument", "options"]);
    expect(refusal(() => idempotencyKeyFor(context, call, { identity: ["to"] }))).toBe("accepted");
  });

  it("TURN-4 a context member that is not conversationId, turnIndex (or ordinal) is refused: a misspelt ordinal gave the second identical call the first one's key", () => {
    const call = { name: "pay", arguments: { to: "acme" } };
    expect(refusal(() => idempotencyKeyFor({ ...context, ordnal: 1 } as never, call))).toEqual(["invalid_argument", "context.ordnal"]);
    expect(refusal(() => mcpTurn(client, { ...context, turnIdx: 2 } as never))).toEqual(["invalid_argument", "context.turnIdx"]);
    // mcpTurn's context has no ordinal: the turn counts them.
    expect(refusal(() => mcpTurn(client, { ...context, ordinal: 1 } as never))).toEqual(["invalid_argument", "context.ordinal"]);
    expect(refusal(() => idempotencyKeyFor({ ...context, ordinal: 1 }, call))).toBe("accepted");
  });

  it("ERR-1 withIdempotencyKey refuses a _meta that is not an object (5 was spread as nothing)", () => {
    const key = "0123456789abcdef0123456789abcdef";
    expect(refusal(() => withIdempotencyKey({ name: "pay", _meta: 5 } as never, key))).toEqual(["invalid_argument", "params._meta"]);
    expect(refusal(() => withIdempotencyKey({ name: "pay", _meta: { other: 1 } }, key))).toBe("accepted");
  });

  it("MCP-6 a namespace function that throws is answered as the guard's refusal, effect \"no\" (it was the SDK's bare error text, which says nothing of the effect)", async () => {
    const guard = new McpToolGuard({
      ledger: new MemoryLedger(),
      namespace: () => {
        throw new Error("no tenant on this session");
      },
    });
    const mcp = server();
    let runs = 0;
    guard.registerTool(mcp, "pay", { effect: "keyed_write", inputSchema: { to: z.string() } }, async () => {
      runs++;
      return { content: [] };
    });
    const agent = new Client({ name: "agent", version: "1" });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await Promise.all([mcp.connect(b), agent.connect(a)]);
    const result = (await mcpTurn(agent, context).callTool({ name: "pay", arguments: { to: "acme" } })) as { isError?: boolean; _meta?: Record<string, unknown> };
    await agent.close();
    expect(runs).toBe(0);
    expect(result.isError).toBe(true);
    expect(result._meta?.[ERROR_META]).toMatchObject({ code: "invalid_argument", effect: "no", retryable: "no" } satisfies Partial<GuardErrorMeta>);
    expect((result._meta?.[ERROR_META] as GuardErrorMeta).message).toContain("no tenant on this session");
  });
});
