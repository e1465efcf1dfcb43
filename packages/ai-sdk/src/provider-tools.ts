import { describeValue, InvalidArgumentError } from "@dispatch-once/core";
import type { LanguageModelMiddleware } from "ai";

/**
 * Which tools the provider runs itself a request may carry (STREAM-19, AISDK-15): `"refuse"`
 * none; `"allow-reads"` the ones whose runs only read (web search, web fetch, tool search, file
 * search). One that can act (code execution, code interpreter, a remote MCP server, a hosted
 * shell) is refused under either: the provider runs it inside the response, outside every
 * ledger, once more in each retried attempt of a cut stream, so no option makes its effect once.
 */
export type ProviderToolsPolicy = "refuse" | "allow-reads";

export interface ProviderToolsGuardOptions {
  /**
   * `"allow-reads"` lets provider-run tools that only read through (each attempt's runs are
   * billed; their results are the provider's, never the ledger's).
   * @default "refuse"
   * @example providerToolsGuard({ providerTools: "allow-reads" })
   */
  providerTools?: ProviderToolsPolicy;
}

const POLICIES: readonly ProviderToolsPolicy[] = ["refuse", "allow-reads"];

/*
 * Provider-defined tools (`type: "provider"`, `id: "<provider>.<tool>"`) by who runs them, as
 * @ai-sdk/anthropic 3.0.140, @ai-sdk/openai 3.0.141 and @ai-sdk/google 3.0.129 send them. An id not listed is refused:
 * a new provider tool that acts would otherwise pass silently.
 */
// The application runs these (the AI SDK executes them like function tools): not provider-run.
const APP_RUN_IDS = /^(anthropic\.(bash|text_editor|memory|computer|computer_toolset|browser_toolset)_\d+|openai\.(local_shell|apply_patch|custom))$/;
// Run by the provider, and their runs only read: run again in a retried attempt, they change nothing outside.
// @ai-sdk/google 3.0.129's: Google Search (and Vertex AI's enterprise web search), URL context, Google Maps
// grounding, File Search and a Vertex RAG store retrieve; its code execution runs code, which can act, and is refused.
const PROVIDER_READ_IDS =
  /^(anthropic\.(web_search|web_fetch)_\d+|anthropic\.tool_search_(bm25|regex)(_\d+)?|openai\.(web_search|web_search_preview|file_search|tool_search)|google\.(google_search|enterprise_web_search|url_context|google_maps|file_search|vertex_rag_store))$/;

type Runner = "app" | "provider-read" | "provider";

/** Who runs a provider-defined tool, from its id and (for tools that may run either side) its args. */
function runnerOf(id: string, args: unknown): Runner {
  const a = (typeof args === "object" && args !== null ? args : {}) as Record<string, unknown>;
  // openai.shell runs in OpenAI's container when its environment is one, in the app's process otherwise.
  if (id === "openai.shell") {
    const env = (a.environment as { type?: unknown } | undefined)?.type;
    return env === "containerAuto" || env === "containerReference" ? "provider" : "app";
  }
  // openai.tool_search with execution "client" is answered by the app; the default is the server's.
  if (id === "openai.tool_search" && a.execution === "client") return "app";
  if (APP_RUN_IDS.test(id)) return "app";
  if (PROVIDER_READ_IDS.test(id)) return "provider-read";
  return "provider";
}

/** `value` as a policy, or `invalid_argument` naming `field`. */
export function checkProviderToolsPolicy(value: unknown, field: string): ProviderToolsPolicy {
  if (value === undefined) return "refuse";
  if (!POLICIES.includes(value as ProviderToolsPolicy)) {
    throw new InvalidArgumentError(field, `must be ${POLICIES.map((p) => JSON.stringify(p)).join(" or ")}, got ${describeValue(value)}`);
  }
  return value as ProviderToolsPolicy;
}

/** Whether `tool` is a provider-defined tool (ai 6: `"provider"`; ai 5 and LanguageModelV2: `"provider-defined"`). */
export function isProviderDefined(tool: unknown): tool is { type: string; id: unknown; args?: unknown } {
  const type = (tool as { type?: unknown } | null)?.type;
  return typeof tool === "object" && tool !== null && (type === "provider" || type === "provider-defined");
}

/**
 * Refuses a provider-defined tool the provider runs itself, unless `policy` allows it (a read
 * under `"allow-reads"`). Returns whether the provider runs it (a tool the app runs: false).
 */
export function checkProviderTool(tool: { id: unknown; args?: unknown }, field: string, policy: ProviderToolsPolicy): boolean {
  const id = typeof tool.id === "string" ? tool.id : describeValue(tool.id);
  const runner = runnerOf(id, tool.args);
  if (runner === "app") return false;
  const where = `is the provider tool ${JSON.stringify(id)}`;
  if (runner === "provider-read") {
    if (policy === "allow-reads") return true;
    throw new InvalidArgumentError(
      field,
      `${where}, which the provider runs itself inside the response: outside every ledger, once more in each retried attempt of a cut stream. It only reads, so it may be sent with providerTools: "allow-reads" (each attempt's runs are billed)`,
    );
  }
  throw new InvalidArgumentError(
    field,
    `${where}: one the provider runs itself (code execution, a code interpreter, a remote MCP server, a hosted shell, ...) or one this version does not know as a tool the application runs. The provider would run it inside the response, outside every ledger, once more in each retried attempt of a cut stream, so an effect through it is not made once; no option allows it. Give the effect to the application as a tool wrapped by createOnceTools`,
  );
}

