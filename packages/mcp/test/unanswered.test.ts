import { Dispatcher, MemoryLedger, ToolError, defineTool, type Ledger } from "@dispatch-once/core";
import { markRecordTool } from "@dispatch-once/core/internal";
import { createPaymentsClient, startMockPayments, type MockPaymentsServer } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, guardConversationId, IDEMPOTENCY_KEY_META, McpToolGuard, mcpTurn, TURN_META, type CallToolParams } from "../src/index.js";

/**
 * MCP-15: an effect can outlive the attempt that made it. A host's turn is cut after the server
 * paid (the response is lost, the model's stream breaks), the host re-runs the turn (same
 * conversation id and turn index), and the re-run's model does not make the call again: it asks
 * a question, or pays another amount. Nothing the host keeps tells of the first payment; only
 * the guard's ledger does, so the client must be able to ask it.
 */
let payments: MockPaymentsServer | undefined;
const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
  await payments?.close();
  payments = undefined;
});

type Namespace = ConstructorParameters<typeof McpToolGuard>[0]["namespace"];
type Principal = { token: string; clientId: string; scopes: string[] };

async function world(options: { ledger?: Ledger; namespace?: Namespace; run?: () => Promise<void> } = {}) {
  payments = await startMockPayments();
  const api = createPaymentsClient({ baseURL: payments.url, token: "acct_mcp_unanswered" });
  const ledger = options.ledger ?? new MemoryLedger();
  const guard = new McpToolGuard({ ledger, dispatcher: { logger: { warn: () => {} } }, ...(options.namespace !== undefined ? { namespace: options.namespace } : {}) });
  const connect = async (principal?: Principal) => {
    const server = new McpServer({ name: "billing", version: "1.0.0" });
    guard.registerTool(
      server,
      "send_payment",
      { inputSchema: { payee: z.string(), amount: z.number().int() }, effect: "keyed_write" },
      async ({ payee, amount }, { idempotencyKey }) => {
        await options.run?.();
        const { body } = await api.createPayment({ payee, amount, currency: "EUR", reference: "R-1" }, { idempotencyKey: idempotencyKey! });
        return { content: [{ type: "text", text: body.id }] };
      },
    );
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    if (principal !== undefined) {
      // What an authenticating HTTP transport hands the server with each message.
      const send = clientSide.send.bind(clientSide);
      clientSide.send = (message, sendOptions) => send(message, { ...sendOptions, authInfo: principal });
    }
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    closers.push(async () => {
      await client.close();
      await server.close();
    });
    return client;
  };
  return { ledger, guard, connect, made: () => payments!.effects().filter((e) => e.kind === "payment_created").map((e) => e.resourceId) };
}

/** A client whose first tools/call response is lost on the way back: the server ran it. */
function cutAfterFirst(client: Client) {
  let sent = 0;
  return {
    callTool: async (params: CallToolParams) => {
      const first = sent++ === 0;
      const result = await client.callTool(params);
      if (first) throw new Error("socket hang up");
      return result;
    },
    request: client.request.bind(client),
  };
}

const paymentOf = (result: unknown) => (result as CallToolResult).content.map((c) => (c.type === "text" ? c.text : "")).join("");
const context = { conversationId: "c_unanswered", turnIndex: 2 };
const pay100 = { name: "send_payment", arguments: { payee: "acme", amount: 100 } };
const pay120 = { name: "send_payment", arguments: { payee: "acme", amount: 120 } };

describe("MCP-15 a re-run of a cut turn finds the earlier attempt's effect in the guard's ledger", () => {
  it("MCP-15 the re-run's model pays another amount: the app is told one payment, two were made; unansweredCalls names the first", async () => {
    const { connect, made } = await world();
    const client = await connect();
    // Attempt 1: the server pays 100, the response is lost, the host's turn is cut.
    const first = mcpTurn(cutAfterFirst(client), context);
    await expect(first.callTool(pay100)).rejects.toThrow("socket hang up");
    // Attempt 2, the same turn: the model now asks for 120 (a new key: other arguments).
    const second = mcpTurn(client, context);
    const told = [paymentOf(await second.callTool(pay120))];
    expect(made()).toHaveLength(2);
    // What the answer tells: one payment; the effect log holds two.
    const untold = made().filter((id) => !told.includes(id));
    expect(untold).toHaveLength(1);
    const found = await second.unansweredCalls();
    expect(found.listed).toBe(true);
    expect(found.calls.map((c) => ({ key: c.key, name: c.name, state: c.state, effect: c.effect, arguments: c.arguments, result: c.result }))).toEqual([
      { key: mcpTurn(client, context).peekKey(pay100), name: "send_payment", state: "completed", effect: "happened", arguments: pay100.arguments, result: { content: [{ type: "text", text: untold[0] }] } },
    ]);
  });

  it("MCP-15 the re-run's model makes no call: the first payment is still found; a call this attempt sent and was answered is not listed", async () => {
    const { connect, made } = await world();
    const client = await connect();
    await expect(mcpTurn(cutAfterFirst(client), context).callTool(pay100)).rejects.toThrow("socket hang up");
    const rerun = mcpTurn(client, context);
    const found = await rerun.unansweredCalls();
    expect(made()).toHaveLength(1);
    expect(found).toMatchObject({ listed: true, calls: [{ name: "send_payment", effect: "happened", result: { content: [{ text: made()[0] }] } }] });
    // The re-run makes the call after all: answered from the ledger, so told, and no longer listed.
    expect(paymentOf(await rerun.callTool(pay100))).toBe(made()[0]);
    expect(await rerun.unansweredCalls()).toEqual({ listed: true, calls: [] });
    expect(made()).toHaveLength(1);
  });
});

