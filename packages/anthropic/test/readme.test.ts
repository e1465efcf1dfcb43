import { readFileSync, readdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import { say, scriptFromPlans, startMockProvider, toolUse, turn } from "@dispatch-once/mock-provider";
import { describe, expect, it, vi } from "vitest";
import { Dispatcher, MemoryConversationStore, MemoryLedger, StoreUnavailableError, ToolRegistry, defineTool } from "@dispatch-once/core";
import { z } from "zod";
import { createRunner, handleUserMessage, payments } from "../examples/adopt.js";
import { StreamedText } from "../examples/stream.js";
import { answer, paid } from "../examples/tool-runner.js";
import { errorTable, tableIn } from "../../core/scripts/error-table.js";
import { ConversationRunner, type RunnerEvent } from "../src/index.js";
import { pausedAtCommit } from "@dispatch-once/test-processes";

describe("README", () => {
  const readme = readFileSync(join(__dirname, "..", "README.md"), "utf8");

  it("shows every file of examples/ verbatim", () => {
    const files = readdirSync(join(__dirname, "..", "examples")).filter((f) => f.endsWith(".ts"));
    expect(files).toEqual(expect.arrayContaining(["adopt.ts", "stream.ts"]));
    for (const file of files) {
      expect(readme, file).toContain(readFileSync(join(__dirname, "..", "examples", file), "utf8").trim());
    }
  });

  it("ERR-4 the error table is the one generated from core's ERROR_CATALOGUE (pnpm --filter @dispatch-once/core readme:errors)", () => {
    expect(tableIn(readme)).toBe(errorTable());
  });

  it("documents every runner event type", () => {
    const source = readFileSync(join(__dirname, "..", "src", "runner.ts"), "utf8");
    const union = source.slice(source.indexOf("export type RunnerEvent"), source.indexOf("export interface ConversationRunnerOptions"));
    const types = [...union.matchAll(/type: "([a-z_]+)"/g)].map((m) => m[1]!);
    expect(types).toEqual(expect.arrayContaining(["text_delta", "attempt_discarded"]));
    for (const type of types) expect(readme, type).toContain(`| \`${type}\``);
  });

  it("the streaming example drops a cut attempt's text: what it shows is what was committed", async () => {
    const args = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay acme": turn(say("Paying acme. "), toolUse("send_payment", args, { reword: ["memo"] })) }),
    });
    try {
      provider.faults.enqueue({ kind: "reset", at: { beforeMessageStop: true } }); // the first response only
      let paid = 0;
      const tools = new ToolRegistry([
        defineTool({ name: "send_payment", effect: "keyed_write", input: z.object({ payee: z.string(), amount: z.number(), currency: z.string(), memo: z.string() }), identity: ["payee", "amount", "currency"], run: async () => ({ paymentId: `pay_${++paid}` }) }),
      ]);
      const ui = new StreamedText("conv-stream");
      const other = new StreamedText("conv-other");
      const events: RunnerEvent[] = [];
      const runner = new ConversationRunner({
        client: new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }),
        dispatcher: new Dispatcher({ tools, ledger: new MemoryLedger() }),
        store: new MemoryConversationStore(),
        model: "claude-sonnet-5-5",
        tools: tools.providerSchemas(),
        retry: { backoffMs: () => 1 },
        onEvent: (event) => {
          events.push(event);
          ui.onEvent(event);
          other.onEvent(event);
        },
      });
      const result = await runner.send("conv-stream", { id: "m1", content: "pay acme" });
      const streamedFirst = events.filter((e) => e.type === "text_delta" && e.attempt === 1 && e.turnIndex === 0).length;
      expect(streamedFirst).toBeGreaterThan(0); // the cut attempt did stream text …
      expect(events).toContainEqual(expect.objectContaining({ type: "attempt_discarded", turnIndex: 0, attempt: 1, reason: "retry" })); // … and was discarded
      expect(ui.text).toBe(result.turns.map((t) => t.text).join(""));
      expect(ui.text).toBe("Paying acme. Done. send_payment: {\"paymentId\":\"pay_1\"}");
      expect(other.text).toBe("");
      expect(paid).toBe(1);
    } finally {
      await provider.close();
    }
  });

  it("the tool runner example, in the SDK's default mode (message threads): a stream cut in iteration 2 and the example's re-run pay once, and the model is told that payment", async () => {
    const args = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay acme": [turn(toolUse("send_payment", args, { reword: ["memo"] }))] }),
    });
    try {
      // Request 2 is iteration 2 of the first run, after the payment of iteration 1 ran.
      provider.setFaultPlan((_request, info) => (info.requestNumber === 2 ? { kind: "reset", at: { event: 2 } } : undefined));
      const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      const { message: final, unanswered } = await answer(client, "conv-tool-runner", [{ role: "user", content: "pay acme" }]);
      expect(final.stop_reason).toBe("end_turn");
      expect(unanswered).toEqual([]); // the re-run made the call again: answered from the ledger
      expect(paid).toHaveLength(1);
      const threads = provider.requests.map((r) => [r.thread?.type, r.status, r.outcome]);
      // Threaded: run 1 creates and continues (cut); the re-run is a new thread, then continues.
      expect(threads).toEqual([
        ["create", 200, "complete"],
        ["continue", 200, "reset"],
        ["create", 200, "complete"],
        ["continue", 200, "complete"],
      ]);
      // What the model was told on the last request (the rebuilt conversation) is that one payment.
      const told = provider.requests[3]!.thread!.conversation.messages.flatMap((m) =>
        typeof m.content === "string" ? [] : m.content.filter((b) => b.type === "tool_result").map((b) => (b as { content?: unknown }).content),
      );
      expect(told).toEqual([JSON.stringify({ paymentId: "pay_1" })]);
    } finally {
      await provider.close();
    }
  });

  it("the tool runner example: when the re-run's model asks a question instead of paying again, the answer carries the payment the cut run made (ATR-12)", async () => {
    const args = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    let asked = 0;
    const provider = await startMockProvider({
      // The first run pays and its iteration 2 is cut; the re-run's model asks a question instead.
      script: (request) => {
        const last = request.messages.at(-1)!;
        if (typeof last.content !== "string" && last.content.some((b) => b.type === "tool_result")) return turn(say("Done."));
        return asked++ === 0 ? turn(toolUse("send_payment", args)) : turn(say("Which account should I pay from?"));
      },
    });
    try {
      provider.setFaultPlan((_request, info) => (info.requestNumber === 2 ? { kind: "reset", at: { event: 2 } } : undefined));
      const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      const before = paid.length;
      const { message, unanswered } = await answer(client, "conv-tool-runner-told", [{ role: "user", content: "pay acme" }]);
      expect(message.content).toEqual([expect.objectContaining({ type: "text", text: "Which account should I pay from?" })]);
      expect(paid.length - before).toBe(1);
      expect(unanswered).toEqual([expect.objectContaining({ name: "send_payment", effect: "happened", result: JSON.stringify({ paymentId: `pay_${paid.length}` }) })]);
    } finally {
      await provider.close();
    }
  });

  it("the tool runner example: a payment whose reply was lost (the tool threw after the payment went out) is run again under its key before the answer is returned, so the user is told it and a later message does not pay it again", async () => {
    const args = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockProvider({ script: scriptFromPlans({ "pay acme": [turn(toolUse("send_payment", args))] }) });
    // The payment goes out, then its reply is lost: the tool throws (recorded "unknown": the keyed
    // write's claim is released for a re-run with the same key, claim_released).
    const push = vi.spyOn(paid, "push").mockImplementationOnce((...items) => {
      Array.prototype.push.apply(paid, items);
      throw new Error("socket hang up");
    });
    try {
      const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      const before = paid.length;
      const { unanswered } = await answer(client, "conv-tool-runner-lost-reply", [{ role: "user", content: "pay acme" }]);
      const keys = new Set(paid.slice(before).map((p) => p.key));
      expect(keys.size).toBe(1); // one payment (a re-run sends the same key, which the payments API deduplicates)
      // What the model was told last about the payment: its result, not "it may have happened".
      const last = provider.requests.at(-1)!.body as { messages: Anthropic.Beta.Messages.BetaMessageParam[] };
      const results = last.messages.flatMap((m) => (typeof m.content === "string" || m.content === undefined ? [] : m.content.filter((b) => b.type === "tool_result")));
      expect(results.map((b) => ({ is_error: (b as { is_error?: boolean }).is_error === true, content: (b as { content?: unknown }).content }))).toEqual([{ is_error: false, content: JSON.stringify({ paymentId: `pay_${paid.length}` }) }]);
      expect(unanswered).toEqual([]);
    } finally {
      push.mockRestore();
      await provider.close();
    }
  });

  it("names only models the SDK knows and does not deprecate (it warns on every request otherwise)", () => {
    // The SDK's main entry is index.js at its root (its exports do not list package.json).
    const sdk = dirname(createRequire(import.meta.url).resolve("@anthropic-ai/sdk"));
    const union = /export type Model = ([^;]+);/.exec(readFileSync(join(sdk, "resources", "messages", "messages.d.ts"), "utf8"))?.[1] ?? "";
    const known = new Set([...union.matchAll(/'([^']+)'/g)].map((m) => m[1]));
    const deprecated = new Set([...readFileSync(join(sdk, "internal", "data", "deprecated-models.js"), "utf8").matchAll(/'(claude-[^']+)':/g)].map((m) => m[1]));
    expect(known.size).toBeGreaterThan(5);
    expect(deprecated.size).toBeGreaterThan(0);
    const texts = [readFileSync(join(__dirname, "..", "README.md"), "utf8"), readFileSync(join(__dirname, "..", "examples", "adopt.ts"), "utf8")];
    const named = texts.flatMap((t) => [...t.matchAll(/"(claude-[a-z0-9.-]+)"/g)].map((m) => m[1]));
    expect(named.length).toBeGreaterThan(0);
    for (const model of named) {
      expect(known.has(model), `${model} is in the SDK's Model union`).toBe(true);
      expect(deprecated.has(model), `${model} is not deprecated`).toBe(false);
    }
  });

  it("the adoption example survives a cut stream and a failed turn without paying twice", async () => {
    const pay = { payee: "acme", amount: 100, currency: "EUR", memo: "May" };
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay acme": turn(toolUse("send_payment", pay, { reword: ["memo"] })) }),
    });
    try {
      // Every response to the payment request dies after the payment and before message_stop.
      provider.setFaultRules([{ bodyContains: '"pay acme"}]', times: 3, fault: { kind: "reset", at: { beforeMessageStop: true } } }]);
      const warn = vi.spyOn(console, "warn");
      const runner = createRunner(new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      const failed = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      // Which payment, with the arguments that ran (the first attempt's memo, not a replay's re-wording).
      expect(failed.split("\n")[0]).toBe('send_payment: happened {"payee":"acme","memo":"May","amount":100,"currency":"EUR"}');
      // RECORD-5 and what to do: the record is retryable, so the user is told the re-send completes it.
      expect(failed).toContain("send the same message again");
      expect(payments).toHaveLength(1);

      // The user re-sends the same message: the turn now completes from the ledger.
      const answer = await handleUserMessage(runner, "conv-1", "msg-1", "pay acme");
      expect(answer).toContain("pay_1");
      expect(payments).toHaveLength(1);
      // The SDK warns on every request naming a deprecated model.
      expect(warn.mock.calls.filter((c) => String(c[0]).includes("deprecated"))).toEqual([]);
      warn.mockRestore();
    } finally {
      await provider.close();
    }
  });

  it("RECORD-5 the adoption example tells the user to re-send only a failed turn the record says a re-send can help (a permanent 400 is not a lost connection)", async () => {
    const provider = await startMockProvider({ script: scriptFromPlans({ "pay bad": turn(say("no")), "pay later": turn(say("no")) }) });
    try {
      const runner = createRunner(new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }));
      provider.setFaultRules([{ bodyContains: '"pay bad"}]', fault: { kind: "status", status: 400 } }]);
      const refused = await handleUserMessage(runner, "conv-400", "msg-1", "pay bad");
      expect(refused).not.toMatch(/retry|connection lost/);
      expect(refused).toContain("sending it again will not help");
      expect(refused).toContain("400");
      // Throttled on every attempt: nothing ran, and the same message can be sent again.
      provider.setFaultRules([{ bodyContains: '"pay later"}]', fault: { kind: "status", status: 429, retryAfterMs: 1 } }]);
      const throttled = await handleUserMessage(runner, "conv-429", "msg-1", "pay later");
      expect(throttled).toMatch(/send the same message again/);
      expect(throttled).not.toContain("will not help");
    } finally {
      await provider.close();
    }
  });

  it("RECORD-8 the adoption example tells the user a payment an earlier holder of the turn made that the committed answer does not", async () => {
    // Worker A paid and paused before its commit, past its turn lease (a GC pause, a SIGSTOP);
    // worker B resumed the turn (TURN-15) and its model answered with text only. The committed
    // answer says nothing of the payment; the turn's record (RECORD-8) does, and the user must hear it.
    let requests = 0;
    const provider = await startMockProvider({
      script: () =>
        ++requests === 1
          ? { content: [{ type: "tool_use", name: "send_payment", input: { payee: "resumed", amount: 70, currency: "EUR", memo: "x" } }] }
          : { content: [{ type: "text", text: "I could not confirm the payment." }], stopReason: "end_turn" },
    });
    let now = 1_700_000_000_000;
    const store = new MemoryConversationStore({ now: () => now });
    const ledger = new MemoryLedger();
    const { store: paused, reached } = pausedAtCommit(store);
    try {
      const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      const before = payments.length;
      void handleUserMessage(createRunner(client, paused, ledger), "conv-resumed", "msg-1", "pay resumed");
      await reached;
      expect(payments).toHaveLength(before + 1);
      now += 10 * 60_000; // A's turn lease lapses while it is paused
      const told = await handleUserMessage(createRunner(client, store, ledger), "conv-resumed", "msg-1", "pay resumed");
      expect(told).toContain("I could not confirm the payment.");
      expect(told).toContain("send_payment: happened");
      expect(told).toContain('"payee":"resumed"');
      expect(payments).toHaveLength(before + 1);
    } finally {
      await provider.close();
    }
  });

  it("TURN-25 the adoption example tells a re-send that meets the worker still on the message which payment it made, as the payments log has it", async () => {
    // Worker A paid and is paused before its commit, holding the turn lease (its store's clock stands
    // still); the client's re-send reaches worker B, which waits busyWaitMs (30 s, on a Date that
    // the test moves on: no real wait) and meets conversation_busy for the message in progress.
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay busy": turn(toolUse("send_payment", { payee: "busy", amount: 21, currency: "EUR", memo: "rent" })) }),
    });
    const store = new MemoryConversationStore({ now: () => 1_700_000_000_000 });
    const ledger = new MemoryLedger();
    const { store: paused, reached } = pausedAtCommit(store);
    try {
      const client = new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 });
      const before = payments.length;
      void handleUserMessage(createRunner(client, paused, ledger), "conv-busy", "msg-1", "pay busy");
      await reached;
      vi.useFakeTimers({ toFake: ["Date"] });
      let settled = false;
      const resent = handleUserMessage(createRunner(client, store, ledger), "conv-busy", "msg-1", "pay busy").finally(() => (settled = true));
      // The fake Date stands still: move it a second on while B polls the lease (timers stay real).
      while (!settled) {
        vi.setSystemTime(Date.now() + 1_000);
        await new Promise((r) => setTimeout(r, 5));
      }
      const told = await resent;
      vi.useRealTimers();
      expect(payments.slice(before).map((p) => p.payee)).toEqual(["busy"]);
      expect(told).toBe('send_payment: happened {"payee":"busy","amount":21,"currency":"EUR","memo":"rent"}\nstill working on it; send the same message again for the answer');
    } finally {
      vi.useRealTimers();
      await provider.close();
    }
  });

  it("RECORD-9 the adoption example tells the user a payment that happened when the store fails at the turn's end", async () => {
    // The store could not keep the turn's end after the payment ran (the OpenAI adoption trial's
    // PostgreSQL outage): store_unavailable carries what each call did, and the user must hear it.
    const provider = await startMockProvider({
      script: scriptFromPlans({ "pay the trial": turn(toolUse("send_payment", { payee: "trial", amount: 300, currency: "EUR", memo: "x" })) }),
    });
    class FailingOnce extends MemoryConversationStore {
      failNext = true;
      override async commitTurn(...args: Parameters<MemoryConversationStore["commitTurn"]>) {
        if (this.failNext) {
          this.failNext = false;
          throw new StoreUnavailableError("commitTurn failed: Connection terminated unexpectedly");
        }
        return super.commitTurn(...args);
      }
    }
    try {
      const runner = createRunner(new Anthropic({ baseURL: provider.baseURL, apiKey: "test", maxRetries: 0 }), new FailingOnce());
      const before = payments.length;
      const told = await handleUserMessage(runner, "conv-store-down", "msg-1", "pay the trial");
      expect(told).toBe('send_payment: happened {"amount":300,"currency":"EUR","memo":"x","payee":"trial"}; its confirmation was not saved, send the same message again');
      expect(payments).toHaveLength(before + 1);
      // The re-send of the same message id completes the turn from the ledger: no second payment.
      await handleUserMessage(runner, "conv-store-down", "msg-1", "pay the trial");
      expect(payments).toHaveLength(before + 1);
    } finally {
      await provider.close();
    }
  });
});
