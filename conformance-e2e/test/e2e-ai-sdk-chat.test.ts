import { createOnceTools } from "@dispatch-once/ai-sdk";
import { ConformanceFailure, memoryLedgerSubject } from "@dispatch-once/conformance/ledger";
import type { ToolSet } from "ai";
import { describe, expect, it } from "vitest";
import { runEndToEnd, type AiSdkAppOptions } from "../src/index.js";
import { expectReached } from "./reached.js";

/**
 * The end-to-end level's Vercel AI SDK profile over a Chat Completions model (`aiSdk.modelApi:
 * "chat"`: `openai.chat(...)` against the mock's `/v1/chat/completions`, as OpenAI-compatible
 * servers are used), judged by the payments API's effect log against what the app kept, as on the
 * Responses API. No splices are drawn there (the mock has none on that API). Off in CI unless
 * CONFORMANCE_E2E_AISDK_CHAT_RUNS is set.
 */
const runs = Number(process.env.CONFORMANCE_E2E_AISDK_CHAT_RUNS ?? 0);

describe("end-to-end level on the Vercel AI SDK over a Chat Completions model (provider ai-sdk, modelApi chat)", () => {
  it.skipIf(runs === 0)(`CONF-2 AISDK-1 AISDK-2 AISDK-4 AISDK-6 AISDK-7 AISDK-9 AISDK-14 AISDK-17 over ${runs} random scenarios`, async () => {
    const seen: Record<string, number> = {};
    await runEndToEnd(memoryLedgerSubject(), {
      provider: "ai-sdk",
      aiSdk: { modelApi: "chat" },
      runs,
      seed: Number(process.env.CONFORMANCE_SEED ?? 20261207),
      onStats: (stats) => Object.assign(seen, stats),
    });
    expect(seen.told_successes ?? 0, "told_successes").toBeGreaterThan(0);
    // Every request of the run went to /v1/chat/completions.
    expect(seen.chat_completions_requests ?? 0, "chat_completions_requests").toBeGreaterThan(0);
    expect(seen.responses_requests).toBeUndefined();
    if (runs >= 10) for (const kind of ["attempts_failed", "resends", "regenerates"]) expectReached(seen, kind);
  });

  it.skipIf(runs === 0)("CONF-2 planted: an app that gives each request a conversation id of its own (a chat id minted per page load) is rejected over the chat model too", async () => {
    let n = 0;
    const mintsIds: AiSdkAppOptions = {
      wrap: (tools, ledger, o) => {
        const once = createOnceTools({ tools: tools as ToolSet, effects: o.effects, identity: o.identity, ledger, dispatcher: o.dispatcher });
        return (request) => once.forTurn({ ...request, conversationId: `${request.conversationId}-${++n}` });
      },
    };
    const error = await runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", aiSdk: { ...mintsIds, modelApi: "chat" }, runs, seed: 20261207, shrinkTimeLimitMs: 0 }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ConformanceFailure);
    expect(String((error as Error).message)).toMatch(/performed [2-9] times/);
  });

  it("a modelApi it does not know is refused, not run as the default", async () => {
    await expect(runEndToEnd(memoryLedgerSubject(), { provider: "ai-sdk", aiSdk: { modelApi: "Chat" as "chat" }, runs: 1 })).rejects.toThrow(/aiSdk.modelApi must be one of "responses", "chat", "converse", "gemini", "gemini-vertex", got "Chat"/);
  });
});