describe("EFFECT-8 with MCP-15: a bookkeeping row is no effect of the turn", () => {
  it("EFFECT-8: the app shares the guard's ledger with the AI SDK wrapper under the guard's conversation id, whose dispatch-once-turn row is at the turn's index; turnCalls lists the cut payment, never the bookkeeping row", async () => {
    const { connect, made, ledger, guard } = await world();
    const client = await connect();
    // The AI SDK wrapper's record of a turn's user message (AISDK-17), claimed as it claims it.
    const record = defineTool(markRecordTool({ name: "dispatch-once-turn", effect: "keyed_write", input: z.object({}), run: async () => ({ messageId: "m-ai" }) }));
    await new Dispatcher({ ledger, tools: [record] }).dispatch({ name: "dispatch-once-turn", input: {} }, { conversationId: guardConversationId("mcp", context.conversationId), turnIndex: context.turnIndex, ordinal: 0 });
    await expect(mcpTurn(cutAfterFirst(client), context).callTool(pay100)).rejects.toThrow("socket hang up");
    // The effect log and the ledger read directly: one payment; its row and the bookkeeping row at the turn.
    expect(made()).toHaveLength(1);
    expect((await ledger.listRows!({})).rows.map((r) => [r.toolName, r.turnIndex]).sort()).toEqual([["dispatch-once-turn", 2], ["send_payment", 2]]);
    // What is reported, to the client and to an operator: the payment alone.
    const found = await mcpTurn(client, context).unansweredCalls();
    expect(found.calls.map((c) => [c.name, c.effect])).toEqual([["send_payment", "happened"]]);
    expect((await guard.turnCalls(context.conversationId, context.turnIndex)).calls.map((c) => [c.name, c.effect])).toEqual([["send_payment", "happened"]]);
  });
});

describe("MCP-15 the guard's rows carry the client's turn (LIST-3)", () => {
  it("MCP-15 a row claimed for a call that carries its turn is stored at that conversation (within the guard's namespace) and turn index", async () => {
    const { connect, ledger } = await world();
    const client = await connect();
    await mcpTurn(client, context).callTool(pay100);
    const { rows } = await ledger.listRows!({});
    expect(rows.map((r) => ({ conversationId: r.conversationId, turnIndex: r.turnIndex }))).toEqual([{ conversationId: "3~mcp~c_unanswered", turnIndex: 2 }]);
  });
});

