import Anthropic from "@anthropic-ai/sdk";
import { betaZodTool } from "@anthropic-ai/sdk/helpers/beta/zod";
import { ToolError } from "@anthropic-ai/sdk/lib/tools/ToolError";
import { InvalidArgumentError, MemoryLedger, type EffectClass, type Ledger } from "@dispatch-once/core";
import { describe, expect, it } from "vitest";
import { createOnceToolRunner, declaredToolError } from "../src/index.js";
import { z } from "zod";
import { cutRequests, paymentSchema, providerPerTest } from "./tool-runner-fixtures.js";

/**
 * The SDK's own `ToolError` (a tool's error result with content blocks for the model) thrown by a
 * wrapped tool (ATR-9): what the ledger records follows the disposition the tool declares on it,
 * "unknown" when it declares none, and the model receives the tool's content as well as whether
 * the effect may have happened. Each case cuts the loop's second request and re-runs the loop
 * from the user's message, as an app does; a counting tool is the oracle.
 */
const provider = providerPerTest();

type Message = Anthropic.Beta.Messages.BetaMessageParam;
type Block = Anthropic.Beta.Messages.BetaToolResultContentBlockParam;
const IMAGE: Block = { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } };

/** A MemoryLedger that declares itself durable, as a PostgreSQL ledger is (an unkeyed_write needs one). */
function durableLedger(): Ledger {
  const base = new MemoryLedger();
  return Object.assign(Object.create(base) as Ledger, { capabilities: { ...base.capabilities, durability: "durable" as const } });
}

/** A send_payment of the given class whose n-th run (1-based) does what `script(n)` says. */
function countingApp(effect: EffectClass, script: (run: number, pay: () => void) => string) {
  const counts = { runs: 0, payments: 0 };
  const sendPayment = betaZodTool({
    name: "send_payment",
    description: "Send a payment to a payee",
    inputSchema: paymentSchema,
    run: async () => script(++counts.runs, () => counts.payments++),
  });
  const once = createOnceToolRunner({
    tools: [sendPayment],
    effects: { send_payment: effect },
    ledger: durableLedger(),
    identity: { send_payment: ["payee", "amount", "currency", "reference"] },
    dispatcher: { waitMs: 2_000, pollMs: 5 },
  });
  const client = new Anthropic({ baseURL: provider().baseURL, apiKey: "test-key", maxRetries: 0 });
  return { counts, once, client };
}

/** Runs "pay acme" with request 2 cut, then once more from the user's message: both runners. */
async function cutAndRerun(app: ReturnType<typeof countingApp>) {
  cutRequests(provider(), [2]);
  const runners: ReturnType<typeof app.once.toolRunner>[] = [];
  for (let attempt = 0; attempt < 2; attempt++) {
    const runner = app.once.toolRunner(app.client, { model: "claude-test", max_tokens: 1024, stream: true, thread: false, messages: [{ role: "user", content: "pay acme" }] }, { conversationId: "conv-tool-error" });
    runners.push(runner);
    await runner.runUntilDone().catch(() => {});
  }
  const resultOf = (i: number) => {
    const messages = runners[i]!.params.messages as Message[];
    for (const m of messages) {
      if (m.role === "user" && Array.isArray(m.content)) for (const b of m.content) if (b.type === "tool_result") return b;
    }
    throw new Error(`runner ${i} has no tool_result`);
  };
  const callOf = (i: number) => [...app.once.callsOf(runners[i]!).values()][0]!;
  return { resultOf, callOf };
}

const textOf = (content: unknown) => (Array.isArray(content) ? content.filter((b) => b.type === "text").map((b) => b.text).join("\n") : String(content));

