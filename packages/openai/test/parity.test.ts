import { afterEach, describe, expect, it } from "vitest";
import type { Fault as AnthropicFault, MockProvider } from "@dispatch-once/mock-provider";
import type { Fault as OpenAIFault, MockOpenAI } from "@dispatch-once/mock-openai";
import type { FailurePosition, RunnerEvent, SendResult } from "@dispatch-once/runner";
// The Anthropic side's own test fixtures: the same payments tool, plans and runner options.
import {
  RunnerEventLog as AnthropicEventLog,
  checkCutGates as checkAnthropicCutGates,
  closeDownstreams as closeAnthropicDownstreams,
  cutAfterDispatch as cutAnthropicAfterDispatch,
  providerWithPlans,
  setup as setupAnthropic,
} from "../../anthropic/test/fixtures.js";
import { TurnFailedError } from "../src/index.js";
import { RunnerEventLog, checkCutGates, closeDownstreams, cutAfterDispatch, isPaymentRequest, setup as setupOpenAI, startProvider } from "./fixtures.js";

/**
 * The same scenarios through both stream sides, each over its real SDK and its mock: the
 * runner is shared, so what a user can observe (payments made, attempts, failure positions,
 * the failed-turn record) must be the same. Each scenario names the cut in both streams'
 * words; only the fault plan differs.
 */
type Scenario = {
  name: string;
  /** `firstOnly` leaves the retries alone. */
  firstOnly: boolean;
  attempts?: number;
  /** Where every cut attempt failed (STREAM-2), on both sides. */
  position: FailurePosition;
} & (
  | {
      /** Fault on the payment request. */
      anthropic: AnthropicFault;
      openai: OpenAIFault;
    }
  | {
      /**
       * The payment request is held where its finish event goes and cut with this kind once its
       * call resolved: after the dispatch by causal order, not by a sleep the payment may outlast.
       */
      cutAfterDispatch: "reset" | "clean_close";
    }
);

const SCENARIOS: Scenario[] = [
  {
    name: "STREAM-5 a reset after the payment ran, before the finish event",
    cutAfterDispatch: "reset",
    firstOnly: true,
    position: "after_dispatch_before_stop",
  },
  {
    name: "STREAM-5 a reset while the payment runs",
    anthropic: { kind: "reset", at: { afterToolUseStop: 0 } },
    openai: { kind: "reset", at: { afterCallDone: 0 } },
    firstOnly: true,
    position: "during_dispatch",
  },
  {
    name: "STREAM-1 a clean close before the finish event",
    cutAfterDispatch: "clean_close",
    firstOnly: true,
    position: "after_dispatch_before_stop",
  },
  {
    name: "STREAM-3 a reset while the arguments stream, every attempt",
    anthropic: { kind: "reset", at: { toolUse: 0, afterFragment: 2 } },
    openai: { kind: "reset", at: { call: 0, afterFragment: 2 } },
    firstOnly: false,
    position: "arguments_streaming",
  },
  {
    name: "RECORD-2 a reset after the payment ran, every attempt",
    cutAfterDispatch: "reset",
    firstOnly: false,
    attempts: 2,
    position: "after_dispatch_before_stop",
  },
];

/** What a user can observe of one send, in provider-neutral terms. */
async function observe(send: () => Promise<SendResult>, events: RunnerEvent[], effects: () => unknown[]) {
  const outcome = await send().then(
    (result) => ({
      answered: true,
      turns: result.turns.map((t) => ({ attempts: t.attempts, calls: t.calls.map((c) => ({ name: c.name, replayed: c.replayed, ordinal: c.ordinal })) })),
    }),
    (error: unknown) => {
      if (!(error instanceof TurnFailedError)) throw error;
      const { record } = error;
      return {
        answered: false,
        record: {
          position: record.position,
          attempts: record.attempts,
          calls: record.calls.map((c) => ({ attempt: c.attempt, status: c.status, effect: c.effect, replayed: c.replayed })),
          effects: record.effects.map((e) => e.effect),
        },
      };
    },
  );
  return {
    payments: effects().length,
    outcome,
    failures: events.filter((e) => e.type === "stream_failed").map((e) => ({ attempt: e.attempt, position: (e as { position: string }).position })),
    abandoned: events.filter((e) => e.type === "call_abandoned").length,
    discarded: events.filter((e) => e.type === "attempt_discarded").map((e) => (e as { reason: string }).reason),
  };
}

let anthropicMock: MockProvider | undefined;
let openaiMock: MockOpenAI | undefined;
afterEach(async () => {
  await anthropicMock?.close();
  await openaiMock?.close();
  await closeAnthropicDownstreams();
  await closeDownstreams();
  checkAnthropicCutGates();
  checkCutGates();
});

describe("parity: the Anthropic and OpenAI stream sides behave the same under the shared runner", () => {
  for (const scenario of SCENARIOS) {
    it(scenario.name, async () => {
      const retry = { backoffMs: () => 1, ...(scenario.attempts !== undefined ? { attempts: scenario.attempts } : {}) };

      anthropicMock = await providerWithPlans();
      const anthropicLog = new AnthropicEventLog();
      const anthropicGate = "cutAfterDispatch" in scenario ? cutAnthropicAfterDispatch(anthropicMock, anthropicLog, scenario.cutAfterDispatch) : undefined;
      anthropicMock.setFaultPlan((request, info) => {
        // The payment request ends with the user's text, not with tool results.
        const payment = typeof request.messages.at(-1)?.content === "string";
        if (!payment || (scenario.firstOnly && info.attempt !== 1)) return undefined;
        return "anthropic" in scenario ? scenario.anthropic : anthropicGate!.hold(info);
      });
      const a = await setupAnthropic(anthropicMock, { guarded: true, latencyMs: 100, runner: { retry, onEvent: anthropicLog.onEvent } });
      const anthropic = await observe(() => a.runner.send("conv-parity", { id: "m1", content: "pay acme" }), anthropicLog.events, a.effects);

      openaiMock = await startProvider();
      const openaiLog = new RunnerEventLog();
      const openaiGate = "cutAfterDispatch" in scenario ? cutAfterDispatch(openaiMock, openaiLog, scenario.cutAfterDispatch) : undefined;
      openaiMock.setFaultPlan((request, info) => {
        if (!isPaymentRequest(request) || (scenario.firstOnly && info.attempt !== 1)) return undefined;
        return "openai" in scenario ? scenario.openai : openaiGate!.hold(info);
      });
      const o = await setupOpenAI(openaiMock, { guarded: true, latencyMs: 100, runner: { retry, onEvent: openaiLog.onEvent } });
      const openai = await observe(() => o.runner.send("conv-parity", { id: "m1", content: "pay acme" }), openaiLog.events, o.effects);

      expect(openai).toEqual(anthropic);
      expect(anthropic.failures[0]).toMatchObject({ attempt: 1 });
      for (const failure of anthropic.failures) expect(failure.position).toBe(scenario.position);
      // And both are what the rules say, not merely equal to each other.
      expect(anthropic.payments).toBe(scenario.name.startsWith("STREAM-3") ? 0 : 1);
      if (scenario.firstOnly) expect(anthropic.outcome).toMatchObject({ answered: true, turns: [{ attempts: 2 }, { attempts: 1 }] });
      else expect(anthropic.outcome).toMatchObject({ answered: false });
    });
  }
});
