import { InvalidArgumentError, describeValue } from "@dispatch-once/core";

/**
 * Which tools the Messages API runs itself (server tools) a request may carry (STREAM-19):
 * `"refuse"` none; `"allow-reads"` the ones whose runs only read (web search, web fetch, tool
 * search). A server tool that can act (code execution, an MCP connector toolset) is refused
 * under either: the API runs it inside the response, outside every ledger, once more in each
 * retried attempt of a cut stream, so no option makes its effect happen once.
 */
export type ProviderToolsPolicy = "refuse" | "allow-reads";

const POLICIES: readonly ProviderToolsPolicy[] = ["refuse", "allow-reads"];

// Anthropic-defined tools the application runs: the response carries a tool_use block for them,
// which reaches the dispatcher like a custom tool's (the API runs nothing).
const APP_RUN_TYPES = /^(custom|bash_\d+|text_editor_\d+|memory_\d+|computer_\d+|computer_toolset_\d+|browser_toolset_\d+)$/;
// Server tools whose runs only read: run again in a retried attempt, they change nothing outside.
const PROVIDER_READ_TYPES = /^(web_search_\d+|web_fetch_\d+|tool_search_tool_(bm25|regex)(_\d+)?)$/;

/**
 * The request parameters by which the API runs tools itself, and why each is refused whatever
 * the policy: the one place this package lists them (the runner's `params`, the tool runner's).
 */
const PROVIDER_RUN_PARAMS: Readonly<Record<string, string>> = {
  mcp_servers:
    "would make the API call the tools of these remote MCP servers itself (the MCP connector), inside the response: outside every ledger, once more in each retried attempt of a cut stream, so a payment through one is made once per attempt. Give the tools to the application (@dispatch-once/mcp guards an MCP server's tools)",
  container:
    "would make the API reuse a code execution container (its files, its skills) in every request: what code execution does there is run by the API itself, outside every ledger, once more in each retried attempt, and the container keeps state no committed conversation holds",
};

/** `value` as a policy, or `invalid_argument` naming `field`. */
export function checkProviderToolsPolicy(value: unknown, field: string): ProviderToolsPolicy {
  if (value === undefined) return "refuse";
  if (!POLICIES.includes(value as ProviderToolsPolicy)) {
    throw new InvalidArgumentError(field, `must be ${POLICIES.map((p) => JSON.stringify(p)).join(" or ")}, got ${describeValue(value)}`);
  }
  return value as ProviderToolsPolicy;
}

/** Refuses a parameter by which the API would run a tool itself; `field(name)` names it. */
export function checkProviderRunParams(params: object, field: (name: string) => string): void {
  for (const [name, why] of Object.entries(PROVIDER_RUN_PARAMS)) {
    if (Object.prototype.hasOwnProperty.call(params, name) && (params as Record<string, unknown>)[name] != null) throw new InvalidArgumentError(field(name), why);
  }
}

/**
 * Refuses a tool entry the API would run itself, unless `policy` allows it (a read under
 * `"allow-reads"`). An entry without `type` is a custom tool; its shape is checked elsewhere.
 */
export function checkProviderTool(tool: unknown, field: string, policy: ProviderToolsPolicy): void {
  if (typeof tool !== "object" || tool === null) return;
  const type = (tool as { type?: unknown }).type;
  if (type === undefined || type === null || (typeof type === "string" && APP_RUN_TYPES.test(type))) return;
  const where = `is a ${JSON.stringify(type)} tool`;
  if (typeof type === "string" && PROVIDER_READ_TYPES.test(type)) {
    if (policy === "allow-reads") return;
    throw new InvalidArgumentError(
      field,
      `${where}, which the API runs itself inside the response: outside every ledger, once more in each retried attempt of a cut stream. It only reads, so it may be sent with providerTools: "allow-reads" (each attempt's runs are billed, and a committed turn keeps the response's text, not the tool's result blocks)`,
    );
  }
  throw new InvalidArgumentError(
    field,
    `${where}: one the API runs itself (code execution, an MCP connector toolset, ...) or one this version does not know as a tool the application runs. The API would run it inside the response, outside every ledger, once more in each retried attempt of a cut stream, so an effect through it is not made once; no option allows it. Give the effect to the application as a tool of its registry`,
  );
}
