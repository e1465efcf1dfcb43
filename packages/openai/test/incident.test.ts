import { Dispatcher, MemoryLedger, UnguardedDispatcher, type CallDispatcher, type DispatchOutcome } from "@dispatch-once/core";
import type { MockOpenAI } from "@dispatch-once/mock-openai";
import type OpenAI from "openai";
import { afterEach, describe, expect, it } from "vitest";
import { ResponsesTurnAccumulator, type FailurePosition } from "../src/index.js";
import { RunnerEventLog, checkCutGates, cutAfterDispatch, isPaymentRequest, payments, sdk, startProvider } from "./fixtures.js";

const opened: Array<{ close(): Promise<void> }> = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((s) => s.close()));
  checkCutGates();
});

interface AttemptFailure {
  attempt: number;
  position: FailurePosition;
  error: string;
}

/**
 * A minimal loop (not the runner): dispatch each call at its output_item.done, treat a stream
 * without response.completed as failed, wait for dispatched calls, and retry the same request.
 * `log` hears of each call once its dispatch has resolved (what a cut gate waits for).
 */
async function runTurn(client: OpenAI, dispatcher: CallDispatcher, conversationId: string, input: OpenAI.Responses.ResponseInput, log: RunnerEventLog) {
  const failures: AttemptFailure[] = [];
  for (let attempt = 1; attempt <= 3; attempt++) {
    const accumulator = new ResponsesTurnAccumulator();
    const turn = dispatcher.turn({ conversationId, turnIndex: 0 });
    const outcomes = new Map<number, DispatchOutcome>();
    const dispatches: Promise<void>[] = [];
    try {
      const stream = await client.responses.create({ model: "gpt-test", input, stream: true });
      for await (const event of stream) {
        const call = accumulator.apply(event);
        if (call === undefined) continue;
        call.phase = "dispatched";
        dispatches.push(
          turn.dispatch({ name: call.name, input: call.input, callId: call.callId }).then((outcome) => {
            outcomes.set(call.index, outcome);
            call.phase = "resolved";
            log.markResolved(call.callId);
          }),
        );
      }
      if (!accumulator.completed) throw new Error(`stream ended without response.completed (${accumulator.streamError?.message ?? "clean close"})`);
    } catch (error) {
      // Read the position now, before waiting: a call still running is "during_dispatch".
      failures.push({ attempt, position: accumulator.failurePosition(), error: String(error) });
      accumulator.abandonOpenCalls();
      // A dispatched call is never cancelled by the stream's death (STREAM-6).
      await Promise.all(dispatches);
      continue;
    }
    await Promise.all(dispatches);
    return { accumulator, outcomes, failures, attempts: attempt };
  }
  throw new Error(`turn failed 3 times: ${JSON.stringify(failures)}`);
}

async function incident(options: { guarded: boolean; cut: "during_dispatch" | "after_dispatch_before_stop"; kind?: "reset" | "clean_close" | "error_event" }) {
  const provider: MockOpenAI = await startProvider();
  opened.push(provider);
  const { tools, server } = await payments(options.cut === "during_dispatch" ? 150 : 50);
  opened.push(server);
  // In the after_dispatch case the stream is held where response.completed goes and cut only once
  // the payment's dispatch resolved: the position by causal order, however slow the payment is.
  const log = new RunnerEventLog();
  const gate = cutAfterDispatch(provider, log, options.kind ?? "reset");
  // Only the payment request's first attempt: the tests' follow-up (the call's output sent back,
  // not streamed) is another request's first attempt, and a gate set for it would wait for a hold
  // that never comes, then fail 20 s later in whichever test was running.
  provider.setFaultPlan((request, info) =>
    info.attempt !== 1 || !isPaymentRequest(request) ? undefined : options.cut === "during_dispatch" ? { kind: options.kind ?? "reset", at: { afterCallDone: 0 } } : gate.hold(info),
  );
  const dispatcher = options.guarded ? new Dispatcher({ tools, ledger: new MemoryLedger(), waitMs: 10_000, pollMs: 5 }) : new UnguardedDispatcher(tools);
  const client = sdk(provider);
  const input: OpenAI.Responses.ResponseInput = [{ role: "user", content: "pay acme" }];
  const result = await runTurn(client, dispatcher, "conv-openai-incident", input, log);
  const effects = server.effects().filter((e) => e.kind === "payment_created");
  return { provider, client, input, result, effects, server };
}

describe("the chapter's incident on the OpenAI Responses API, through the real SDK", () => {
  it("control: keyed on the per-response call_id (naive), the retry pays twice", async () => {
    const { result, effects } = await incident({ guarded: false, cut: "after_dispatch_before_stop" });
    expect(result.failures).toMatchObject([{ attempt: 1, position: "after_dispatch_before_stop" }]);
    expect(effects).toHaveLength(2);
    expect(new Set(effects.map((e) => e.idempotencyKey)).size).toBe(2);
  });

  for (const cut of ["after_dispatch_before_stop", "during_dispatch"] as const) {
    it(`STREAM-5 guarded: a reset ${cut} (after output_item.done, before response.completed), the same request re-sent with a new call_id, exactly one payment`, async () => {
      const { provider, client, input, result, effects, server } = await incident({ guarded: true, cut });
      expect(result.failures).toMatchObject([{ attempt: 1, position: cut, error: expect.stringContaining("terminated") }]);
      expect(result.attempts).toBe(2);
      // The retry re-sent the same request; the model minted a new call_id and re-worded the memo.
      const [first, retry] = provider.requests;
      expect(retry!.bodyHash).toBe(first!.bodyHash);
      expect(retry!.calls[0]!.callId).not.toBe(first!.calls[0]!.callId);
      expect(JSON.parse(retry!.calls[0]!.json).memo).not.toBe(JSON.parse(first!.calls[0]!.json).memo);

      // The oracle: one payment, made with the key the retry's dispatch was answered under.
      expect(effects).toHaveLength(1);
      const outcome = result.outcomes.get(0)!;
      expect(outcome.replayed).toBe(true);
      expect(effects[0]!.idempotencyKey).toBe(outcome.key);
      expect(outcome.result).toEqual({ paymentId: effects[0]!.resourceId, status: "accepted" });

      // What the conversation gets: the retried response's call_id with the first payment's result.
      const call = result.accumulator.calls[0]!;
      expect(call.callId).toBe(retry!.calls[0]!.callId);
      const next = await client.responses.create({
        model: "gpt-test",
        input: [...input, ...result.accumulator.output(), { type: "function_call_output", call_id: call.callId, output: outcome.resultJson }],
      });
      expect(next.output_text).toBe("Payment sent.");
      // The follow-up request made no payment of its own.
      expect(server.effects().filter((e) => e.kind === "payment_created")).toHaveLength(1);
    });
  }

  for (const kind of ["clean_close", "error_event"] as const) {
    it(`STREAM-1 a ${kind} before response.completed (the SDK raises nothing) is a failed stream: retried, one payment`, async () => {
      const { result, effects } = await incident({ guarded: true, cut: "after_dispatch_before_stop", kind });
      expect(result.failures).toMatchObject([{ attempt: 1, position: "after_dispatch_before_stop", error: expect.stringContaining("without response.completed") }]);
      expect(result.attempts).toBe(2);
      expect(effects).toHaveLength(1);
      expect(result.outcomes.get(0)!.replayed).toBe(true);
    });
  }
});
