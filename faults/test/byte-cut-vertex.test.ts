import { createVertex } from "@ai-sdk/google-vertex";
import { boundedFetch, providerToolsGuard, spliceGuard } from "@dispatch-once/ai-sdk";
import { defaultSettingsMiddleware, wrapLanguageModel } from "ai";
import { aiSdkSuite, type AiSdkSide } from "./byte-cut-ai-sdk-app.js";
import { dataEvent } from "./byte-cut-cases.js";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * The AI SDK side over Gemini on Vertex AI (`@ai-sdk/google-vertex` 4.0.208, which runs
 * `@ai-sdk/google` 3.0.129's model), with the call's arguments streamed
 * (`streamFunctionCallArguments`: a part with the call's name and `willContinue`, `partialArgs` as its
 * members become whole, a terminal `functionCall: {}`), the model wrapped as the ai-sdk README's app
 * wraps it (`[providerToolsGuard(), spliceGuard()]`), tools from `createOnceTools`
 * (byte-cut-ai-sdk-app.ts), mock-provider's Vertex Gemini route behind the byte proxy (a fetch sends
 * Vertex AI's host to it; google-auth-library gets an auth client with a fixed token). Thoughts are
 * on, as a Gemini 3 model sends them: the turn's `thoughtSignature` rides on the call, and the
 * request after it carries both back. The call completes at its terminal part; the last chunk has
 * the `finishReason`. See README "Byte-level cuts".
 */

const CALL_DONE = dataEvent('"functionCall":{}');
const FINISH = dataEvent('"finishReason"');
const VERTEX_HOST = "https://us-central1-aiplatform.googleapis.com";
const world = byteCutWorld("byte-cut-vertex", (p) => p.url);

/** Sends Vertex AI's host to the proxy, and nothing anywhere else. */
const toProxy: typeof fetch = async (input, init) => {
  const url = input instanceof Request ? input.url : String(input);
  if (!url.startsWith(`${VERTEX_HOST}/`)) throw new Error(`this test sends nothing but to Vertex AI's host (the proxy), not to ${url}`);
  return fetch(`${world.proxy.baseURL}${url.slice(VERTEX_HOST.length)}`, init);
};
const authClient = { getAccessToken: async () => ({ token: "ya29.mock-token" }) };
type Model = Parameters<typeof wrapLanguageModel>[0]["model"];

const vertex: AiSdkSide = {
  finishType: FINISH,
  prompt: PROMPT,
  model: (caseId) =>
    wrapLanguageModel({
      // The proxy tells the cases apart by this header; boundedFetch ends a silent stream (AISDK-13).
      model: createVertex({ project: "acme-prod", location: "us-central1", googleAuthOptions: { authClient: authClient as never }, headers: { "x-byte-case": caseId }, fetch: boundedFetch({ idleMs: 30_000, fetch: toProxy }) })(
        "gemini-3-pro-preview",
      ) as Model,
      middleware: [defaultSettingsMiddleware({ settings: { providerOptions: { google: { streamFunctionCallArguments: true, thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } } } } }), providerToolsGuard(), spliceGuard()],
    }),
  idsIn: (body) => [...body.toString("utf8").matchAll(/"(?:id|responseId)":"([^"]+)"/g)].map((m) => m[1]!),
  isPaying: (requestBody) => !JSON.stringify(requestBody).includes('"functionResponse"'),
  proxy: () => world.proxy,
  payments: () => world.payments,
};

aiSdkSuite("byte-level cuts of streamText over @ai-sdk/google-vertex's Gemini model with streamed call arguments (SSE data lines), tools from createOnceTools", vertex, {
  regions: [
    // The end of the last partialArgs chunk, the terminal part's chunk up to the part and its last bytes.
    { type: CALL_DONE, before: 6, head: 24, tail: 10 },
    { type: FINISH, before: 0, head: 16, tail: 10 },
  ],
  callDone: CALL_DONE,
  nonAsciiBefore: FINISH,
  sample: 4,
  otherLineEndings: true,
});