describe("ATR-9 the SDK's ToolError thrown by a wrapped tool", () => {
  it("ATR-9 undeclared, from an unkeyed_write after its payment was made: recorded unknown (may have happened), never re-run; the model gets the tool's content blocks and that the effect may have happened", async () => {
    const app = countingApp("unkeyed_write", (_run, pay) => {
      pay();
      throw new ToolError([{ type: "text", text: "the bank's reply was lost" }, IMAGE]);
    });
    const { resultOf, callOf } = await cutAndRerun(app);
    expect(app.counts).toEqual({ runs: 1, payments: 1 });
    for (const i of [0, 1]) {
      expect(callOf(i).error).toMatchObject({ code: "outcome_unknown", effect: "possibly" });
      const result = resultOf(i);
      expect(result.is_error).toBe(true);
      expect(textOf(result.content)).toMatch(/may have happened/);
    }
    // The first run's result carries the tool's own blocks (its screenshot), not only text.
    expect(resultOf(0).content).toEqual(expect.arrayContaining([IMAGE, expect.objectContaining({ type: "text", text: "the bank's reply was lost" })]));
  });

  it("ATR-9 declared definite (the card was declined) on an unkeyed_write: recorded failed, the model and the app are told it did not happen (not outcome_unknown); the re-run replays the failure with the tool's content, without running", async () => {
    const app = countingApp("unkeyed_write", () => {
      throw Object.assign(new ToolError([{ type: "text", text: "card declined" }, IMAGE]), { disposition: "definite" });
    });
    const { resultOf, callOf } = await cutAndRerun(app);
    expect(app.counts).toEqual({ runs: 1, payments: 0 });
    expect(callOf(0).error).toMatchObject({ code: "tool_failed", effect: "no", retryable: "no" });
    expect(callOf(1).error).toMatchObject({ code: "tool_failed", effect: "no" });
    for (const i of [0, 1]) {
      expect(textOf(resultOf(i).content)).toMatch(/card declined[\s\S]*did not happen/);
      expect(resultOf(i).content).toEqual(expect.arrayContaining([IMAGE]));
    }
  });

  it("ATR-9 declared not_performed (refused before it was sent) on an unkeyed_write: the claim is released, the model is told it did not happen; the re-run runs it again and it pays once", async () => {
    const app = countingApp("unkeyed_write", (run, pay) => {
      if (run === 1) throw declaredToolError("the bank refused the connection; nothing was sent", { disposition: "not_performed" });
      pay();
      return JSON.stringify({ status: "accepted" });
    });
    const { resultOf, callOf } = await cutAndRerun(app);
    expect(app.counts).toEqual({ runs: 2, payments: 1 });
    expect(callOf(0).error).toMatchObject({ code: "claim_released", effect: "no" });
    expect(textOf(resultOf(0).content)).toMatch(/nothing was sent[\s\S]*did not happen/);
    expect(callOf(1).outcome).toMatchObject({ replayed: false });
  });

  it("ERR-6 declared definite by hand under result_not_storable (a code of Dispatch-Once's) on an unkeyed_write: read as declaring nothing, recorded unknown (may have happened); no run or replay says the declined payment happened", async () => {
    const app = countingApp("unkeyed_write", () => {
      throw Object.assign(new ToolError([{ type: "text", text: "card declined" }]), { disposition: "definite", code: "result_not_storable" });
    });
    const { resultOf, callOf } = await cutAndRerun(app);
    expect(app.counts).toEqual({ runs: 1, payments: 0 });
    for (const i of [0, 1]) {
      expect(callOf(i).error).toMatchObject({ code: "outcome_unknown", effect: "possibly" });
      expect(textOf(resultOf(i).content)).toMatch(/may have happened/);
      expect(textOf(resultOf(i).content)).not.toMatch(/(?<!may have )happened/);
    }
    // The tool's own content still reaches the model, not a complaint about its code in its place.
    expect(textOf(resultOf(0).content)).toMatch(/card declined/);
  });

  it("ATR-9 undeclared, from a keyed_write: released as may have happened (its re-run sends the same key), never told it did not happen", async () => {
    const app = countingApp("keyed_write", (run) => {
      if (run === 1) throw new ToolError("timed out after the request was sent");
      return JSON.stringify({ status: "accepted" });
    });
    const { resultOf, callOf } = await cutAndRerun(app);
    expect(app.counts.runs).toBe(2);
    expect(callOf(0).error).toMatchObject({ code: "claim_released", effect: "possibly" });
    expect(textOf(resultOf(0).content)).toMatch(/timed out after the request was sent[\s\S]*may have happened/);
  });

  it("ATR-9 declaredToolError is the SDK's ToolError (the SDK sends its content as is) and refuses a disposition LEDGER-8 does not name with invalid_argument", () => {
    const error = declaredToolError([IMAGE], { disposition: "definite", code: "card_declined" });
    expect(error).toBeInstanceOf(ToolError);
    expect(error).toMatchObject({ content: [IMAGE], disposition: "definite", code: "card_declined" });
    for (const [field, build] of [
      ["options.disposition", () => declaredToolError("x", { disposition: "failed" as never })],
      ["options.disposition", () => declaredToolError("x", undefined as never)],
      ["content", () => declaredToolError(42 as never, { disposition: "definite" })],
      // ERR-6: recorded under the tool's code, one of Dispatch-Once's would be read back as ours.
      ["options.code", () => declaredToolError("x", { disposition: "definite", code: "result_not_storable" })],
      ["options.code", () => declaredToolError("x", { disposition: "definite", code: "invalid_arguments_json" })],
    ] as const) {
      let refused: unknown;
      try {
        build();
      } catch (e) {
        refused = e;
      }
      expect(refused, field).toBeInstanceOf(InvalidArgumentError);
      expect((refused as InvalidArgumentError).field).toBe(field);
    }
  });

  it("ATR-9 a read that throws a ToolError with an image: the model's error result keeps the image (no claim, nothing recorded)", async () => {
    const getBalance = betaZodTool({
      name: "get_balance",
      description: "Read the balance",
      inputSchema: z.object({ currency: z.string() }),
      run: async () => {
        throw new ToolError([{ type: "text", text: "the statement is attached" }, IMAGE]);
      },
    });
    const once = createOnceToolRunner({ tools: [getBalance], effects: { get_balance: "read" }, ledger: new MemoryLedger() });
    const client = new Anthropic({ baseURL: provider().baseURL, apiKey: "test-key", maxRetries: 0 });
    const call = { type: "tool_use" as const, id: "toolu_read", name: "get_balance", input: { currency: "EUR" } };
    const runner = once.toolRunner(client, { model: "claude-test", max_tokens: 1024, messages: [{ role: "user", content: "balance?" }, { role: "assistant", content: [call] }] }, { conversationId: "conv-read" });
    const tool = runner.params.tools.find((t) => "run" in t && "name" in t && t.name === "get_balance") as { run: (args: unknown, context: unknown) => Promise<unknown> };
    const error = (await tool.run(call.input, { toolUse: call, toolUseBlock: call }).catch((e: unknown) => e)) as ToolError;
    expect(error).toBeInstanceOf(ToolError); // the SDK's runner sends error.content
    expect(error.content).toEqual(expect.arrayContaining([IMAGE, expect.objectContaining({ text: "the statement is attached" })]));
  });
});