// Provider options by which the provider runs tools itself, whatever the tools (Anthropic's MCP connector and code execution container).
const PROVIDER_RUN_OPTIONS: Readonly<Record<string, string>> = {
  mcpServers:
    "would make the provider call the tools of these remote MCP servers itself (the MCP connector), inside the response: outside every ledger, once more in each retried attempt of a cut stream, so a payment through one is made once per attempt. Give the tools to the application (@dispatch-once/mcp guards an MCP server's tools)",
  container:
    "would make the provider reuse a code execution container (its files, its skills) in every request: what code execution does there is run by the provider itself, outside every ledger, once more in each retried attempt, and the container keeps state no conversation the app keeps holds",
  // @ai-sdk/openai-compatible copies a provider's options into the Chat Completions body as they are.
  compound_custom:
    "would set the tools Groq's compound systems run themselves (code execution, browser automation, ...) inside the response: outside every ledger, once more in each retried attempt of a cut stream. Give the effect to the application as a tool wrapped by createOnceTools",
};

// Provider options by which the provider runs a search itself (a read): refused unless "allow-reads".
const PROVIDER_READ_OPTIONS: Readonly<Record<string, string>> = {
  web_search_options:
    "would make the provider search the web itself inside the response (Chat Completions' web_search_options, which @ai-sdk/openai-compatible copies into the body): outside every ledger, once more in each retried attempt of a cut stream. It only reads, so it may be sent with providerTools: \"allow-reads\" (each attempt's searches are billed)",
};

/**
 * A language-model middleware (`wrapLanguageModel({ model, middleware: providerToolsGuard() })`)
 * that refuses, before each request of the AI SDK's loop is sent, every route by which it would
 * carry a tool the provider runs itself (STREAM-19, AISDK-15): a provider-defined tool in
 * `tools` (whoever put it there: the app's spread beside `turn.tools`, `prepareStep`), a
 * `toolChoice` naming a tool the request holds as no function tool (`@ai-sdk/openai` turns
 * `{ type: "tool", toolName: "code_interpreter" }` into a hosted tool choice), Anthropic's
 * `mcpServers` and `container` provider options, and, in any provider's options (which
 * `@ai-sdk/openai-compatible` copies into the Chat Completions body), Groq's `compound_custom` and
 * (unless `"allow-reads"`) `web_search_options`. A model that runs tools by its id alone (Groq's
 * `groq/compound`, a search model) shows nothing in the request: the guard cannot see it. The refusal is an `invalid_argument` naming the
 * field, thrown from the model call: `streamText` reports it as its `error` part, `generateText`
 * rejects with it, and nothing is sent.
 * @example const model = wrapLanguageModel({ model: openai.responses("gpt-5"), middleware: providerToolsGuard() });
 */
export function providerToolsGuard(options: ProviderToolsGuardOptions = {}): LanguageModelMiddleware {
  if (typeof options !== "object" || options === null) throw new InvalidArgumentError("options", `must be { providerTools? }, got ${describeValue(options)}`);
  for (const name of Object.keys(options)) {
    if (name !== "providerTools") throw new InvalidArgumentError(`options.${name}`, "is not an option of providerToolsGuard (it takes providerTools)");
  }
  const policy = checkProviderToolsPolicy(options.providerTools, "options.providerTools");
  return {
    specificationVersion: "v3",
    transformParams: async ({ params }) => {
      const functions = new Set<string>();
      const allowed = new Set<string>();
      for (const [i, tool] of (params.tools ?? []).entries()) {
        if (isProviderDefined(tool)) {
          if (!checkProviderTool(tool, `params.tools[${i}] (${tool.name})`, policy)) functions.add(tool.name);
          else allowed.add(tool.name);
        } else if (tool.type === "function") functions.add(tool.name);
        else throw new InvalidArgumentError(`params.tools[${i}]`, `has type ${describeValue((tool as { type?: unknown }).type)}, which this version does not know as a tool the application runs`);
      }
      const choice = params.toolChoice;
      if (choice?.type === "tool" && !functions.has(choice.toolName) && !allowed.has(choice.toolName)) {
        throw new InvalidArgumentError(
          "params.toolChoice",
          `names ${JSON.stringify(choice.toolName)}, which is no tool of the request the application runs: a provider maps such a choice to a tool it runs itself (@ai-sdk/openai: "code_interpreter", "mcp", "image_generation", ...), outside every ledger, once more in each retried attempt`,
        );
      }
      for (const [provider, values] of Object.entries(params.providerOptions ?? {})) {
        if (typeof values !== "object" || values === null) continue;
        for (const [name, why] of Object.entries(PROVIDER_RUN_OPTIONS)) {
          const value = (values as Record<string, unknown>)[name];
          if (value != null && !(Array.isArray(value) && value.length === 0)) throw new InvalidArgumentError(`params.providerOptions.${provider}.${name}`, why);
        }
        if (policy === "allow-reads") continue;
        for (const [name, why] of Object.entries(PROVIDER_READ_OPTIONS)) {
          if ((values as Record<string, unknown>)[name] != null) throw new InvalidArgumentError(`params.providerOptions.${provider}.${name}`, why);
        }
      }
      return params;
    },
  };
}
