import { MemoryLedger, isDispatchOnceError } from "@dispatch-once/core";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { describe, expect, it } from "vitest";
import { IdempotencyKeyMalformedError, IdempotencyKeyMissingError, McpGuardError, McpToolGuard, idempotencyKeyFor, mcpTurn, withIdempotencyKey, type ToolCallingClient } from "../src/index.js";

describe("the guard's own error classes", () => {
  const missing = new IdempotencyKeyMissingError("send_payment");
  const malformed = new IdempotencyKeyMalformedError("send_payment", '"short"');

  it("a subclass's isInstance recognises its own code only, as core's classes do", () => {
    expect(IdempotencyKeyMissingError.isInstance(missing)).toBe(true);
    expect(IdempotencyKeyMissingError.isInstance(malformed)).toBe(false);
    expect(IdempotencyKeyMalformedError.isInstance(malformed)).toBe(true);
    expect(IdempotencyKeyMalformedError.isInstance(missing)).toBe(false);
    // A code other than the class's own is never recognised through the subclass.
    expect(IdempotencyKeyMissingError.isInstance(missing, "idempotency_key_malformed")).toBe(false);
    expect(IdempotencyKeyMissingError.code).toBe("idempotency_key_missing");
    expect(IdempotencyKeyMalformedError.code).toBe("idempotency_key_malformed");
  });

  it("McpGuardError.isInstance recognises every code, or the one given", () => {
    expect(McpGuardError.isInstance(missing)).toBe(true);
    expect(McpGuardError.isInstance(malformed)).toBe(true);
    expect(McpGuardError.isInstance(malformed, "idempotency_key_missing")).toBe(false);
    expect(McpGuardError.isInstance(new Error("x"))).toBe(false);
  });

  it("recognises an error of another copy of the package by its brand and code, and narrows to the class", () => {
    const copy = Object.assign(new Error("m"), { code: "idempotency_key_malformed", toolName: "t" });
    Object.defineProperty(copy, Symbol.for("dispatch-once.mcp.error"), { value: true });
    expect(IdempotencyKeyMalformedError.isInstance(copy)).toBe(true);
    expect(IdempotencyKeyMissingError.isInstance(copy)).toBe(false);
    const unknown: unknown = copy;
    if (IdempotencyKeyMalformedError.isInstance(unknown)) expect(unknown.toolName).toBe("t");
  });
});

describe("ERR-1: bad guard options and registrations are refused with a code", () => {
  it("an option the guard does not take is refused, not ignored (namepsace: every principal would share one namespace, MCP-8)", () => {
    let caught: unknown;
    try {
      new McpToolGuard({ ledger: new MemoryLedger(), namepsace: () => "tenant" } as never);
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_argument")).toBe(true);
    expect((caught as Error).message).toMatch(/options\.namepsace: is not an option of McpToolGuard \(its options: ledger, unkeyedCalls, namespace, dispatcher, downstreamKey\)/);
  });

  it("registerTool without a config is invalid_argument, not a TypeError", () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    let caught: unknown;
    try {
      guard.registerTool(new McpServer({ name: "s", version: "1" }), "send_payment", undefined as never, () => ({ content: [] }));
    } catch (error) {
      caught = error;
    }
    expect(isDispatchOnceError(caught, "invalid_argument")).toBe(true);
  });

  it("ledgerKeyFor refuses a key the guard would refuse on the wire (MCP-3), with the same class, and a bad namespace", () => {
    const guard = new McpToolGuard({ ledger: new MemoryLedger() });
    guard.registerTool(new McpServer({ name: "s", version: "1" }), "send_payment", { effect: "keyed_write" }, () => ({ content: [] }));
    const caught = (f: () => unknown): unknown => {
      try {
        f();
      } catch (error) {
        return error;
      }
      return "accepted";
    };
    for (const key of ["short", "has space in it, 16+ chars", "x".repeat(201), 42, undefined, null]) {
      const error = caught(() => guard.ledgerKeyFor("send_payment", key as never));
      expect(IdempotencyKeyMalformedError.isInstance(error), String(key)).toBe(true);
      expect((error as IdempotencyKeyMalformedError).toolName).toBe("send_payment");
    }
    const namespace = caught(() => guard.ledgerKeyFor("send_payment", "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47", "has space"));
    expect(isDispatchOnceError(namespace, "invalid_argument")).toBe(true);
    expect((namespace as Error).message).toMatch(/^namespace: must match/);
    expect(isDispatchOnceError(caught(() => guard.ledgerKeyFor("send_payment", "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47", null as never)), "invalid_argument")).toBe(true);
    const unknownTool = caught(() => guard.ledgerKeyFor("send_paymnet", "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47"));
    expect(isDispatchOnceError(unknownTool) ? unknownTool.code : String(unknownTool)).toBe("unknown_tool");
    expect(guard.ledgerKeyFor("send_payment", "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47")).toMatch(/^[0-9a-f]{32}$/);
  });
});

