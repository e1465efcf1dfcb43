import { InvalidArgumentError, MemoryLedger, isDispatchOnceError, type DispatchOnceError } from "@dispatch-once/core";
import { jsonSchema, tool } from "ai";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceTools } from "../src/index.js";

/** The Dispatch-Once error `create` throws (a failed expectation when it throws none or another). */
function refusal(create: () => unknown): DispatchOnceError {
  try {
    create();
  } catch (error) {
    if (isDispatchOnceError(error)) return error;
    throw error;
  }
  throw new Error("not refused");
}

describe("IDENT-2: an identity names fields of the tool's own input schema", () => {
  const execute = async () => ({ id: "pay_1" });
  const zodPay = tool({ inputSchema: z.object({ payee: z.string(), amount: z.number().int(), memo: z.string() }), execute });
  const jsonPay = tool({
    inputSchema: jsonSchema<{ payee: string; amount: number; memo: string }>({ type: "object", properties: { payee: { type: "string" }, amount: { type: "integer" }, memo: { type: "string" } } }),
    execute,
  });
  const ledger = new MemoryLedger();

  it.each([
    ["a zod schema", { pay: zodPay }],
    ["a JSON schema", { pay: jsonPay }],
  ])("AISDK-7 refuses a field %s does not have with invalid_tool_definition (a misspelt field would drop out of the key)", (_, tools) => {
    const error = refusal(() => createOnceTools({ tools, effects: { pay: "keyed_write" }, identity: { pay: ["payee", "amout"] }, ledger }));
    expect(error.code).toBe("invalid_tool_definition");
    expect(error.message).toMatch(/"amout" is not in its schema/);
  });

  it("accepts the fields of the schema, and a field with a default", () => {
    const withDefault = tool({ inputSchema: z.object({ payee: z.string(), currency: z.string().default("EUR"), memo: z.string() }), execute });
    expect(() => createOnceTools({ tools: { pay: zodPay, other: withDefault }, effects: { pay: "keyed_write", other: "keyed_write" }, identity: { pay: ["payee", "amount"], other: ["payee", "currency"] }, ledger })).not.toThrow();
  });

  it("refuses an identity for an input that is not an object schema", () => {
    const listed = tool({ inputSchema: z.array(z.string()), execute });
    expect(refusal(() => createOnceTools({ tools: { pay: listed }, effects: { pay: "keyed_write" }, identity: { pay: ["0"] }, ledger })).code).toBe("invalid_tool_definition");
  });

  it("AISDK-7 refuses an identity for a tool it does not wrap with invalid_argument (a renamed tool would silently lose its identity)", () => {
    const error = refusal(() => createOnceTools({ tools: { send_payment: zodPay }, effects: { send_payment: "keyed_write" }, identity: { sendPayment: ["payee"] } as never, ledger }));
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/options\.identity\.sendPayment/);
    const clientSide = tool({ inputSchema: z.object({ payee: z.string() }) });
    expect(refusal(() => createOnceTools({ tools: { clientSide }, effects: { clientSide: "read" }, identity: { clientSide: ["payee"] }, ledger })).code).toBe("invalid_argument");
  });

  it("refuses an effect for a tool that is not in tools", () => {
    const error = refusal(() => createOnceTools({ tools: { send_payment: zodPay }, effects: { send_payment: "keyed_write", sendPayment: "keyed_write" } as never, ledger }));
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/options\.effects\.sendPayment/);
  });

  it("refuses an identity that is not an array of field names with invalid_argument, not a TypeError", () => {
    expect(refusal(() => createOnceTools({ tools: { pay: zodPay }, effects: { pay: "keyed_write" }, identity: { pay: "payee" } as never, ledger })).code).toBe("invalid_argument");
    expect(refusal(() => createOnceTools({ tools: { pay: zodPay }, effects: { pay: "keyed_write" }, identity: "payee" as never, ledger })).code).toBe("invalid_argument");
  });
});

describe("ERR-1: an option the wrapper does not take is refused, not ignored", () => {
  const pay = tool({ inputSchema: z.object({ payee: z.string(), memo: z.string() }), execute: async () => "ok" });
  const ledger = new MemoryLedger();

  it("createOnceTools refuses a misspelt option (identities: the memo would be part of the key, and a re-worded one would pay again)", () => {
    const error = refusal(() => createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger, identities: { pay: ["payee"] } } as never));
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/options\.identities: is not an option of createOnceTools \(its options: tools, effects, ledger, identity, formerNames, dispatcher\)/);
  });

  it("forTurn refuses a misspelt option", () => {
    const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger });
    const error = refusal(() => once.forTurn({ conversationId: "c", turnIndex: 0, dispatchat: "tool-call" } as never));
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/input\.dispatchat/);
  });

  it("forTurn refuses messages and turnIndex together (which count is the turn's?), even when they agree", () => {
    const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger });
    for (const turnIndex of [0, 1]) {
      const error = refusal(() => once.forTurn({ conversationId: "c", messages: [{ role: "user" }], turnIndex } as never));
      expect(error.code).toBe("invalid_argument");
      expect((error as InvalidArgumentError).field).toBe("input");
      expect(error.message).toMatch(/messages.*turnIndex/);
    }
    // undefined is absent, as for every option
    expect(once.forTurn({ conversationId: "c", messages: [{ role: "user" }], turnIndex: undefined }).turnIndex).toBe(1);
    expect(once.forTurn({ conversationId: "c", messages: undefined, turnIndex: 2 }).turnIndex).toBe(2);
  });

  it("forTurn refuses neither messages nor turnIndex", () => {
    const once = createOnceTools({ tools: { pay }, effects: { pay: "keyed_write" }, ledger });
    const error = refusal(() => once.forTurn({ conversationId: "c" } as never));
    expect(error.code).toBe("invalid_argument");
    expect(error.message).toMatch(/messages.*turnIndex/);
  });
});
