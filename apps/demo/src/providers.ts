/** The `--provider` values and the API each speaks; imports nothing, so the CLI's own thread can read them. */

/**
 * The stream side the incident runs on: our runner over the Anthropic SDK, the OpenAI SDK's
 * Responses API or its Chat Completions API, or the Vercel AI SDK's own loop (over
 * `@ai-sdk/openai`) with the app's tools wrapped.
 */
export type DemoProvider = "anthropic" | "openai" | "openai-chat" | "ai-sdk";

/** Every `--provider` value, in the order the usage text and its error list them. */
export const DEMO_PROVIDERS: readonly DemoProvider[] = ["anthropic", "openai", "openai-chat", "ai-sdk"];

/** The API each provider's run speaks, as the printout and the report name it. */
export const PROVIDER_API: Record<DemoProvider, string> = {
  anthropic: "Anthropic Messages API (POST /v1/messages)",
  openai: "OpenAI Responses API (POST /v1/responses)",
  "openai-chat": "OpenAI Chat Completions API (POST /v1/chat/completions)",
  "ai-sdk": "Vercel AI SDK over the OpenAI Responses API (POST /v1/responses)",
};
