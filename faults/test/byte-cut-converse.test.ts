import { createAmazonBedrock } from "@ai-sdk/amazon-bedrock";
import { boundedFetch, providerToolsGuard, spliceGuard } from "@dispatch-once/ai-sdk";
import { wrapLanguageModel } from "ai";
import { aiSdkSuite, type AiSdkSide } from "./byte-cut-ai-sdk-app.js";
import { bodyText } from "./byte-cut-cases.js";
import { PROMPT, byteCutWorld } from "./byte-cut-world.js";

/*
 * The AI SDK side over Amazon Bedrock's Converse API (`@ai-sdk/amazon-bedrock` 4.0.186,
 * `converse-stream`), the model wrapped as the ai-sdk README's app wraps it
 * (`[providerToolsGuard(), spliceGuard()]`), tools from `createOnceTools` (byte-cut-ai-sdk-app.ts),
 * mock-provider's Converse route behind the byte proxy. The body is in the AWS event-stream framing,
 * one frame per Converse event named by its `:event-type` header: the call completes at its
 * `contentBlockStop`, the stop reason is `messageStop` (a response is whole once it was written:
 * the provider takes its finish reason from it), and `metadata` is the last frame. The arguments
 * stream raw in the `contentBlockDelta` payloads, so their multi-byte characters are cut inside.
 * See README "Byte-level cuts".
 */

const world = byteCutWorld("byte-cut-converse", (p) => p.bedrockBaseURL);

type Model = Parameters<typeof wrapLanguageModel>[0]["model"];

const converse: AiSdkSide = {
  finishType: "messageStop",
  prompt: PROMPT,
  model: (caseId) =>
    wrapLanguageModel({
      // The proxy tells the cases apart by this header (signed with the rest; the mock does not verify SigV4); boundedFetch ends a silent stream (AISDK-13).
      model: createAmazonBedrock({ baseURL: world.proxy.baseURL, region: "us-east-1", accessKeyId: "AKIDEXAMPLE", secretAccessKey: "test-secret", headers: { "x-byte-case": caseId }, fetch: boundedFetch({ idleMs: 30_000 }) })("claude-test") as Model,
      middleware: [providerToolsGuard(), spliceGuard()],
    }),
  idsIn: (body) => [...bodyText(body).matchAll(/"toolUseId":"([^"]+)"/g)].map((m) => m[1]!),
  // Converse's messages carry the call's result as a toolResult block.
  isPaying: (requestBody) => !JSON.stringify(requestBody).includes('"toolResult"'),
  proxy: () => world.proxy,
  payments: () => world.payments,
};

aiSdkSuite("byte-level cuts of streamText over @ai-sdk/amazon-bedrock's Converse model (event stream), tools from createOnceTools", converse, {
  regions: [
    // The end of the last argument frame (its CRC), then the call's completion.
    { type: "contentBlockStop", before: 4, edges: 6 },
    { type: "messageStop", before: 0, edges: 6 },
    { type: "metadata", before: 0, edges: 4 },
  ],
  callDone: "contentBlockStop",
  nonAsciiBefore: "contentBlockStop",
  sample: 4,
  otherLineEndings: false,
});
