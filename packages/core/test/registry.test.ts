import { describe, expect, it } from "vitest";
import { z } from "zod";
import { InvalidToolDefinitionError, ToolRegistry, UnknownToolError, defineTool } from "../src/index.js";

const payment = defineTool({
  name: "send_payment",
  description: "Pay a supplier",
  effect: "keyed_write",
  input: z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string().optional() }),
  identity: ["payee", "amount", "currency"],
  run: () => ({ ok: true }),
});
const search = defineTool({ name: "search_orders", effect: "read", input: z.object({ q: z.string() }), run: () => [] });
const invoice = defineTool({ name: "create_invoice", effect: "unkeyed_write", input: z.object({ amount: z.number() }), run: () => null });

describe("ToolRegistry", () => {
  it("EFFECT-5 audits which tools can double-fire and how each is protected", () => {
    const audit = new ToolRegistry([payment, search, invoice]).audit();
    expect(audit).toEqual([
      expect.objectContaining({ name: "send_payment", effect: "keyed_write", canDoubleFire: true, identity: ["payee", "amount", "currency"] }),
      expect.objectContaining({ name: "search_orders", effect: "read", canDoubleFire: false, identity: "n/a" }),
      expect.objectContaining({ name: "create_invoice", effect: "unkeyed_write", canDoubleFire: true, identity: "all arguments" }),
    ]);
    expect(audit[0]!.protection).toContain("Idempotency-Key");
    expect(audit[2]!.protection).toContain("durable ledger");
  });

  it("EFFECT-1 refuses a tool without a valid effect class", () => {
    expect(() => new ToolRegistry([{ ...search, effect: undefined as never }])).toThrow(InvalidToolDefinitionError);
    expect(() => new ToolRegistry([{ ...search, effect: "write" as never }])).toThrow(/effect/);
  });

  it("IDENT-2 refuses empty identities, unknown fields, duplicates and identity on reads", () => {
    const bad = [
      { ...payment, identity: [] },
      { ...payment, identity: ["payee", "iban"] },
      { ...payment, identity: ["payee", "payee"] },
      { ...search, identity: ["q"] },
      { ...payment, input: z.string(), identity: ["payee"] },
    ];
    for (const tool of bad) expect(() => new ToolRegistry([tool as never])).toThrow(InvalidToolDefinitionError);
  });

  it("KEY-3 refuses tool names outside the provider's alphabet, and duplicates", () => {
    expect(() => new ToolRegistry([{ ...search, name: "search orders" }])).toThrow(/must match/);
    expect(() => new ToolRegistry([search, search])).toThrow(/twice/);
  });

  it("DISPATCH-1 an unknown name is a typed error", () => {
    expect(() => new ToolRegistry([search]).get("nope")).toThrow(UnknownToolError);
  });

  it("generates the provider's tool declarations from the same schemas", () => {
    const [schema] = new ToolRegistry([payment]).providerSchemas();
    expect(schema).toEqual({
      name: "send_payment",
      description: "Pay a supplier",
      input_schema: expect.objectContaining({
        type: "object",
        required: ["payee", "amount", "currency"],
        properties: expect.objectContaining({ memo: { type: "string" } }),
      }),
    });
    expect(schema!.input_schema).not.toHaveProperty("$schema");
  });
});
