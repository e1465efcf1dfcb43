import { createGoogleGenerativeAI } from "@ai-sdk/google";
import { boundedFetch, providerToolsGuard, spliceGuard } from "@dispatch-once/ai-sdk";
import { wrapLanguageModel } from "ai";
import { aiSdkSuite, type AiSdkSide } from "./byte-cut-ai-sdk-app.js";
import { dataEvent } from "./byte-cut-cases.js";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * The AI SDK side over Google's Gemini API (`@ai-sdk/google` 3.0.129, `:streamGenerateContent?alt=sse`),
 * the model wrapped as the ai-sdk README's app wraps it (`[providerToolsGuard(), spliceGuard()]`),
 * tools from `createOnceTools` (byte-cut-ai-sdk-app.ts), mock-provider's Gemini route behind the byte
 * proxy. Its chunks are `data:` lines without `event:`, so the landmarks are named by what a chunk
 * holds (dataEvent): the call comes whole in the chunk with its `functionCall` (parsed `args`, raw
 * UTF-8), and the last chunk has the `finishReason` (a response is whole once it was written).
 * See README "Byte-level cuts".
 */

const CALL = dataEvent('"functionCall"');
const FINISH = dataEvent('"finishReason"');
const world = byteCutWorld("byte-cut-gemini", (p) => p.geminiBaseURL);

type Model = Parameters<typeof wrapLanguageModel>[0]["model"];

const gemini: AiSdkSide = {
  finishType: FINISH,
  prompt: PROMPT,
  model: (caseId) =>
    wrapLanguageModel({
      // The proxy tells the cases apart by this header; boundedFetch ends a silent stream (AISDK-13).
      model: createGoogleGenerativeAI({ baseURL: world.proxy.baseURL, apiKey: "AIzaSyExampleKey", headers: { "x-byte-case": caseId }, fetch: boundedFetch({ idleMs: 30_000 }) })("gemini-2.5-flash") as Model,
      middleware: [providerToolsGuard(), spliceGuard()],
    }),
  // The call's id (the AI SDK's toolCallId) and the response's.
  idsIn: (body) => [...body.toString("utf8").matchAll(/"(?:id|responseId)":"([^"]+)"/g)].map((m) => m[1]!),
  // Gemini's contents carry the call's result as a functionResponse part.
  isPaying: (requestBody) => !JSON.stringify(requestBody).includes('"functionResponse"'),
  proxy: () => world.proxy,
  payments: () => world.payments,
};

aiSdkSuite("byte-level cuts of streamText over @ai-sdk/google's Gemini model (SSE data lines), tools from createOnceTools", gemini, {
  regions: [
    // The end of the chunk before the call, the call chunk's start and its last bytes (the args' end, its blank line).
    { type: CALL, before: 4, head: 16, tail: 10 },
    { type: FINISH, before: 0, head: 16, tail: 10 },
  ],
  callDone: CALL,
  nonAsciiBefore: FINISH,
  sample: 4,
  otherLineEndings: true,
});
