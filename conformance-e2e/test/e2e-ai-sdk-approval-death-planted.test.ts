import { AsyncLocalStorage } from "node:async_hooks";
import { createOnceTools } from "@dispatch-once/ai-sdk";
import type { Ledger } from "@dispatch-once/core";
import { ConformanceFailure } from "@dispatch-once/conformance/ledger";
import type { Tool, ToolExecutionOptions, ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { memory } from "./audit-mutants.js";
import { SHRINKS, expectReadable } from "./readable.js";

/**
 * Deaths at the approval step on the AI SDK profile (ai-sdk-scenario.ts `death.on`
 * `approved_call`). The user approved a payment; the request that carries the approval runs it
 * (the AI SDK executes an approved call from the history, before it asks the model again), and the
 * chat route's process dies there, before the payments API or after it accepted the payment, its
 * claim left in flight. The client re-sends that request, the approval with it (AISDK-6), or
 * regenerates the turn and the user approves again; the next process runs the approved call from
 * the history under the key the approval gave it, meets the dead claim, waits out its lease and
 * takes it over.
 *
 * The planted bug: a wrapper that holds an approval good for one run ("the user consented to one
 * attempt: a run that did not finish is not re-run without asking again"): when an approved call's
 * claim takes over a lapsed one, it settles the row as failed, and the call is answered from it,
 * `tool_failed` (effect no). The app keeps a tool-error that says the approved payment did not
 * happen, while the dead process made it. A take-over of any other call is the real wrapper's.
 * The scenarios of before reached it only where a step-1 death fell in an approval turn, which
 * lands on the approved run (about 3 in 200 runs at seeds 777 and 20261201, never on a repeat);
 * the seed is one whose first run has such a death after the payment.
 */
const SEARCH_BUDGET_MS = 400_000;
const SEED = 6;

/** Whether the call a claim is made for is an approved one (set around the wrapped execute). */
const approvedRun = new AsyncLocalStorage<boolean>();

/** How often the planted wrapper settled an approved call's take-over as failed (the search reached it). */
const planted = { count: 0 };

/** The ledger under the planted wrapper: an approved call's take-over of an expired claim becomes a recorded failure. */
function approvalGoodForOneRun(inner: Ledger): Ledger {
  const ledger = Object.create(inner) as Ledger;
  ledger.claim = async (request) => {
    const claim = await inner.claim(request);
    if (claim.outcome !== "claimed" || !claim.takeover || approvedRun.getStore() !== true) return claim;
    planted.count++;
    await inner.fail(request.key, claim.fence, { name: "ApprovalSpent", message: "the approved run did not finish; the user must approve again" });
    // Answered from the row it just failed, as any call that meets a failed row is.
    return inner.claim(request);
  };
  return ledger;
}

async function needsApproval(tool: Tool, input: unknown, options: ToolExecutionOptions): Promise<boolean> {
  const needs = tool.needsApproval as boolean | ((input: unknown, options: unknown) => boolean | PromiseLike<boolean>) | undefined;
  return typeof needs === "function" ? await needs(input, { toolCallId: options.toolCallId, messages: options.messages }) : needs === true;
}

const plantedApp: AiSdkAppOptions = {
  wrap: (tools, ledger, o) => {
    const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger: approvalGoodForOneRun(ledger), dispatcher: o.dispatcher });
    return (request) => {
      const turn = once.forTurn(request);
      const marked: Record<string, Tool> = {};
      for (const [name, t] of Object.entries(turn.tools as ToolSet)) {
        const execute = t.execute;
        marked[name] =
          execute === undefined
            ? t
            : ({ ...t, execute: async (input: unknown, options: ToolExecutionOptions) => approvedRun.run(await needsApproval(t, input, options), () => execute(input, options)) } as Tool);
      }
      return { ...turn, tools: marked };
    };
  },
};

/** The verdict on the dead process's approved payment, told as not made in the re-sent approval or the regenerate. */
const TOLD_NOT_MADE = /send_payment call \S+ of chat-\d "c\d message \d" was kept as an error that says the effect did not happen \(tool_failed \(effect no\): .*\) but it happened: payment_created/;

describe("the ai-sdk side with a process death on an approved call's run", () => {
  for (const [name, shrinkTimeLimitMs] of SHRINKS) {
    it(`EFFECT-6 a wrapper that will not re-run an approved call whose process died tells the re-sent approval the payment did not happen (${name}); the real wrapper passes the same scenario`, async () => {
      planted.count = 0;
      const error = await runEndToEnd(memory, {
        provider: "ai-sdk",
        runs: 200,
        seed: SEED,
        timeLimitMs: SEARCH_BUDGET_MS,
        ...(shrinkTimeLimitMs !== undefined ? { shrinkTimeLimitMs } : {}),
        aiSdk: plantedApp,
      }).catch((e: unknown) => e);
      expect(planted.count).toBeGreaterThan(0);
      const message = expectReadable(error, SEED);
      expect(message).toMatch(/breaks EFFECT-6/);
      expect(message).toMatch(TOLD_NOT_MADE);
      expect(message).toMatch(/DIES after the payments API accepted send_payment key \S+, before the ledger completed \(approved call\)/);
      if (shrinkTimeLimitMs === undefined) expect(message).not.toMatch(/shrinking cut short/);
      const cx = (error as ConformanceFailure).counterexample!;
      let stats: Record<string, number> = {};
      await runEndToEnd(memory, { provider: "ai-sdk", runs: 200, seed: cx.seed, path: cx.path, onStats: (s) => (stats = s) });
      expect(stats).toMatchObject({ property_cases: 1, replayed_passed: 1 });
      expect(stats.approval_deaths).toBeGreaterThan(0);
      expect(stats.takeovers).toBeGreaterThan(0);
    }, 900_000);
  }
});
