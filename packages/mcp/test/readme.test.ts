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
import { REPLAYED_META } from "../src/index.js";

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
});
