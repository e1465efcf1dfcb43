import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { onToolCall, setPaymentsUrl } from "../examples/adopt.js";

describe("README", () => {
  it("shows examples/adopt.ts verbatim", () => {
    const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");
    const example = readFileSync(join(__dirname, "..", "examples", "adopt.ts"), "utf8");
    expect(readme).toContain(example.trim());
  });

  it("the adoption example pays once across a replayed turn and forwards the key", async () => {
    const keys: string[] = [];
    const server = createServer((req, res) => {
      keys.push(String(req.headers["idempotency-key"]));
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ id: `pay_${keys.length}` }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    setPaymentsUrl(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    try {
      const args = { payee: "acme", amount: 100, currency: "EUR", memo: "May invoice" };
      const first = await onToolCall("conv-readme", 0, "send_payment", args);
      const retry = await onToolCall("conv-readme", 0, "send_payment", { ...args, memo: "Invoice for May" });
      expect(keys).toHaveLength(1);
      expect(keys[0]).toMatch(/^[0-9a-f]{32}$/);
      expect(retry).toMatchObject({ replayed: true, result: { id: "pay_1" } });
      expect(first).toMatchObject({ replayed: false, result: { id: "pay_1" } });
    } finally {
      server.close();
    }
  });
});
