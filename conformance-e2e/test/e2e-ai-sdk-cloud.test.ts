import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { aiSdkCloudImports } from "../src/ai-sdk-case.js";
import { runEndToEnd } from "../src/index.js";
import { expectReached } from "./reached.js";

/**
 * The end-to-end level's Vercel AI SDK profile over Amazon Bedrock's Converse API
 * (`aiSdk.modelApi: "converse"`, `@ai-sdk/amazon-bedrock` against apps/mock-provider's
 * `/model/{id}/converse-stream`) and Google's Gemini API (`"gemini"`, `@ai-sdk/google` against
 * `/v1beta/models/{m}:streamGenerateContent`): the same scenarios, scripts and faults (splices
 * too) as on the Responses API, judged by the payments API's effect log against what the app kept
 * and told. A few runs of each always (the wiring); more when CONFORMANCE_E2E_AISDK_CONVERSE_RUNS
 * or CONFORMANCE_E2E_AISDK_GEMINI_RUNS is set.
 */
const WIRING_RUNS = 5;
const knobs = { converse: "CONFORMANCE_E2E_AISDK_CONVERSE_RUNS", gemini: "CONFORMANCE_E2E_AISDK_GEMINI_RUNS" } as const;

describe.each(["converse", "gemini"] as const)("end-to-end level on the Vercel AI SDK over a cloud model (provider ai-sdk, modelApi %s)", (modelApi) => {
  const runs = Number(process.env[knobs[modelApi]] ?? 0);
  const requests = `${modelApi}_requests`;

  it(`CONF-2 AISDK-1 AISDK-2 AISDK-6 AISDK-16 over ${WIRING_RUNS} random scenarios (the wiring)`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", aiSdk: { modelApi }, runs: WIRING_RUNS, seed: 20261207, onStats: (stats) => Object.assign(seen, stats) });
    // Every request of the run went to the cloud route.
    expect(seen[requests] ?? 0, requests).toBeGreaterThan(0);
    expect(seen.responses_requests).toBeUndefined();
    expect(seen.told_successes ?? 0, "told_successes").toBeGreaterThan(0);
  });

  it.skipIf(runs === 0)(`CONF-2 AISDK-1 AISDK-2 AISDK-4 AISDK-6 AISDK-7 AISDK-9 AISDK-14 AISDK-16 AISDK-17 over ${runs} random scenarios`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memoryLedgerSubject(), {
      provider: "ai-sdk",
      aiSdk: { modelApi },
      runs,
      seed: Number(process.env.CONFORMANCE_SEED ?? 20261207),
      onStats: (stats) => Object.assign(seen, stats),
    });
    expect(seen[requests] ?? 0, requests).toBeGreaterThan(0);
    expect(seen.responses_requests).toBeUndefined();
    console.log(`${modelApi}: ${JSON.stringify(seen)}`);
    if (runs >= 10) for (const kind of ["attempts_failed", "resends", "regenerates"]) expectReached(seen, kind);
  });
});

describe("aiSdk.modelApi", () => {
  it("a modelApi it does not know is refused, not run as the default", async () => {
    await expect(runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", aiSdk: { modelApi: "Gemini" as "gemini" }, runs: 1 })).rejects.toThrow(
      /aiSdk.modelApi must be one of "responses", "chat", "converse", "gemini", "gemini-vertex", got "Gemini"/,
    );
  });
});


describe("a cloud modelApi without its provider package", () => {
  it.each([
    ["converse", "@ai-sdk/amazon-bedrock"],
    ["gemini", "@ai-sdk/google"],
  ] as const)("modelApi %s is refused before the run, naming %s (an optional peer dependency)", async (modelApi, pkg) => {
    const real = aiSdkCloudImports[modelApi];
    aiSdkCloudImports[modelApi] = (() => Promise.reject(Object.assign(new Error(`Cannot find package '${pkg}'`), { code: "ERR_MODULE_NOT_FOUND" }))) as never;
    try {
      await expect(runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", aiSdk: { modelApi }, runs: 1 })).rejects.toThrow(`aiSdk.modelApi "${modelApi}" needs ${pkg} installed`);
    } finally {
      aiSdkCloudImports[modelApi] = real as never;
    }
  });
});
