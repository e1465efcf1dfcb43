import { InvalidArgumentError } from "@dispatch-once/core";

/**
 * A tool's identity as MCP-10 takes it on either side: a non-empty list of distinct top-level
 * argument names (IDENT-1, IDENT-2). A bad one is refused where it is declared, naming `field`:
 * ignored, it would leave the memo in the key, and a regenerate that re-words it pays again.
 */
export function checkIdentity(field: string, identity: unknown): readonly string[] {
  if (!Array.isArray(identity) || identity.length === 0 || !identity.every((name) => typeof name === "string" && name.length > 0)) {
    throw new InvalidArgumentError(field, "must be a non-empty array of the argument names that identify the call (IDENT-1)");
  }
  if (new Set(identity).size !== identity.length) throw new InvalidArgumentError(field, "names an argument twice (IDENT-2)");
  return identity as readonly string[];
}

/** The identity projection of a call's arguments (IDENT-1): the named members that are present, each whole. */
export function projectArguments(args: Record<string, unknown>, identity: readonly string[]): Record<string, unknown> {
  const projected: Record<string, unknown> = {};
  for (const name of identity) if (Object.hasOwn(args, name) && args[name] !== undefined) projected[name] = args[name];
  return projected;
}
