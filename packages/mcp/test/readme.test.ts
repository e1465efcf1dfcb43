import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { MemoryLedger } from "@dispatch-once/core";
import { startMockPayments } from "@dispatch-once/mock-payments";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { describe, expect, it } from "vitest";
import { payFromTurn } from "../examples/client.js";
import { billingServer } from "../examples/server.js";
import { ERROR_META, REPLAYED_META, type GuardErrorMeta } from "../src/index.js";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");

  it("shows every file of examples/ verbatim", () => {
    const files = readdirSync(join(__dirname, "..", "examples")).filter((f) => f.endsWith(".ts"));
    expect(files).toEqual(["client.ts", "server.ts"]);
    for (const file of files) expect(readme, file).toContain(readFileSync(join(__dirname, "..", "examples", file), "utf8").trim());
  });

  it("the examples pay once when the turn is replayed, and again in the next turn", async () => {
    const payments = await startMockPayments({ requireIdempotencyKey: true });
    const server = billingServer(new MemoryLedger(), payments.url);
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(b), client.connect(a)]);
    try {
      const first = (await payFromTurn(client, "conv_readme", 1)) as CallToolResult;
      const replay = (await payFromTurn(client, "conv_readme", 1)) as CallToolResult;
      expect(payments.effects().length).toBe(1);
      expect(replay.content).toEqual(first.content);
      expect(replay._meta?.[REPLAYED_META]).toBe(true);
      await payFromTurn(client, "conv_readme", 2);
      expect(payments.effects().length).toBe(2);
    } finally {
      await client.close();
      await payments.close();
    }
  });

  it("a payment the payments API refused is not answered as paid: the turn's replay pays, once", async () => {
    const payments = await startMockPayments({ requireIdempotencyKey: true });
    const server = billingServer(new MemoryLedger(), payments.url);
    const client = new Client({ name: "agent", version: "1.0.0" });
    const [a, b] = InMemoryTransport.createLinkedPair();
    await Promise.all([server.connect(b), client.connect(a)]);
    try {
      payments.injectFault({ outcome: "fail_before_accept" }, { times: 1 }); // 503: nothing performed
      const refused = (await payFromTurn(client, "conv_refused", 1)) as CallToolResult;
      expect(payments.effects().length).toBe(0);
      expect(refused.isError).toBe(true);
      expect(refused._meta?.[ERROR_META] as GuardErrorMeta).toMatchObject({ code: "claim_released", retryable: "same_message" });
      const replay = (await payFromTurn(client, "conv_refused", 1)) as CallToolResult;
      expect(replay.isError).toBeUndefined();
      expect(payments.effects().length).toBe(1);
      expect(replay.content).toEqual([{ type: "text", text: `paid 12500 to acme: ${payments.effects()[0]!.resourceId}` }]);
    } finally {
      await client.close();
      await payments.close();
    }
  });
});
