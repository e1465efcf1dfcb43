import { z } from "zod";
import { describe, expect, it } from "vitest";
import { Dispatcher, InvalidToolDefinitionError, MemoryLedger, ToolDefinitionChangedError, ToolRegistry, defineTool, tenantConversationId, type Ledger } from "../src/index.js";
import { checkRowDefinition } from "../src/internal/index.js";

/**
 * IDENT-11: a tool renamed (IDENT-4's way for a change that cannot wait) names the names it had;
 * a re-run turn (IDENT-10) then finds the rows its earlier names made, and the registry refuses
 * a former name that another tool holds.
 */
type Effect = { key: string; payee: string; amount: number };

const before = z.object({ payee: z.string(), amount: z.number().int(), memo: z.string().optional() });
const withCurrency = z.object({ payee: z.string(), amount: z.number().int(), currency: z.string().default("EUR"), memo: z.string().optional() });

function tool(effects: Effect[], name: string, extra: { formerNames?: string[]; input?: z.ZodObject; identity?: string[] } = {}) {
  const input: z.ZodObject = extra.input ?? before;
  const identity: string[] = extra.identity ?? ["payee", "amount"];
  return defineTool({
    name,
    effect: "keyed_write",
    input,
    identity,
    ...(extra.formerNames !== undefined ? { formerNames: extra.formerNames } : {}),
    async run(args: Record<string, unknown>, ctx) {
      effects.push({ key: ctx.idempotencyKey, payee: args.payee as string, amount: args.amount as number });
      return { paymentId: `pay_${effects.length}` };
    },
  });
}

const CONV = "conv-rename";
const at = { conversationId: CONV, turnIndex: 2 };
const call = (name: string, memo = "rent", payee = "acme") => ({ name, input: { payee, amount: 100, memo } });
const quiet = { warn: () => {} };
const dispatcherOf = (ledger: Ledger, ...tools: ReturnType<typeof tool>[]) => new Dispatcher({ tools: new ToolRegistry(tools), ledger, logger: quiet });

