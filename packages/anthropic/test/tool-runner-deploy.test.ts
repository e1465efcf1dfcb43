import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { MemoryLedger, type Ledger } from "@dispatch-once/core";
import { say, startMockProvider, toolUse, turn, type MockProvider } from "@dispatch-once/mock-provider";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { createOnceToolRunner, dispatchOnceOf, rerunMessagesOf } from "../src/index.js";

/*
 * ATR-13 (IDENT-10 in the tool runner): a loop run again for a user message whose loop ran before
 * (the app says so with turn.resumed, or the runner's messages already hold a call of the turn)
 * dispatches its writes as resumed, so a deploy in between that changed a write tool's identity
 * finds the row the earlier run made instead of paying again. A first run lists nothing.
 */
type Message = Anthropic.Beta.Messages.BetaMessageParam;
type Run = { payee: string; key: string };
const ACME = { payee: "acme", amount: 5, memo: "rent" };
const ALICE = { payee: "alice", amount: 7, memo: "lunch" };

let provider: MockProvider | undefined;
afterEach(async () => {
  await provider?.close();
  provider = undefined;
});

/** A provider whose n-th request (from 1) gets `answers[n - 1]`; the requests in `cut` are cut mid-stream. */
async function scripted(answers: ReturnType<typeof turn>[], cut: readonly number[]) {
  let n = 0;
  provider = await startMockProvider({
    script: () => answers[n++] ?? turn(say("Done.")),
    faultPlan: (_request, info) => (cut.includes(info.requestNumber) ? { kind: "reset", at: { event: 2 } } : undefined),
  });
  return new Anthropic({ baseURL: provider.baseURL, apiKey: "test-key", maxRetries: 0 });
}

/** The two releases: v2 gives the payment a channel with a default, in the identity. */
function release(version: "v1" | "v2", ledger: Ledger, runs: Run[]) {
  const base = { payee: z.string(), amount: z.number().int(), memo: z.string().optional() };
  const run = async (args: { payee: string }, context: unknown) => {
    runs.push({ payee: args.payee, key: dispatchOnceOf(context as never)!.idempotencyKey });
    return JSON.stringify({ paid: `${args.payee}#${runs.length}` });
  };
  const tool =
    version === "v1"
      ? betaZodTool({ name: "send_payment", description: "Pay", inputSchema: z.object(base), run })
      : betaZodTool({ name: "send_payment", description: "Pay", inputSchema: z.object({ ...base, channel: z.string().default("sepa") }), run });
  let listings = 0;
  const counted: Ledger = Object.assign(Object.create(ledger) as Ledger, {
    capabilities: ledger.capabilities,
    listRows: (...args: Parameters<NonNullable<Ledger["listRows"]>>) => {
      listings += 1;
      return ledger.listRows!(...args);
    },
  });
  const once = createOnceToolRunner({
    tools: [tool],
    effects: { send_payment: "keyed_write" },
    identity: { send_payment: version === "v1" ? ["payee", "amount"] : ["payee", "amount", "channel"] },
    ledger: counted,
    dispatcher: { logger: { warn: () => {} } },
  });
  return { once, listings: () => listings };
}

async function loop(once: ReturnType<typeof release>["once"], client: Anthropic, messages: Message[], resumed?: boolean) {
  const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, stream: true, thread: false, messages } as never, { conversationId: "conv-deploy", ...(resumed !== undefined ? { resumed } : {}) });
  try {
    await runner.runUntilDone();
    return { runner, failed: false };
  } catch {
    return { runner, failed: true };
  }
}
const fromUser = (): Message[] => [{ role: "user", content: "pay acme" }];
const resultsOf = (messages: readonly Message[]) =>
  messages.flatMap((m) => (m.role === "user" && typeof m.content !== "string" ? m.content.filter((b) => b.type === "tool_result").map((b) => String((b as { content?: unknown }).content)) : []));

