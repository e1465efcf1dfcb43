import fc from "fast-check";
import { memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import { describe, expect, it } from "vitest";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { aiSdkCloudImports, vertexDrawOf, withoutResponseIds } from "../src/ai-sdk-case.js";
import { aiSdkScenarioArbitrary } from "../src/ai-sdk-scenario.js";
import { runEndToEnd } from "../src/index.js";
import { expectReached } from "./reached.js";

/**
 * The end-to-end level's Vercel AI SDK profile over Gemini on Vertex AI (`aiSdk.modelApi:
 * "gemini-vertex"`, `@ai-sdk/google-vertex` against apps/mock-provider's Vertex Gemini route):
 * every call's arguments streamed (`partialArgs`), thoughts in a drawn share of cases, a gateway
 * that strips the chunks' `responseId` in another, and splices after a completed call or inside a
 * call's streamed arguments. A few runs always (the wiring); more when
 * CONFORMANCE_E2E_AISDK_VERTEX_RUNS is set.
 */
const WIRING_RUNS = 4;
const runs = Number(process.env.CONFORMANCE_E2E_AISDK_VERTEX_RUNS ?? 0);
const memory = memoryLedgerSubject();

describe("end-to-end level on the Vercel AI SDK over Gemini on Vertex AI (provider ai-sdk, modelApi gemini-vertex)", () => {
  it(`CONF-2 AISDK-1 AISDK-6 AISDK-16 over ${WIRING_RUNS} random scenarios (the wiring): every request to the Vertex route, streamed arguments asked for`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { modelApi: "gemini-vertex" }, runs: WIRING_RUNS, seed: 20261207, onStats: (stats) => Object.assign(seen, stats) });
    expect(seen.gemini_vertex_requests ?? 0, "gemini_vertex_requests").toBeGreaterThan(0);
    expect(seen.gemini_requests).toBeUndefined();
    expect(seen.responses_requests).toBeUndefined();
    expect(seen.vertex_streamed_args_requests).toBe(seen.gemini_vertex_requests);
    expect(seen.told_successes ?? 0, "told_successes").toBeGreaterThan(0);
  });

  it("a case pinned to thoughts and stripped ids: its requests ask for thoughts, and the app is told its payments", async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { modelApi: "gemini-vertex", vertex: { thoughts: true, responseIdsStripped: true } }, runs: 1, seed: 7, onStats: (stats) => Object.assign(seen, stats) });
    expect([seen.vertex_thoughts_cases, seen.vertex_ids_stripped_cases]).toEqual([1, 1]);
    expect(seen.vertex_thoughts_requests).toBe(seen.gemini_vertex_requests);
    expect(seen.told_successes ?? 0, "told_successes").toBeGreaterThan(0);
  });

  it.skipIf(runs === 0)(`CONF-2 AISDK-1 AISDK-2 AISDK-4 AISDK-6 AISDK-7 AISDK-9 AISDK-14 AISDK-16 AISDK-17 over ${runs} random scenarios`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memory, {
      provider: "ai-sdk",
      aiSdk: { modelApi: "gemini-vertex" },
      runs,
      seed: Number(process.env.CONFORMANCE_SEED ?? 20261207),
      onStats: (stats) => Object.assign(seen, stats),
    });
    expect(seen.gemini_vertex_requests ?? 0, "gemini_vertex_requests").toBeGreaterThan(0);
    expect(seen.gemini_requests).toBeUndefined();
    console.log(`gemini-vertex: ${JSON.stringify(seen)}`);
    if (runs >= 30) {
      for (const kind of ["attempts_failed", "resends", "regenerates", "vertex_thoughts_cases", "vertex_ids_stripped_cases", "vertex_express_cases", "splices", "splices_in_streamed_args"]) expectReached(seen, kind);
    }
  });
});

