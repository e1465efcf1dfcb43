import type { ToolDefinition } from "./registry.js";

/**
 * The prefix of the tool names under which Dispatch-Once's own packages keep bookkeeping rows in
 * an application's ledger (the AI SDK wrapper's recorded repairs, AISDK-11, and its records of a
 * turn's user messages, AISDK-17). Such a row holds no effect. A prefix, not a list of names, so
 * that a bookkeeping row added later is never another release's tool name (spec EFFECT-8).
 */
export const RECORD_ROW_PREFIX = "dispatch-once-";

/**
 * Whether a ledger row's tool name is a bookkeeping name (EFFECT-8): such a row holds no effect,
 * is never told to a user as one, and is not an operator's to settle. An application's tool can
 * never have such a name: the registry refuses it.
 */
export function isRecordRowName(name: string): boolean {
  return typeof name === "string" && name.startsWith(RECORD_ROW_PREFIX);
}

/** Shared by every copy of core (ESM and CJS), unlike a WeakSet. */
const RECORD_TOOL_BRAND: unique symbol = Symbol.for("dispatch-once.record-tool") as never;

/**
 * For Dispatch-Once's own packages only (the `./internal` entry): defines a bookkeeping tool under
 * a reserved name (EFFECT-8), which `defineTool` and the registry refuse for anyone else.
 */
export function markRecordTool<T extends ToolDefinition<any, any>>(definition: T): T {
  if (typeof definition !== "object" || definition === null || !isRecordRowName(definition.name)) return definition;
  // Not enumerable: the registry's member check lists enumerable string keys only.
  Object.defineProperty(definition, RECORD_TOOL_BRAND, { value: true });
  return definition;
}

/** Whether `definition` was marked by `markRecordTool`. */
export function isRecordTool(definition: object): boolean {
  return (definition as Record<symbol, unknown>)[RECORD_TOOL_BRAND] === true;
}