describe("ATR-13 a loop re-run after a deploy that changed a write tool's identity (IDENT-10)", () => {
  it("ATR-13 the app re-runs the loop from the user's message with turn.resumed: answered from the first run's row, one payment; the first run listed nothing", async () => {
    const client = await scripted([turn(toolUse("send_payment", ACME)), turn(say("cut")), turn(toolUse("send_payment", { ...ACME, memo: "rent, again" }))], [2]);
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const v1 = release("v1", ledger, runs);
    expect((await loop(v1.once, client, fromUser())).failed).toBe(true);
    expect([runs.length, v1.listings()]).toEqual([1, 0]);
    const v2 = release("v2", ledger, runs);
    const { runner, failed } = await loop(v2.once, client, fromUser(), true);
    expect(failed).toBe(false);
    expect(runs, JSON.stringify(runs)).toHaveLength(1);
    expect(resultsOf(runner.params.messages)).toEqual([JSON.stringify({ paid: "acme#1" })]);
    expect([...v2.once.callsOf(runner).values()][0]!.outcome).toMatchObject({ key: runs[0]!.key, replayed: true });
  });

  it("ATR-13 a runner whose messages already hold a call of the turn (a store that kept the first iteration, not the second) re-runs it: the second iteration's payment is found", async () => {
    // v1: iteration 1 pays acme, iteration 2 pays alice, the third request is cut.
    const client = await scripted([turn(toolUse("send_payment", ACME)), turn(toolUse("send_payment", ALICE)), turn(say("cut")), turn(toolUse("send_payment", ALICE))], [3]);
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const v1 = release("v1", ledger, runs);
    const first = await loop(v1.once, client, fromUser());
    expect([first.failed, runs.length]).toEqual([true, 2]);
    // The app's store kept the turn up to acme's result: alice's call and result were not kept.
    const kept = rerunMessagesOf(first.runner).slice(0, 3);
    const v2 = release("v2", ledger, runs);
    const again = await loop(v2.once, client, kept);
    expect(again.failed).toBe(false);
    expect(runs.map((r) => r.payee), JSON.stringify(runs)).toEqual(["acme", "alice"]);
    expect(v2.listings()).toBe(1);
  });

  it("ATR-13 turn.resumed must be a boolean (invalid_argument), and a first run from the user's message lists nothing", async () => {
    const client = await scripted([turn(toolUse("send_payment", ACME))], []);
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const v2 = release("v2", ledger, runs);
    expect(() => v2.once.toolRunner(client, { model: "claude-test", max_tokens: 1024, messages: fromUser() } as never, { conversationId: "conv-deploy", resumed: "yes" as never })).toThrow(
      expect.objectContaining({ code: "invalid_argument" }),
    );
    expect((await loop(v2.once, client, fromUser())).failed).toBe(false);
    expect([runs.length, v2.listings()]).toEqual([1, 0]);
  });

  it("ATR-13 a loop re-run after a deploy that renamed pay to send_payment (formerNames) is answered from the row pay made; a bad formerNames is refused", async () => {
    const client = await scripted([turn(toolUse("pay", ACME)), turn(say("cut")), turn(toolUse("send_payment", ACME))], [2]);
    const ledger = new MemoryLedger();
    const runs: Run[] = [];
    const schema = z.object({ payee: z.string(), amount: z.number().int(), memo: z.string().optional() });
    const run = async (args: { payee: string }, context: unknown) => {
      runs.push({ payee: args.payee, key: dispatchOnceOf(context as never)!.idempotencyKey });
      return JSON.stringify({ paid: `${args.payee}#${runs.length}` });
    };
    const old = createOnceToolRunner({ tools: [betaZodTool({ name: "pay", description: "Pay", inputSchema: schema, run })], effects: { pay: "keyed_write" }, ledger, dispatcher: { logger: { warn: () => {} } } });
    expect((await loop(old, client, fromUser())).failed).toBe(true);
    const sendPayment = betaZodTool({ name: "send_payment", description: "Pay", inputSchema: schema, run });
    const renamed = createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, formerNames: { send_payment: ["pay"] }, ledger, dispatcher: { logger: { warn: () => {} } } });
    const again = await loop(renamed, client, fromUser(), true);
    expect(again.failed).toBe(false);
    expect(runs, JSON.stringify(runs)).toHaveLength(1);
    expect(resultsOf(again.runner.params.messages)).toEqual([JSON.stringify({ paid: "acme#1" })]);
    const bad = (formerNames: unknown) => () => createOnceToolRunner({ tools: [sendPayment], effects: { send_payment: "keyed_write" }, formerNames: formerNames as never, ledger });
    expect(bad({ pay: ["x"] })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.formerNames.pay" }));
    expect(bad({ send_payment: "pay" })).toThrow(expect.objectContaining({ code: "invalid_argument", field: "options.formerNames.send_payment" }));
    expect(bad({ send_payment: ["send_payment"] })).toThrow(expect.objectContaining({ code: "invalid_tool_definition" }));
  });

  it("ATR-13 a tool without parse (its input as the model sent it, no default applied) keeps the keys it had: its schema's defaults are not applied to its calls", () => {
    const runnable = (withDefault: boolean) => ({
      name: "send_payment",
      input_schema: { type: "object" as const, properties: { payee: { type: "string" }, amount: { type: "number" }, channel: withDefault ? { type: "string", default: "sepa" } : { type: "string" } } },
      run: async () => "ok",
    });
    const keyOf = (withDefault: boolean) =>
      createOnceToolRunner({ tools: [runnable(withDefault) as never], effects: { send_payment: "keyed_write" }, identity: { send_payment: ["payee", "amount", "channel"] }, ledger: new MemoryLedger() }).dispatcher.keyFor(
        { name: "send_payment", input: { payee: "acme", amount: 5 } },
        { conversationId: "conv-deploy", turnIndex: 1, ordinal: 0 },
      );
    expect(keyOf(true)).toBe(keyOf(false));
  });
});
