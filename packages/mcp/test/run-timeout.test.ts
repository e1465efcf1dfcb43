import { MemoryLedger, ToolError } from "@dispatch-once/core";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { ERROR_META, REPLAYED_META, McpToolGuard, mcpTurn, type GuardErrorMeta } from "../src/index.js";

/** Poll until `check` holds (generous bound for a loaded machine; no timing is asserted). */
async function eventually(check: () => Promise<boolean> | boolean, what: string): Promise<void> {
  const until = Date.now() + 20_000;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`not within 20 s: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** A guarded keyed payment whose downstream answers when the test says (`finish`), or fails definitely. */
async function setup() {
  let release!: (outcome: "paid" | "declined") => void;
  const downstream = new Promise<"paid" | "declined">((r) => (release = r));
  const effects: string[] = [];
  const signals: AbortSignal[] = [];
  let runs = 0;
  const ledger = new MemoryLedger();
  const server = new McpServer({ name: "billing", version: "1.0.0" });
  const guard = new McpToolGuard({ ledger, dispatcher: { runTimeoutMs: 100, pollMs: 5, logger: { warn: () => {} } } });
  guard.registerTool(server, "send_payment", { inputSchema: { payee: z.string() }, effect: "keyed_write" }, async ({ payee }, extra) => {
    runs += 1;
    signals.push(extra.signal);
    const outcome = await downstream; // a downstream that ignores the signal
    if (outcome === "declined") throw new ToolError("402 card declined", { disposition: "definite", code: "card_declined" });
    effects.push(extra.idempotencyKey!);
    return { content: [{ type: "text", text: `paid ${payee}` }] };
  });
  const client = new Client({ name: "agent", version: "1.0.0" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  return { client, ledger, effects, signals, runs: () => runs, release, close: async () => (await client.close(), await server.close()) };
}

const pay = { name: "send_payment", arguments: { payee: "acme" } };
const meta = (r: unknown) => (r as CallToolResult)._meta?.[ERROR_META] as GuardErrorMeta | undefined;

describe("MCP-5, DISPATCH-18: the guarded run's timeout over the wire", () => {
  it("MCP-5 DISPATCH-18 at the bound the client is told in_flight_elsewhere (possibly, same key), the run's signal aborts; the late completion is the re-send's replay, paid once", async () => {
    const s = await setup();
    try {
      const turn = mcpTurn(s.client, { conversationId: "c_rt", turnIndex: 0 });
      const first = await turn.callTool(pay);
      expect((first as CallToolResult).isError).toBe(true);
      expect(meta(first)).toMatchObject({ code: "in_flight_elsewhere", effect: "possibly", retryable: "same_message" });
      expect(meta(first)?.message).toContain("runTimeoutMs");
      expect(s.signals[0]?.aborted).toBe(true);
      s.release("paid");
      await eventually(() => s.effects.length === 1, "the late run paid");
      await eventually(async () => {
        const again = await turn.resend(pay);
        return (again as CallToolResult)._meta?.[REPLAYED_META] === true;
      }, "the re-send replays the late completion");
      expect(s.effects.length).toBe(1);
      expect(s.runs()).toBe(1);
    } finally {
      await s.close();
    }
  });

  it("MCP-5 DISPATCH-18 a run told 'possibly' at the bound that then fails definitely: the re-send is told tool_failed, effect no, never re-run", async () => {
    const s = await setup();
    try {
      const turn = mcpTurn(s.client, { conversationId: "c_rt_fail", turnIndex: 0 });
      expect(meta(await turn.callTool(pay))).toMatchObject({ code: "in_flight_elsewhere", effect: "possibly" });
      s.release("declined");
      let last: unknown;
      await eventually(async () => {
        last = await turn.resend(pay);
        return meta(last)?.code === "tool_failed";
      }, "the re-send is answered with the late failure");
      expect(meta(last)).toMatchObject({ code: "tool_failed", effect: "no", retryable: "no", error: { code: "card_declined" } });
      expect(s.runs()).toBe(1);
      expect(s.effects).toEqual([]);
    } finally {
      await s.close();
    }
  });
});