describe("ERR-1: the client helpers refuse bad input where it is given", () => {
  const client = { callTool: async () => ({ content: [] }) };
  const refused = (f: () => unknown) => {
    try {
      f();
    } catch (error) {
      return isDispatchOnceError(error) ? error.code : `untyped: ${String(error)}`;
    }
    return "accepted";
  };

  it("mcpTurn checks the conversation id and turn index when the turn is made, not at its first call", () => {
    expect(refused(() => mcpTurn(client, { conversationId: "chat id with spaces", turnIndex: 0 }))).toBe("invalid_key_input");
    expect(refused(() => mcpTurn(client, { conversationId: "c_1", turnIndex: -1 }))).toBe("invalid_key_input");
    expect(refused(() => mcpTurn(client, { conversationId: "c_1", turnIndex: 1.5 }))).toBe("invalid_key_input");
    expect(refused(() => mcpTurn(client, { conversationId: "c_1", turnIndex: 3 }))).toBe("accepted");
  });

  it("idempotencyKeyFor and a turn's calls refuse an array (or another non-object) where an object is required, as the dispatcher does", () => {
    const context = { conversationId: "c_1", turnIndex: 0 };
    const message = (f: () => unknown) => {
      try {
        f();
      } catch (error) {
        return isDispatchOnceError(error, "invalid_argument") ? error.message : `other: ${String(error)}`;
      }
      return "accepted";
    };
    for (const args of [[1, 2], [], null, "x", 5]) {
      expect(message(() => idempotencyKeyFor(context, { name: "pay", arguments: args as never }))).toMatch(/^call\.arguments: must be an object/);
      expect(message(() => mcpTurn(client as unknown as ToolCallingClient, context).callTool({ name: "pay", arguments: args as never }))).toMatch(/^call\.arguments: must be an object/);
      expect(message(() => mcpTurn(client, context).peekKey({ name: "pay", arguments: args as never }))).toMatch(/^call\.arguments: must be an object/);
    }
    for (const call of [[], null, "pay"]) {
      expect(message(() => idempotencyKeyFor(context, call as never))).toMatch(/^call: must be an object/);
      expect(message(() => mcpTurn(client as unknown as ToolCallingClient, context).callTool(call as never))).toMatch(/^call: must be an object/);
    }
    expect(message(() => idempotencyKeyFor([] as unknown as never, { name: "pay" }))).toMatch(/^context: must be an object/);
    expect(message(() => mcpTurn(client, [] as unknown as never))).toMatch(/^context: must be an object/);
    expect(message(() => idempotencyKeyFor(context, { name: "pay" }))).toBe("accepted");
    expect(idempotencyKeyFor(context, { name: "pay" })).toBe(idempotencyKeyFor(context, { name: "pay", arguments: {} }));
  });

  it("withIdempotencyKey refuses a key the guard would refuse as malformed (MCP-3)", () => {
    expect(refused(() => withIdempotencyKey({ name: "send_payment" }, "short"))).toBe("invalid_argument");
    expect(refused(() => withIdempotencyKey([] as unknown as never, "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47"))).toBe("invalid_argument");
    expect(refused(() => withIdempotencyKey({ name: "send_payment" }, "7f1c2a9e-0d4b-4e8a-9c31-5b2f6e8d1a47"))).toBe("accepted");
  });
});