describe("gemini-vertex: what a case meets is drawn per scenario", () => {
  it("a scenario draws the same every time; 60 draw thoughts, stripped ids, express mode and both splice positions, and stripped ids only with splices inside the streamed arguments", () => {
    const scenarios = fc.sample(aiSdkScenarioArbitrary(), { seed: 20261207, numRuns: 60 });
    const draws = scenarios.map((s) => vertexDrawOf(s));
    expect(scenarios.map((s) => vertexDrawOf(structuredClone(s)))).toEqual(draws);
    for (const field of ["thoughts", "responseIdsStripped", "express", "spliceInArgs"] as const) expect(new Set(draws.map((d) => d[field])), field).toEqual(new Set([true, false]));
    expect(draws.filter((d) => d.responseIdsStripped && !d.spliceInArgs)).toEqual([]);
    expect(vertexDrawOf(scenarios[0]!, { thoughts: false, responseIdsStripped: true })).toMatchObject({ thoughts: false, responseIdsStripped: true, spliceInArgs: true });
  });
});

describe("aiSdk.vertex and gemini-vertex without its package", () => {
  it("aiSdk.vertex is refused on another modelApi, and a field it does not know or a value not a boolean is refused", async () => {
    await expect(runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { modelApi: "gemini", vertex: { thoughts: true } }, runs: 1 })).rejects.toThrow('aiSdk.vertex applies to aiSdk.modelApi "gemini-vertex" only, not "gemini"');
    await expect(runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { modelApi: "gemini-vertex", vertex: { thought: true } as never }, runs: 1 })).rejects.toThrow('aiSdk.vertex has no field "thought"');
    await expect(runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { modelApi: "gemini-vertex", vertex: { responseIdsStripped: "yes" } as never }, runs: 1 })).rejects.toThrow('aiSdk.vertex.responseIdsStripped must be a boolean, got "yes"');
  });

  it("modelApi gemini-vertex is refused before the run, naming @ai-sdk/google-vertex (an optional peer dependency)", async () => {
    const real = aiSdkCloudImports["gemini-vertex"];
    aiSdkCloudImports["gemini-vertex"] = () => Promise.reject(Object.assign(new Error("Cannot find package '@ai-sdk/google-vertex'"), { code: "ERR_MODULE_NOT_FOUND" }));
    try {
      await expect(runEndToEnd(memory, { provider: "ai-sdk", aiSdk: { modelApi: "gemini-vertex" }, runs: 1 })).rejects.toThrow('aiSdk.modelApi "gemini-vertex" needs @ai-sdk/google-vertex installed');
    } finally {
      aiSdkCloudImports["gemini-vertex"] = real;
    }
  });
});

describe("gemini-vertex: the gateway that strips responseId", () => {
  it("AISDK-16 strips every chunk's responseId and nothing else (a chunk split across writes, CRLF kept, a line cut short by a fault), so a stripped-id case leaves the guard only the streamed call's order", async () => {
    const chunk = (n: number) => JSON.stringify({ candidates: [{ content: { role: "model", parts: [{ functionCall: { name: "send_payment", willContinue: true } }] }, index: 0 }], responseId: `resp_${n}`, modelVersion: "gemini-3-pro-preview" });
    // The mock's Vertex route writes CRLF; the last line is cut inside its JSON (a fault's cut).
    const body = `data: ${chunk(1)}\r\n\r\ndata: ${chunk(2)}\r\n\r\ndata: ${chunk(3).slice(0, -10)}`;
    const server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "text/event-stream" });
      // Split inside the first chunk's id: the gateway must join a line before it reads it.
      const at = body.indexOf("resp_1") + 3;
      res.write(body.slice(0, at));
      setImmediate(() => res.end(body.slice(at)));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const response = await withoutResponseIds(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
      const text = await response.text();
      expect(body).toContain('"responseId":"resp_3"');
      expect(text).not.toContain("responseId");
      expect(text).not.toContain("resp_");
      const lines = text.split("\n");
      expect(lines.filter((l) => l.startsWith("data:"))).toHaveLength(3);
      for (const line of lines.slice(0, -1)) expect(line.endsWith("\r"), JSON.stringify(line)).toBe(true);
      const first = JSON.parse(lines[0]!.slice(5)) as Record<string, unknown>;
      expect(first).toEqual({ ...(JSON.parse(chunk(1)) as Record<string, unknown>), responseId: undefined });
      expect(first["modelVersion"]).toBe("gemini-3-pro-preview");
    } finally {
      server.close();
    }
  });
});
