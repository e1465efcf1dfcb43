import { spliceGuard } from "@dispatch-once/ai-sdk";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { LanguageModelMiddleware } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd } from "../src/index.js";

/**
 * The AI SDK profile over the cloud model APIs (modelApi converse and gemini) draws the mock's
 * splices and plays each shape as drawn, and its oracle reads the spliced responses (AISDK-16):
 * a few runs at a seed whose scenarios splice, always on (the planted apps of
 * e2e-ai-sdk-cloud-planted.test.ts run only with their knobs set). Without these, a kit that drew
 * no splice on these APIs, played the restart shape headless, or never learnt of a spliced
 * response passed its wiring runs (blind round P: P27, P28, P29).
 */
const SEED = 20261207;
const RUNS = 8;
const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** Below the guard: counts, per model stream, the second responses the raw events show as the guard reads them (a second messageStart; a second responseId). */
function observer(seen: { streams: number; restarts: number }): LanguageModelMiddleware {
  return {
    specificationVersion: "v3",
    wrapStream: async ({ doStream }) => {
      const result = await doStream();
      seen.streams++;
      let starts = 0;
      const ids = new Set<string>();
      let counted = false;
      const stream = result.stream.pipeThrough(
        new TransformStream({
          transform(part, controller) {
            if (part.type === "raw" && isRecord(part.rawValue)) {
              if ("messageStart" in part.rawValue) starts++;
              if (typeof part.rawValue["responseId"] === "string") ids.add(part.rawValue["responseId"]);
              if (!counted && (starts > 1 || ids.size > 1)) {
                counted = true;
                seen.restarts++;
              }
            }
            controller.enqueue(part);
          },
        }),
      );
      return { ...result, stream };
    },
  };
}

/** Below the guard: drops the raw events of one format, so the guard reads only the AI SDK's parsed parts (as e2e-ai-sdk-cloud-planted's plant). */
function blind(): LanguageModelMiddleware {
  return {
    specificationVersion: "v3",
    wrapStream: async ({ doStream }) => {
      const result = await doStream();
      return { ...result, stream: result.stream.pipeThrough(new TransformStream({ transform: (part, c) => (part.type === "raw" ? undefined : c.enqueue(part)) })) };
    },
  };
}

describe.each(["converse", "gemini"] as const)("the AI SDK profile's splices over modelApi %s (AISDK-16)", (modelApi) => {
  it(`AISDK-16 ${RUNS} runs draw splices, restarts among them, and the mock plays a restart with its own start (a second ${modelApi === "converse" ? "messageStart" : "responseId"})`, async () => {
    const stats: Record<string, number> = {};
    const seen = { streams: 0, restarts: 0 };
    await runEndToEnd(memoryLedgerSubject(), {
      provider: "ai-sdk",
      aiSdk: { modelApi, spliceMiddleware: [spliceGuard(), observer(seen)] },
      runs: RUNS,
      seed: SEED,
      // A rejection of the real app (a kit that scripts the wrong message) is reported as found, not shrunk.
      shrinkTimeLimitMs: 0,
      onStats: (s) => Object.assign(stats, s),
    });
    expect(stats.splices, JSON.stringify(stats)).toBeGreaterThan(0);
    expect(stats.splices_restart, JSON.stringify(stats)).toBeGreaterThan(0);
    // Each restart splice drawn is a stream with a second response's start the guard reads.
    expect(seen.restarts ?? 0).toBeGreaterThanOrEqual(stats.splices_restart!);
  });

  it(`AISDK-16 planted: an app whose guard reads no raw event is rejected within ${RUNS} runs, naming the spliced response's call`, async () => {
    const error = await runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", aiSdk: { modelApi, spliceMiddleware: [spliceGuard(), blind()] }, runs: RUNS, seed: SEED, shrinkTimeLimitMs: 0 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConformanceFailure);
    expect(String((error as Error).message)).toMatch(/AISDK-16: .*a call of the response a proxy spliced into another's body/);
  });
});

/** Below the guard on Gemini on Vertex AI: per model stream, whether a chunk named a response, and whether a streamed call's parts were broken by another's (a part the guard reads as a splice). */
function vertexObserver(seen: { streams: number; named: number; broken: number }): LanguageModelMiddleware {
  return {
    specificationVersion: "v3",
    wrapStream: async ({ doStream }) => {
      const result = await doStream();
      seen.streams++;
      let streaming = false;
      let named = false;
      let broken = false;
      // Counted at the part: the guard ends the stream there, and this transform sees no flush.
      const broke = () => void (broken ? 0 : ((broken = true), seen.broken++));
      const stream = result.stream.pipeThrough(
        new TransformStream({
          transform(part, controller) {
            if (part.type === "raw" && isRecord(part.rawValue)) {
              if (!named && typeof part.rawValue["responseId"] === "string") {
                named = true;
                seen.named++;
              }
              const candidates = Array.isArray(part.rawValue["candidates"]) ? (part.rawValue["candidates"] as unknown[]) : [];
              const content = isRecord(candidates[0]) && isRecord(candidates[0]["content"]) ? candidates[0]["content"] : {};
              for (const p of Array.isArray(content["parts"]) ? (content["parts"] as unknown[]) : []) {
                if (!isRecord(p)) continue;
                const call = isRecord(p["functionCall"]) ? p["functionCall"] : undefined;
                if (call === undefined) {
                  if (streaming && typeof p["text"] === "string" && p["text"] !== "") broke();
                } else if (typeof call["name"] === "string") {
                  if (streaming) broke();
                  streaming = call["willContinue"] === true;
                } else if (call["willContinue"] !== true) streaming = false;
              }
            }
            controller.enqueue(part);
          },
        }),
      );
      return { ...result, stream };
    },
  };
}

describe("the AI SDK profile's splices over modelApi gemini-vertex behind the gateway that strips responseId (AISDK-16)", () => {
  it(`AISDK-16 ${RUNS} runs: no chunk the app's model reads names a response, every splice lands inside a call's streamed arguments, and each shows there as a call broken by another response's part`, async () => {
    const stats: Record<string, number> = {};
    const seen = { streams: 0, named: 0, broken: 0 };
    await runEndToEnd(memoryLedgerSubject(), {
      provider: "ai-sdk",
      aiSdk: { modelApi: "gemini-vertex", vertex: { responseIdsStripped: true }, spliceMiddleware: [spliceGuard(), vertexObserver(seen)] },
      runs: RUNS,
      seed: SEED,
      shrinkTimeLimitMs: 0,
      onStats: (s) => Object.assign(stats, s),
    });
    expect(seen.streams ?? 0).toBeGreaterThan(0);
    expect(seen.named, "streams whose chunks still named their response behind the gateway").toBe(0);
    expect(stats.splices, JSON.stringify(stats)).toBeGreaterThan(0);
    expect(stats.splices_in_streamed_args, JSON.stringify(stats)).toBe(stats.splices);
    expect(seen.broken, JSON.stringify({ stats, seen })).toBeGreaterThanOrEqual(stats.splices!);
  });
});
