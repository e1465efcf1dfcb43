import { describe, expect, it } from "vitest";
import { IDEMPOTENCY_KEY_META, idempotencyKeyFor, mcpTurn, TURN_META, withIdempotencyKey, type CallToolParams } from "../src/index.js";
import { prng } from "@dispatch-once/test-processes";

/**
 * What mcpTurn's client sends, checked on the params it hands to callTool (no server needed):
 * MCP-1's other _meta members, and TURN-4's identical calls, which are identical by their
 * canonical arguments (the text KEY-5 hashes), not by how the model spelt the object. Blind round
 * L's mutants L37 (the key's _meta replaced the caller's) and L41 (identical calls told apart by
 * JSON.stringify, so member order) escaped every earlier check.
 */
function recordingClient() {
  const sent: CallToolParams[] = [];
  return {
    sent,
    client: {
      callTool: async (params: CallToolParams) => {
        sent.push(structuredClone(params));
        return { content: [] };
      },
    },
  };
}

const context = { conversationId: "c_client_turn", turnIndex: 3 };
const call = { name: "create_invoice", arguments: { customer: "acme", amount: 12_500, lines: [{ sku: "a", qty: 1 }] } };

describe("MCP-1 the client keeps every other member of the _meta it sends", () => {
  const metas: Record<string, Record<string, unknown>> = {
    "a vendor member": { "com.example/trace": "t1" },
    "the progress token (a number)": { progressToken: 7 },
    "the progress token (a string) and a nested vendor member": { progressToken: "tok-1", "io.example/ctx": { tenant: "t", path: [1, { deep: true }] } },
    "several members": { a: 1, b: "two", c: null, d: [false] },
  };
  it.each(Object.keys(metas))("MCP-1 %s: callTool and resend send it unchanged beside the key", async (name) => {
    const meta = metas[name]!;
    const { client, sent } = recordingClient();
    const turn = mcpTurn(client, context);
    const key = turn.peekKey(call);
    await turn.callTool({ ...call, _meta: structuredClone(meta) });
    await turn.resend({ ...call, _meta: structuredClone(meta) });
    // Beside the key, the call's turn (MCP-15).
    const turnMeta = { [TURN_META]: { conversationId: context.conversationId, turnIndex: context.turnIndex } };
    expect(sent.map((p) => p._meta)).toEqual([
      { ...meta, [IDEMPOTENCY_KEY_META]: key, ...turnMeta },
      { ...meta, [IDEMPOTENCY_KEY_META]: key, ...turnMeta },
    ]);
    expect(withIdempotencyKey({ ...call, _meta: structuredClone(meta) }, key)._meta).toEqual({ ...meta, [IDEMPOTENCY_KEY_META]: key });
  });
});


/** A JSON object of up to three levels, with member names that sort differently from their insertion order. */
function jsonObject(random: () => number, depth = 0): Record<string, unknown> {
  const names = ["payee", "amount", "Zeta", "_k", "é", "a1", "10", "memo"];
  const out: Record<string, unknown> = {};
  const members = 2 + Math.floor(random() * 4);
  for (let i = 0; i < members; i++) {
    const name = names[Math.floor(random() * names.length)]! + (i > 3 ? String(i) : "");
    const kind = random();
    out[name] =
      depth < 2 && kind < 0.25
        ? jsonObject(random, depth + 1)
        : depth < 2 && kind < 0.4
          ? [jsonObject(random, depth + 1), Math.floor(random() * 100)]
          : kind < 0.7
            ? Math.floor(random() * 1e6) / 100
            : `v${Math.floor(random() * 1000)}`;
  }
  return out;
}

/** The same JSON data with every object's members in another (seeded) order. */
function reordered(value: unknown, random: () => number): unknown {
  if (Array.isArray(value)) return value.map((v) => reordered(v, random));
  if (value === null || typeof value !== "object") return value;
  const entries = Object.entries(value as Record<string, unknown>);
  for (let i = entries.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [entries[i], entries[j]] = [entries[j]!, entries[i]!];
  }
  return Object.fromEntries(entries.map(([k, v]) => [k, reordered(v, random)]));
}

