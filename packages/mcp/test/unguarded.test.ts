import { MemoryLedger, ToolError } from "@dispatch-once/core";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, McpToolGuard, UnguardedCallFailedError, type GuardErrorMeta } from "../src/index.js";
import { connectedClient } from "./helpers.js";

// MCP-4: a write run unguarded (unkeyedCalls: "run", a client that sends no key) that throws. Left
// to McpServer, a ToolError reached the client as its bare message ("payments API 503"), nothing
// said of the effect: the model reads a failure and calls again, unguarded, and pays again.
async function unguarded(failure: unknown) {
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger: new MemoryLedger(), unkeyedCalls: "run" });
  guard.registerTool(server, "send_payment", { inputSchema: { amount: z.number().int() }, effect: "keyed_write" }, async () => {
    throw failure;
  });
  const client = await connectedClient(server, "ide");
  try {
    return (await client.callTool({ name: "send_payment", arguments: { amount: 5 } })) as CallToolResult;
  } finally {
    await client.close();
  }
}
/** A ToolError as another copy of core makes it: branded, with whatever code it was given (ERR-6). */
function fromAnotherCopy(message: string, disposition: string, code: string): Error {
  const error = new Error(message);
  error.name = "ToolError";
  Object.defineProperty(error, Symbol.for("dispatch-once.tool-error"), { value: true });
  return Object.assign(error, { disposition, code, details: undefined });
}
const meta = (r: CallToolResult) => r._meta?.[ERROR_META] as GuardErrorMeta | undefined;
const text = (r: CallToolResult) => r.content.map((c) => (c.type === "text" ? c.text : "")).join("");

describe("MCP-4: an unguarded run's failure says what it means for the effect", () => {
  it.each([
    ["a ToolError that may have happened (payments API 503)", "possibly", new ToolError("payments API 503", { disposition: "unknown" })],
    ["a downstream key mismatch", "possibly", new ToolError("the key holds another payment", { disposition: "request_mismatch" })],
    ["an unclassified error", "possibly", new Error("socket hang up")],
    ["a definite refusal", "no", new ToolError("payment refused (400)", { disposition: "definite" })],
    ["a not-performed failure", "no", new ToolError("payments API down", { disposition: "not_performed" })],
    // ERR-6: a ToolError of another copy of core (an older version that did not refuse the code) declared
    // definite under result_not_storable names no disposition: never "did not happen" (blind round R, R35).
    ["a definite failure under a code Dispatch-Once reads back, from another copy", "possibly", fromAnotherCopy("card declined", "definite", "result_not_storable")],
  ])("%s: unguarded_call_failed, effect %s, never re-send (it would run again unguarded)", async (_label, effect, failure) => {
    const result = await unguarded(failure);
    expect(result.isError).toBe(true);
    expect(meta(result)).toMatchObject({ code: "unguarded_call_failed", retryable: "no", effect });
    expect(text(result)).toContain((failure as Error).message);
    expect(text(result)).toContain(effect === "no" ? "Effect: it did not happen" : "Effect: it may have happened");
    expect(UnguardedCallFailedError.code).toBe("unguarded_call_failed");
  });
});
