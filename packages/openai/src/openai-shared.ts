import { InvalidArgumentError, describeValue } from "@dispatch-once/core";
import { checkUserContent } from "@dispatch-once/runner";

// What both stream sides over the `openai` SDK (the Responses API's and Chat Completions') read and check alike.

/** A committed call's arguments text, parsed; undefined when it is not JSON (the call was never dispatched). */
export function parsedArguments(text: unknown): unknown {
  if (typeof text !== "string") return undefined;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * Whether a stored output is the runner's `{ error }` answer. The API keeps no error flag, so
 * this reads the shape the runner writes (an object whose only member is a stored error); it
 * only decides how a turn read back from the store is reported. A tool's result can have that
 * shape too, codes included, so a code the runner reads back as a fact is taken from the shape
 * only where the call allows it: `invalid_arguments_json` (never dispatched, no key) answers only
 * arguments that are not a JSON object (both accumulators refuse nothing else with it), so under
 * a call whose committed arguments are one it is the tool's result (a payment that happened).
 */
export function isErrorOutput(output: unknown, input?: unknown): boolean {
  if (typeof output !== "string") return false;
  try {
    const parsed = JSON.parse(output) as unknown;
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) return false;
    const keys = Object.keys(parsed);
    const error = (parsed as { error?: { name?: unknown; message?: unknown; code?: unknown } }).error;
    if (!(keys.length === 1 && typeof error?.name === "string" && typeof error.message === "string")) return false;
    return !(error.code === "invalid_arguments_json" && isJsonObject(input));
  } catch {
    return false;
  }
}

function isJsonObject(value: unknown): boolean {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Each tool must be a provider schema (a name and an object `input_schema`): a tool definition or
 * the registry itself would be sent without parameters, and the API refuses the request (or the
 * model calls the tool with no schema) on every send.
 */
export function checkTools(tools: unknown): void {
  if (!Array.isArray(tools)) throw new InvalidArgumentError("options.tools", "must be an array of provider tool schemas (registry.providerSchemas())");
  tools.forEach((tool: unknown, i) => {
    const t = tool as { name?: unknown; input_schema?: unknown } | null;
    if (typeof t !== "object" || t === null || typeof t.name !== "string" || t.name === "" || typeof t.input_schema !== "object" || t.input_schema === null) {
      throw new InvalidArgumentError(`options.tools[${i}]`, `must be a provider tool schema ({ name, input_schema }, from registry.providerSchemas()), got ${describeValue(tool)}`);
    }
  });
}

/**
 * A user message's content: the runner's checks, then each part's `type` against the API's own
 * (`accepts`), which `expected` names. Another API's part (a Messages API block, a Responses
 * `input_text` on Chat Completions) would be stored, then refused by the API on every attempt.
 */
export function checkContentParts(content: unknown, accepts: (type: string) => boolean, expected: string): void {
  checkUserContent(content as Parameters<typeof checkUserContent>[0]);
  if (!Array.isArray(content)) return;
  content.forEach((part, i) => {
    const type = (part as { type: string }).type;
    if (!accepts(type)) throw new InvalidArgumentError(`message.content[${i}].type`, `must be ${expected}, got ${JSON.stringify(type)}`);
  });
}
