import { InvalidArgumentError, InvalidToolDefinitionError } from "@dispatch-once/core";
import { IDENTITY_META } from "./meta.js";

/**
 * A tool's identity as MCP-10 takes it on either side: a non-empty list of distinct top-level
 * argument names (IDENT-1, IDENT-2). A bad one is refused where it is declared, naming `field`:
 * ignored, it would leave the memo in the key, and a regenerate that re-words it pays again.
 */
export function checkIdentity(field: string, identity: unknown): readonly string[] {
  const problem = identityProblem(identity);
  if (problem !== undefined) throw new InvalidArgumentError(field, problem);
  return identity as readonly string[];
}

function identityProblem(identity: unknown): string | undefined {
  if (!Array.isArray(identity) || identity.length === 0 || !identity.every((name) => typeof name === "string" && name.length > 0)) {
    return "must be a non-empty array of the argument names that identify the call (IDENT-1)";
  }
  if (new Set(identity).size !== identity.length) return "names an argument twice (IDENT-2)";
  return undefined;
}

/** A tool as `tools/list` gives it: the members the client reads (MCP-11). */
export interface ListedTool {
  name: string;
  inputSchema?: { properties?: Record<string, unknown> };
  _meta?: Record<string, unknown>;
}

/**
 * The identity a server advertises for a listed tool (MCP-11), or undefined when it advertises
 * none (every argument counts). A malformed one is refused, `invalid_tool_definition`: keyed over
 * every argument instead, a re-worded regenerate would pay again without anyone being told.
 */
export function advertisedIdentity(tool: ListedTool): readonly string[] | undefined {
  const identity = tool._meta?.[IDENTITY_META];
  if (identity === undefined) return undefined;
  const problem = identityProblem(identity);
  if (problem !== undefined) throw new InvalidToolDefinitionError(`tool ${tool.name}: _meta["${IDENTITY_META}"] ${problem}, got ${JSON.stringify(identity)}`);
  const properties = tool.inputSchema?.properties ?? {};
  const unknown = (identity as string[]).find((name) => !Object.hasOwn(properties, name));
  if (unknown !== undefined) throw new InvalidToolDefinitionError(`tool ${tool.name}: _meta["${IDENTITY_META}"] names ${JSON.stringify(unknown)}, which is not in its inputSchema (IDENT-2)`);
  return identity as readonly string[];
}

/** Whether a call keyed over `keyed` is compared over `compared` (either undefined: every argument); order does not count. */
export function sameIdentity(keyed: unknown, compared: readonly string[] | undefined): boolean {
  if (keyed === undefined || compared === undefined) return keyed === compared;
  if (!Array.isArray(keyed) || keyed.length !== compared.length) return false;
  return compared.every((name) => keyed.includes(name));
}

/** The identity projection of a call's arguments (IDENT-1): the named members that are present, each whole. */
export function projectArguments(args: Record<string, unknown>, identity: readonly string[]): Record<string, unknown> {
  const projected: Record<string, unknown> = {};
  for (const name of identity) if (Object.hasOwn(args, name) && args[name] !== undefined) projected[name] = args[name];
  return projected;
}