describe("TURN-4 MCP-2 identical calls are counted by their canonical arguments", () => {
  const SEEDS = Number(process.env.MCP_TURN4_CASES ?? 60);
  const base = Number(process.env.MCP_TURN4_SEED ?? 20261205);
  it(`TURN-4 a call sent again with its arguments' members in another order is the next identical call (ordinal 1, 2, ...), in ${SEEDS} seeded cases`, async () => {
    for (let s = 0; s < SEEDS; s++) {
      const seed = base + s;
      const random = prng(seed);
      const args = jsonObject(random);
      const spellings = [args, reordered(args, random), reordered(args, random)] as Record<string, unknown>[];
      const { client, sent } = recordingClient();
      const turn = mcpTurn(client, context);
      for (const spelling of spellings) await turn.callTool({ name: "send_payment", arguments: spelling });
      const keys = sent.map((p) => p._meta?.[IDEMPOTENCY_KEY_META]);
      const expected = [0, 1, 2].map((ordinal) => idempotencyKeyFor({ ...context, ordinal }, { name: "send_payment", arguments: args }));
      expect(keys, `seed ${seed} (MCP_TURN4_SEED=${seed} MCP_TURN4_CASES=1), path: ${spellings.map((a) => JSON.stringify(a)).join(" then ")}`).toEqual(expected);
      // resend answers the last identical call, whichever spelling it is given in.
      await turn.resend({ name: "send_payment", arguments: reordered(args, random) as Record<string, unknown> });
      expect(sent[3]!._meta?.[IDEMPOTENCY_KEY_META], `seed ${seed}: resend`).toBe(expected[2]);
    }
  });
});

describe("MCP-12 the listed input schema's defaults, and nothing else of it, count in the key", () => {
  const tools = [
    {
      name: "send_payment",
      inputSchema: {
        type: "object",
        properties: {
          payee: { type: "string" },
          currency: { type: "string", default: "EUR" },
          note: { type: ["string", "null"], default: null },
          options: { type: "object", default: { priority: "normal", notify: false }, properties: { priority: { type: "string", default: "normal" }, notify: { type: "boolean", default: false } } },
          lines: { type: "array", items: { type: "object", properties: { qty: { type: "number", default: 1 } } } },
        },
      },
    },
  ];
  const key = (args: Record<string, unknown>, options: Parameters<typeof mcpTurn>[2] = { tools }) => mcpTurn(recordingClient().client, context, options).peekKey({ name: "send_payment", arguments: args });

  it("an omitted member and its listed default written out are one key, at the top, in a nested object and in array items", () => {
    const full = { payee: "acme", currency: "EUR", note: null, options: { priority: "normal", notify: false }, lines: [{ sku: "a", qty: 1 }] };
    expect(key({ payee: "acme", lines: [{ sku: "a" }] })).toBe(key(full));
    expect(key({ payee: "acme", options: {}, lines: [{ sku: "a", qty: 1 }] })).toBe(key(full));
    // Two identical calls by those arguments take ordinals 0 and 1 (TURN-4).
    const turn = mcpTurn(recordingClient().client, context, { tools });
    void turn.callTool({ name: "send_payment", arguments: { payee: "acme", lines: [] } });
    expect(turn.peekKey({ name: "send_payment", arguments: { ...full, lines: [] } })).not.toBe(key({ payee: "acme", lines: [] }));
  });

  it("another value, null for a member whose default is not null, and text the listed schema says nothing about stay other keys; the caller's schema wins", () => {
    const base = key({ payee: "acme" });
    expect(key({ payee: "acme", currency: "USD" })).not.toBe(base);
    expect(key({ payee: "acme", currency: null })).not.toBe(base);
    expect(key({ payee: "Cafe\u0301" })).not.toBe(key({ payee: "Café" }));
    const own = { safeParse: (value: unknown) => ({ success: true, data: value }) };
    expect(key({ payee: "acme" }, { tools, schemas: { send_payment: own } })).not.toBe(key({ payee: "acme", currency: "EUR" }, { tools, schemas: { send_payment: own } }));
    // Without the listed tools nothing is written out (the arguments as sent: MCP-2).
    expect(key({ payee: "acme" }, {})).not.toBe(key({ payee: "acme", currency: "EUR" }, {}));
  });
});
