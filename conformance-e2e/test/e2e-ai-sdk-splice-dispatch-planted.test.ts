import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { LanguageModelMiddleware } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { expectReadable } from "./readable.js";

/**
 * AISDK-16: the splice check MUST end the model stream at the first sign of a second response and
 * pass on no part after it, so that no call of the spliced response reaches `execute`. The plant
 * is a check that sees the same signs as `spliceGuard()` (another response's start, an item at an
 * occupied position) but fails the step at the stream's end, not at the sign: it lets the body
 * play out and swaps the finish part for the error. The step still fails and the app re-sends
 * (nothing kept), so the judges of harm see only what the spliced calls' dispatch paid. Where the
 * app dispatches at the `tool-call` part (AISDK-4), a spliced call identical to the held one runs
 * under the next ordinal: the ordinal of the turn's tool-loop repeat, when the user asked for that
 * payment twice. Seed 877's first run: "c1 message 0" asks for one payment and, in its loop's step
 * 2, the same again; a splice with its own start after the payment's call, whose copy is
 * dispatched at ordinal 1 and paid; the re-send the model answers without the payment (a text
 * answer), and `unansweredCalls()` tells the user of both payments. Two payments for two intents,
 * the user told of both: every judge of before passes it (run 1, nothing else rejected). The
 * oracle now reads each dispatched call id against the mock's responses (ai-sdk-case.ts,
 * checkNoSplicedCallDispatched). The control runs the app with `spliceGuard()` over the same run.
 */
const memory = memoryLedgerSubject();
const SEED = 877;
const RUNS = 1;
const SEARCH_BUDGET_MS = 120_000;

/** What `spliceGuard()` reads of a raw Responses event: another response's id, or an item at a held position. */
function signOf(seen: { responseId?: string; positions: Set<number> }, raw: unknown): string | undefined {
  const event = (typeof raw === "object" && raw !== null ? raw : {}) as { type?: string; response?: { id?: string }; output_index?: number };
  if (event.type === "response.created" && typeof event.response?.id === "string") {
    if (seen.responseId !== undefined && seen.responseId !== event.response.id) return `a second response (${event.response.id})`;
    seen.responseId = event.response.id;
  }
  if (event.type === "response.output_item.added" && typeof event.output_index === "number") {
    if (seen.positions.has(event.output_index)) return `an item at output_index ${event.output_index} again`;
    seen.positions.add(event.output_index);
  }
  return undefined;
}

/** The plant: the signs seen, the failure deferred to the stream's end (every part after the sign passed on). */
const failsAtTheEnd: LanguageModelMiddleware = {
  specificationVersion: "v3",
  wrapStream: async ({ params, model }) => {
    const wantsRaw = params.includeRawChunks === true;
    const result = await model.doStream({ ...params, includeRawChunks: true });
    const seen = { positions: new Set<number>() } as { responseId?: string; positions: Set<number> };
    let sign: string | undefined;
    type Part = { type: string; rawValue?: unknown };
    const stream = (result.stream as unknown as ReadableStream<Part>).pipeThrough(
      new TransformStream<Part, Part>({
        transform(part, controller) {
          if (part.type === "raw") {
            sign ??= signOf(seen, part.rawValue);
            if (wantsRaw) controller.enqueue(part);
            return;
          }
          if (part.type === "finish" && sign !== undefined) {
            controller.enqueue({ type: "error", error: new Error(`spliced stream: ${sign}`) } as Part);
            controller.terminate();
            return;
          }
          controller.enqueue(part);
        },
      }),
    );
    return { ...result, stream: stream as unknown as typeof result.stream };
  },
};
const late: AiSdkAppOptions = { spliceMiddleware: failsAtTheEnd };

describe("splices on the ai-sdk profile: the end-to-end level rejects a splice check that fails the step at the stream's end", () => {
  it("AISDK-16 a spliced call dispatched at its tool-call part takes the ordinal of the turn's tool-loop repeat; spliceGuard() passes the same runs", async () => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", runs: RUNS, seed: SEED, timeLimitMs: SEARCH_BUDGET_MS, shrinkTimeLimitMs: 0, aiSdk: late }).catch((e: unknown) => e);
    const message = expectReadable(error, SEED);
    expect(message).toMatch(/breaks AISDK-16\): in request 1 of chat-1 "c1 message 0" \(as sent\), the dispatcher ran \(key [0-9a-f]{8}\) send_payment \(call_\w+\), a call of the response a proxy spliced into another's body \(with its own start; its calls \[send_payment\]\)/);
    expect(message).toMatch(/send_payment runs key [0-9a-f]{8} \(turn 1, ordinal 1\)/);
    expect(message).toContain(`after ${RUNS} runs`);
    // No judge of the harm sees it: every violation is a dispatched spliced call.
    const violations = message.split("\n").filter((l) => /^(the end-to-end oracle rejects the run \(breaks |  )[A-Z]+-\d+[):]/.test(l));
    expect(violations.filter((l) => !/a call of the response a proxy spliced/.test(l))).toEqual([]);

    // The control: the app with spliceGuard() over the same runs passes, and meets a splice.
    expect((error as ConformanceFailure).counterexample!.seed).toBe(SEED);
    let seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", runs: RUNS, seed: SEED, onStats: (stats) => (seen = stats) });
    expect(seen).toMatchObject({ property_cases: RUNS });
    expect(seen.splices ?? 0).toBeGreaterThan(0);
  }, 300_000);
});
