import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { EffectNeedsAPerson, runAssistantCalls } from "../examples/framework-loop.js";
import { Dispatcher, ERROR_CATALOGUE, LedgerUnavailableError, MemoryLedger, ToolError, defineTool, type Dispatcher as DispatcherType } from "../src/index.js";

/*
 * examples/framework-loop.ts (the README's "When a framework owns the loop", shown verbatim) on the
 * errors test/readme.test.ts's run does not meet: a re-sendable refusal whose effect did not
 * happen, an effect that happened unrecorded, and an error that is not the library's (blind round Q's
 * Q13, Q14, Q16); and the section's prose against the example (Q19).
 */

/** A payments tool over an in-process map keyed by Idempotency-Key; `fail` decides a call's failure before or after it pays. */
function payments(fail: (reference: string, attempt: number) => "before" | undefined = () => undefined) {
  const made = new Map<string, string>();
  const attempts = new Map<string, number>();
  const tool = defineTool({
    name: "send_payment",
    effect: "keyed_write",
    input: z.object({ payee: z.string(), amount: z.number().int(), reference: z.string() }),
    async run(args, { idempotencyKey }) {
      const attempt = (attempts.get(args.reference) ?? 0) + 1;
      attempts.set(args.reference, attempt);
      // A 503 before the payment was made: the API says nothing happened and a re-send may succeed.
      if (fail(args.reference, attempt) === "before") throw new ToolError("payments API 503 (not performed)", { disposition: "not_performed" });
      if (!made.has(idempotencyKey)) made.set(idempotencyKey, `pay_${made.size + 1}`);
      return { id: made.get(idempotencyKey), reference: args.reference };
    },
  });
  return { made, tool };
}

describe("examples/framework-loop.ts: which errors go where (README, When a framework owns the loop)", () => {
  it("ERR-3 a re-sendable refusal whose effect did not happen (claim_released, not performed) goes to the framework's retry, not to the model; the re-run pays once", async () => {
    const { made, tool } = payments((reference, attempt) => (reference === "INV-503" && attempt === 1 ? "before" : undefined));
    // A durable store (as the app's would be): a not-performed first run then proves the call did not happen (fence 1).
    const ledger = new MemoryLedger();
    const durable = Object.assign(Object.create(ledger) as MemoryLedger, { capabilities: { ...ledger.capabilities, durability: "durable" as const } });
    const dispatcher = new Dispatcher({ tools: [tool], ledger: durable, logger: { warn: () => {} } });
    const calls = [{ id: "toolu_a", name: "send_payment", args: { payee: "acme", amount: 7, reference: "INV-503" } }];
    // Told to the model as a tool error it would ask again in its next turn, under another key: a second payment later.
    await expect(runAssistantCalls(dispatcher, "thread-q13", 0, calls)).rejects.toMatchObject({ code: "claim_released", effectMayHaveHappened: false });
    const retried = await runAssistantCalls(dispatcher, "thread-q13", 0, calls);
    expect(retried.map((a) => a.outcome?.result)).toEqual([{ id: "pay_1", reference: "INV-503" }]);
    expect(made.size).toBe(1);
  });

  it("EFFECT-3 an effect that happened but could not be recorded (ledger_unavailable, effect yes) stops for a person, never reaches the model", async () => {
    const { made, tool } = payments();
    // The store goes away between the run and its record: the payment is made, its row never completed.
    class LostRecordLedger extends MemoryLedger {
      override async complete(): Promise<never> {
        throw new LedgerUnavailableError("the ledger's store is unreachable");
      }
    }
    const dispatcher = new Dispatcher({ tools: [tool], ledger: new LostRecordLedger(), logger: { warn: () => {} }, recordRetryMs: 0 });
    const calls = [{ id: "toolu_b", name: "send_payment", args: { payee: "bob", amount: 9, reference: "INV-rec" } }];
    const stopped = await runAssistantCalls(dispatcher, "thread-q14", 0, calls).catch((e: unknown) => e);
    expect(made.size).toBe(1);
    expect(stopped, "an effect that happened was handed on as something the model may read").toBeInstanceOf(EffectNeedsAPerson);
    expect((stopped as EffectNeedsAPerson).cause).toMatchObject({ code: "ledger_unavailable", effectHappened: true });
  });

  it("ERR-3 an error that is not the library's (an app's dispatcher wrapper, a bug) is thrown to the framework as it is", async () => {
    const bug = new TypeError("cannot read properties of undefined (reading 'amount')");
    const wrapper = { turn: () => ({ dispatch: async () => Promise.reject(bug) }) } as unknown as DispatcherType;
    await expect(runAssistantCalls(wrapper, "thread-q16", 0, [{ id: "toolu_c", name: "send_payment", args: {} }])).rejects.toBe(bug);
  });

  it("ERR-3 the section's prose names the retryable value the example hands to the framework's retry, one of the catalogue's", () => {
    const readme = readFileSync(join(import.meta.dirname, "..", "README.md"), "utf8");
    const example = readFileSync(join(import.meta.dirname, "..", "examples", "framework-loop.ts"), "utf8");
    const section = readme.slice(readme.indexOf("## When a framework owns the loop"), readme.indexOf("```ts", readme.indexOf("## When a framework owns the loop")));
    const values = new Set(ERROR_CATALOGUE.map((e) => e.retryable));
    const inExample = [...example.matchAll(/retryableOf\([^)]*\)\s*===\s*"([^"]+)"/g)].map((m) => m[1]);
    const inProse = [...section.matchAll(/retryableOf\([^)]*\)\s*===\s*"([^"]+)"/g)].map((m) => m[1]);
    expect(inExample.length).toBeGreaterThan(0);
    expect(inProse.length).toBeGreaterThan(0);
    for (const v of inProse) {
      expect(values.has(v as never), `the README's prose compares retryableOf with "${v}", which no catalogue entry has`).toBe(true);
      expect(inExample, `the README's prose says "${v}" goes to the framework's retry; the example hands it ${inExample.join(", ")}`).toContain(v);
    }
  });
});
