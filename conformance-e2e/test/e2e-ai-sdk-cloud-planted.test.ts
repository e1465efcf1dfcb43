import { spliceGuard } from "@dispatch-once/ai-sdk";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { LanguageModelMiddleware } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";

/**
 * Plants on the AI SDK profile over the cloud models (modelApi converse and gemini): the kit must
 * reject, within the drawn runs, an app whose spliceGuard() does not read that API's stream (the
 * guard with its Converse or Gemini reading taken out: a middleware under it drops the raw events
 * of that format before the guard sees them), an app with no guard at all, and an app whose tools
 * are not wrapped by createOnceTools. Off in CI unless CONFORMANCE_E2E_AISDK_CONVERSE_RUNS or
 * CONFORMANCE_E2E_AISDK_GEMINI_RUNS is set (they run a few hundred cases).
 */
const memory = memoryLedgerSubject();
const CONVERSE_EVENTS = new Set(["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"]);
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const isConverseEvent = (v: unknown) => isRecord(v) && Object.keys(v).some((k) => CONVERSE_EVENTS.has(k) || k.endsWith("Exception"));
const isGeminiChunk = (v: unknown) => isRecord(v) && !("type" in v) && ["candidates", "usageMetadata", "promptFeedback", "responseId", "modelVersion", "error"].some((k) => k in v);

/** A middleware under the guard that drops the raw events the predicate names: the guard without that format's reading. */
function blind(drop: (raw: unknown) => boolean): LanguageModelMiddleware {
  return {
    specificationVersion: "v3",
    wrapStream: async ({ doStream }) => {
      const result = await doStream();
      return { ...result, stream: result.stream.pipeThrough(new TransformStream({ transform: (part, c) => (part.type === "raw" && drop(part.rawValue) ? undefined : c.enqueue(part)) })) };
    },
  };
}

const plants = { converse: isConverseEvent, gemini: isGeminiChunk } as const;
const knobs = { converse: "CONFORMANCE_E2E_AISDK_CONVERSE_RUNS", gemini: "CONFORMANCE_E2E_AISDK_GEMINI_RUNS" } as const;

describe.each(["converse", "gemini"] as const)("planted apps over modelApi %s: the end-to-end level rejects them", (modelApi) => {
  const runs = Number(process.env[knobs[modelApi]] ?? 0);
  const seed = Number(process.env.CONFORMANCE_SEED ?? 20261207);
  const rejected = async (app: AiSdkAppOptions): Promise<string> => {
    const error = await runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { ...app, modelApi }, runs, seed, shrinkTimeLimitMs: 0 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConformanceFailure);
    return String((error as Error).message);
  };

  it.skipIf(runs === 0)(`AISDK-16 planted: spliceGuard() without its ${modelApi} reading is rejected within ${runs} runs`, async () => {
    // The guard sees the AI SDK's parsed parts only: a splice's calls run beside the first response's.
    const message = await rejected({ spliceMiddleware: [spliceGuard(), blind(plants[modelApi])] });
    expect(message).toMatch(/performed \d+ times for one intent/);
    expect(message).toMatch(/AISDK-16: .*a call of the response a proxy spliced into another's body/);
  }, 600_000);

  it.skipIf(runs === 0)(`AISDK-16 planted: an app with no spliceGuard() is rejected within ${runs} runs`, async () => {
    const message = await rejected({ spliceGuard: false });
    expect(message).toMatch(/AISDK-16: .*a call of the response a proxy spliced into another's body/);
  }, 600_000);

  it.skipIf(runs === 0)(`CONF-2 planted: unwrapped tools (no createOnceTools) are rejected within ${runs} runs`, async () => {
    const message = await rejected({ wrap: (tools) => () => ({ tools }) });
    expect(message).toMatch(/performed \d+ times/);
  }, 600_000);
});