/** A ledger that does not list rows (§6.11): a MemoryLedger that says so. */
function unlistingLedger(): Ledger {
  const inner = new MemoryLedger();
  return new Proxy(inner, {
    get(target, property) {
      if (property === "listRows") return undefined;
      if (property === "capabilities") return { ...target.capabilities, supports: { ...target.capabilities.supports, listRows: false } };
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

describe("MCP-15 what a listing that could not list says", () => {
  it("MCP-15 over a ledger that does not list rows: nothing was listed (listed false, a reason), never an empty list as the whole answer", async () => {
    const { connect, made } = await world({ ledger: unlistingLedger() });
    const client = await connect();
    await expect(mcpTurn(cutAfterFirst(client), context).callTool(pay100)).rejects.toThrow("socket hang up");
    expect(made()).toHaveLength(1);
    const found = await mcpTurn(client, context).unansweredCalls();
    expect(found).toEqual({ listed: false, reason: "the ledger does not list rows (capabilities.supports.listRows)", calls: [] });
  });

  it("MCP-15 a server that does not answer the listing (not a guarding server): nothing was listed, with the reason", async () => {
    const server = new McpServer({ name: "plain", version: "1.0.0" });
    server.registerTool("send_payment", { inputSchema: { payee: z.string(), amount: z.number().int() } }, async () => ({ content: [{ type: "text", text: "p_1" }] }));
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
    closers.push(async () => {
      await client.close();
      await server.close();
    });
    const turn = mcpTurn(client, context);
    await turn.callTool(pay100);
    const found = await turn.unansweredCalls();
    expect(found.listed).toBe(false);
    expect(found).toMatchObject({ calls: [], reason: expect.stringContaining("not a guarding server") });
  });

  it("MCP-15 a client without request() is refused with invalid_argument, naming the field", async () => {
    const turn = mcpTurn({ callTool: async () => ({ content: [] }) }, context);
    await expect(turn.unansweredCalls()).rejects.toMatchObject({ code: "invalid_argument", field: "client" });
  });
});

describe("MCP-15 what each row says, and whose rows a listing reaches", () => {
  it("MCP-15 each row's state says what RECORD-8 says of its effect: a thrown run released (may_have_happened), a definite failure (not_happened); each told to its own attempt", async () => {
    const failures: (Error | undefined)[] = [new Error("ECONNRESET after the request was sent"), new ToolError("payee unknown", { disposition: "definite" })];
    const { connect, made } = await world({
      run: async () => {
        const failure = failures.shift();
        if (failure !== undefined) throw failure;
      },
    });
    const client = await connect();
    const first = mcpTurn(client, context);
    const pay7 = { name: "send_payment", arguments: { payee: "nobody", amount: 7 } };
    expect(((await first.callTool(pay100)) as CallToolResult).isError).toBe(true);
    expect(((await first.callTool(pay7)) as CallToolResult).isError).toBe(true);
    // Both answers reached this attempt (as errors): nothing of its own is unanswered.
    expect(await first.unansweredCalls()).toEqual({ listed: true, calls: [] });
    const rerun = mcpTurn(client, context);
    const found = await rerun.unansweredCalls();
    const said = Object.fromEntries(found.calls.map((c) => [c.key, { state: c.state, effect: c.effect, arguments: c.arguments }]));
    expect(said).toEqual({
      [rerun.peekKey(pay100)]: { state: "released", effect: "may_have_happened", arguments: pay100.arguments },
      [rerun.peekKey(pay7)]: { state: "failed", effect: "not_happened", arguments: pay7.arguments },
    });
    expect(made()).toHaveLength(0);
  });

  it("MCP-15 the cut attempt itself lists its call whose answer never arrived; a re-send that is answered tells it", async () => {
    const { connect } = await world();
    const client = await connect();
    const first = mcpTurn(cutAfterFirst(client), context);
    await expect(first.callTool(pay100)).rejects.toThrow("socket hang up");
    expect((await first.unansweredCalls()).calls.map((c) => c.effect)).toEqual(["happened"]);
    await first.resend(pay100);
    expect(await first.unansweredCalls()).toEqual({ listed: true, calls: [] });
  });

  it("MCP-15 MCP-8 a listing is in the asking principal's namespace: another principal's rows of the same conversation and turn are not listed", async () => {
    const { connect, made } = await world({ namespace: (extra) => `billing.${extra.authInfo?.clientId ?? "anonymous"}` });
    const alice = await connect({ token: "t_a", clientId: "alice", scopes: [] });
    const mallory = await connect({ token: "t_m", clientId: "mallory", scopes: [] });
    await expect(mcpTurn(cutAfterFirst(alice), context).callTool(pay100)).rejects.toThrow("socket hang up");
    expect(made()).toHaveLength(1);
    expect(await mcpTurn(mallory, context).unansweredCalls()).toEqual({ listed: true, calls: [] });
    expect((await mcpTurn(alice, context).unansweredCalls()).calls).toHaveLength(1);
  });

  it("MCP-15 namespaces that differ only by where a separator falls do not share a listing", () => {
    expect(guardConversationId("a~b", "c")).not.toBe(guardConversationId("a", "b~c"));
    expect(guardConversationId("mcp", "c_1")).toBe("3~mcp~c_1");
    const long = guardConversationId("n".repeat(200), "c".repeat(200));
    expect(long).toMatch(/^h~[0-9a-f]{64}$/);
  });

  it("MCP-15 a call whose turn member is malformed is refused with invalid_argument, and nothing runs", async () => {
    const { connect, made } = await world();
    const client = await connect();
    const key = mcpTurn(client, context).peekKey(pay100);
    for (const turn of [{ conversationId: "c 1", turnIndex: 0 }, { conversationId: "c_1", turnIndex: -1 }, { conversationId: "c_1", turnIndex: 0, extra: 1 }, "c_1"]) {
      const answer = (await client.callTool({ ...pay100, _meta: { [IDEMPOTENCY_KEY_META]: key, [TURN_META]: turn } })) as CallToolResult;
      expect(answer.isError).toBe(true);
      expect(answer._meta?.[ERROR_META]).toMatchObject({ code: "invalid_argument", effect: "no", retryable: "no" });
    }
    expect(made()).toHaveLength(0);
  });
});

describe("MCP-15 the guard's listing called directly (an operator's process)", () => {
  it("MCP-15 lists the turn's rows with the client's keys; a bad conversation id, turn index or missing extra is refused with invalid_argument, naming the field", async () => {
    const { connect, guard } = await world();
    const client = await connect();
    await mcpTurn(client, context).callTool(pay100);
    expect((await guard.turnCalls(context.conversationId, context.turnIndex)).calls.map((c) => c.key)).toEqual([mcpTurn(client, context).peekKey(pay100)]);
    await expect(guard.turnCalls("c 1", 0)).rejects.toMatchObject({ code: "invalid_argument", field: "conversationId" });
    await expect(guard.turnCalls("c_1", -1)).rejects.toMatchObject({ code: "invalid_argument", field: "turnIndex" });
    const scoped = new McpToolGuard({ ledger: new MemoryLedger(), namespace: () => "p" });
    await expect(scoped.turnCalls("c_1", 0)).rejects.toMatchObject({ code: "invalid_argument", field: "extra" });
  });
});