describe("IDENT-11 a renamed write tool names its former names", () => {
  it("IDENT-11 a re-run of a turn that paid under the former name is answered from that row: one payment, under the key the downstream saw", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const first = await dispatcherOf(ledger, tool(effects, "pay")).turn(at).dispatch(call("pay"));
    const again = await dispatcherOf(ledger, tool(effects, "send_payment", { formerNames: ["pay"] })).turn({ ...at, resumed: true }).dispatch(call("send_payment", "rent, again"));
    expect([again.key, again.replayed, again.result]).toEqual([first.key, true, { paymentId: "pay_1" }]);
    expect(effects.map((e) => e.key)).toEqual([first.key]);
  });

  it("IDENT-11 two renames in a row (a -> b -> c, formerNames [a, b]): rows of either earlier name are found", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const c = () => dispatcherOf(ledger, tool(effects, "c", { formerNames: ["a", "b"] }));
    const ofA = await dispatcherOf(ledger, tool(effects, "a")).turn(at).dispatch(call("a"));
    const ofB = await dispatcherOf(ledger, tool(effects, "b", { formerNames: ["a"] })).turn({ ...at, turnIndex: 3 }).dispatch(call("b"));
    const againA = await c().turn({ ...at, resumed: true }).dispatch(call("c"));
    const againB = await c().turn({ ...at, turnIndex: 3, resumed: true }).dispatch(call("c"));
    expect([againA.key, againA.replayed, againB.key, againB.replayed]).toEqual([ofA.key, true, ofB.key, true]);
    expect(effects).toHaveLength(2);
  });

  it("IDENT-11 a rename and an identity change at once (a defaulted currency joins the identity): the row is still found", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const first = await dispatcherOf(ledger, tool(effects, "pay")).turn(at).dispatch(call("pay"));
    const next = dispatcherOf(ledger, tool(effects, "send_payment", { formerNames: ["pay"], input: withCurrency, identity: ["payee", "amount", "currency"] }));
    const again = await next.turn({ ...at, resumed: true }).dispatch(call("send_payment"));
    expect([again.key, again.replayed, effects.length]).toEqual([first.key, true, 1]);
  });

  it("IDENT-11 a stored request of the former name that the new schema refuses: tool_definition_changed, nothing run", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const strict = z.object({ payee: z.string(), amount: z.number().int(), currency: z.string(), memo: z.string().optional() });
    const first = await dispatcherOf(ledger, tool(effects, "pay")).turn(at).dispatch(call("pay"));
    const next = dispatcherOf(ledger, tool(effects, "send_payment", { formerNames: ["pay"], input: strict }));
    const error = await next
      .turn({ ...at, resumed: true })
      .dispatch({ name: "send_payment", input: { ...call("send_payment").input, currency: "EUR" } })
      .catch((e: unknown) => e);
    expect(ToolDefinitionChangedError.isInstance(error) && [error.rowKey, error.reason]).toEqual([first.key, "request_refused"]);
    expect(effects).toHaveLength(1);
  });

  it("IDENT-11 a row of the former name in another conversation or another tenant's is never adopted; a first run lists nothing", async () => {
    const base = new MemoryLedger();
    let listings = 0;
    const ledger: Ledger = Object.assign(Object.create(base) as Ledger, {
      capabilities: base.capabilities,
      listRows: (...args: Parameters<MemoryLedger["listRows"]>) => {
        listings += 1;
        return base.listRows(...args);
      },
    });
    const effects: Effect[] = [];
    const old = dispatcherOf(ledger, tool(effects, "pay"));
    await old.turn({ conversationId: tenantConversationId("tenant-b", CONV), turnIndex: 2 }).dispatch(call("pay"));
    await old.turn({ conversationId: "conv-other", turnIndex: 2 }).dispatch(call("pay"));
    const next = dispatcherOf(ledger, tool(effects, "send_payment", { formerNames: ["pay"] }));
    const ours = { conversationId: tenantConversationId("tenant-a", CONV), turnIndex: 2 };
    await next.turn(ours).dispatch(call("send_payment"));
    expect(listings).toBe(0);
    const again = await next.turn({ ...ours, resumed: true }).dispatch(call("send_payment"));
    expect([again.replayed, listings, effects.length]).toEqual([true, 1, 3]); // its own first run's row, nothing else
  });

  it("IDENT-11 a rollback of a rename is a rename too: the old release, given the new name as a former one, answers from the new release's row", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    const first = await dispatcherOf(ledger, tool(effects, "send_payment", { formerNames: ["pay"] })).turn(at).dispatch(call("send_payment"));
    const again = await dispatcherOf(ledger, tool(effects, "pay", { formerNames: ["send_payment"] })).turn({ ...at, resumed: true }).dispatch(call("pay", "after the rollback"));
    expect([again.key, again.replayed, effects.length]).toEqual([first.key, true, 1]);
  });

  it("IDENT-11 a call of a former name is not the tool's: unknown_tool, nothing run", async () => {
    const effects: Effect[] = [];
    const next = dispatcherOf(new MemoryLedger(), tool(effects, "send_payment", { formerNames: ["pay"] }));
    const error = await next.turn({ ...at, resumed: true }).dispatch(call("pay")).catch((e: unknown) => e);
    expect((error as { code?: string }).code).toBe("unknown_tool");
    expect(effects).toHaveLength(0);
  });

  it("IDENT-11 without formerNames a rename pays again (the gap this rule closes): the row of the old name is not the tool's", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    await dispatcherOf(ledger, tool(effects, "pay")).turn(at).dispatch(call("pay"));
    await dispatcherOf(ledger, tool(effects, "send_payment")).turn({ ...at, resumed: true }).dispatch(call("send_payment"));
    expect(effects).toHaveLength(2);
  });

  it("IDENT-11 the registry refuses a former name that is a current tool's, listed twice, its own name, on a read, or claimed by two tools", () => {
    const effects: Effect[] = [];
    const refused = (build: () => unknown, text: string) => {
      let error: unknown;
      try {
        build();
      } catch (e) {
        error = e;
      }
      expect(InvalidToolDefinitionError.isInstance(error) && error.code).toBe("invalid_tool_definition");
      expect((error as Error).message).toContain(text);
    };
    // An unrelated new tool that takes the old name: its rows and the renamed tool's would be confused.
    refused(() => new ToolRegistry([tool(effects, "send_payment", { formerNames: ["pay"] }), tool(effects, "pay")]), "former name");
    refused(() => new ToolRegistry([tool(effects, "pay"), tool(effects, "send_payment", { formerNames: ["pay"] })]), "former name");
    refused(() => tool(effects, "send_payment", { formerNames: ["pay", "pay"] }), "twice");
    refused(() => tool(effects, "send_payment", { formerNames: ["send_payment"] }), "its own name");
    refused(() => tool(effects, "send_payment", { formerNames: ["not a name!"] }), "must match");
    refused(() => tool(effects, "send_payment", { formerNames: "pay" as never }), "array");
    refused(() => defineTool({ name: "lookup", effect: "read", input: before, formerNames: ["find"], run: () => 1 }), "read");
    refused(() => new ToolRegistry([tool(effects, "send_payment", { formerNames: ["pay"] }), tool(effects, "transfer", { formerNames: ["pay"] })]), "pay");
    expect(new ToolRegistry([tool(effects, "c", { formerNames: ["a", "b"] })]).renamed("a")?.name).toBe("c");
  });

  it("IDENT-11 the row check (audit's and the guard's) reads a former name's row under the current definition", async () => {
    const ledger = new MemoryLedger();
    const effects: Effect[] = [];
    await dispatcherOf(ledger, tool(effects, "pay")).turn(at).dispatch(call("pay"));
    const [row] = (await ledger.listRows({ conversationId: CONV })).rows;
    const registry = new ToolRegistry([tool(effects, "send_payment", { formerNames: ["pay"] })]);
    const dispatcher = new Dispatcher({ tools: registry, ledger: new MemoryLedger(), logger: quiet });
    expect(checkRowDefinition(registry, dispatcher.keyFor.bind(dispatcher), row!)).toMatchObject({ verdict: "other", toolName: "send_payment" });
    const bare = new ToolRegistry([tool(effects, "send_payment")]);
    expect(checkRowDefinition(bare, dispatcher.keyFor.bind(dispatcher), row!)).toBeUndefined();
  });
});
