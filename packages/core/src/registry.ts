import { z } from "zod";
import { InvalidToolDefinitionError, UnknownToolError, describeValue } from "./errors/index.js";
import { TOOL_NAME_PATTERN } from "./key.js";
import { isRecordRowName, isRecordTool, RECORD_ROW_PREFIX } from "./record-rows.js";
import type { EffectClass } from "./ledger.js";

/** What a tool's run function receives besides its arguments. */
export interface ToolRunContext {
  /**
   * The call's idempotency key (spec DISPATCH-4). Forward it as the `Idempotency-Key`
   * header to any downstream API that accepts one.
   */
  idempotencyKey: string;
  conversationId: string;
  turnIndex: number;
  ordinal: number;
  toolName: string;
  /**
   * Aborted when this attempt loses its claim (lease lost to another attempt), and when the run
   * outlives its `runTimeoutMs` (DISPATCH-18; the dispatch has then answered `in_flight_elsewhere`).
   * A request cut by it may still have reached the downstream: report its failure as `"unknown"`.
   */
  signal: AbortSignal;
}

/** What a reconcile probe receives besides the call's stored arguments. */
export interface ReconcileContext {
  /** The call's idempotency key: the one its run forwarded downstream (look the effect up by it). */
  idempotencyKey: string;
  toolName: string;
  /**
   * Why the dispatcher asks: the run's response was lost (tool_error), its claim was lost while it
   * ran (lease_lost), the downstream holds the key for another request (request_mismatch), the
   * result could not be kept (result_not_storable), or someone asked about an unknown row (on_demand).
   */
  cause: ReconcileCause;
  /** Aborted when the dispatcher stops waiting for the answer (the claim is lost). */
  signal: AbortSignal;
}

export type ReconcileCause = "tool_error" | "lease_lost" | "request_mismatch" | "result_not_storable" | "on_demand";

/**
 * A probe's answer (RECON-1). `performed` carries the effect's result as the downstream reports
 * it; `not_performed` says the downstream has no trace of it NOW (a request still in transit
 * may land later, which is why the dispatcher trusts it only where a re-run is guarded anyway);
 * `unknown` says the probe cannot tell.
 */
export type ReconcileVerdict<Result = unknown> =
  | { outcome: "performed"; result: Result }
  | { outcome: "not_performed" }
  | { outcome: "unknown"; reason?: string };

export interface ToolDefinition<Schema extends z.ZodType = z.ZodType, Result = unknown> {
  name: string;
  description?: string;
  /** Declared once, here; there is no default (spec EFFECT-1). */
  effect: EffectClass;
  input: Schema;
  /**
   * Top-level argument names that identify the effect (spec IDENT-1). When set, only these
   * enter the key, so a free-text field the model re-words on a retry (a memo) does not
   * mint a new key. It must name every field that tells two effects apart (IDENT-2).
   */
  identity?: readonly (keyof z.output<Schema> & string)[];
  /**
   * What a call whose key is already stored with other arguments gets (spec IDENT-3, IDENT-6).
   * `"use_first"`: it is the same call re-worded outside its identity, so it gets the stored
   * outcome, or a re-run of the stored request. `"refuse"`: the key was assigned by a client (an
   * MCP client's key, a UUID per user action), so other arguments are another request; it is
   * refused with `idempotency_key_reused`, never run and never answered with the other request's
   * result. Writes only.
   * @default "use_first"
   * @example defineTool({ name: "pay", effect: "keyed_write", input, identity: ["key"], onRequestDiffers: "refuse", run })
   */
  onRequestDiffers?: "use_first" | "refuse";
  /**
   * With `onRequestDiffers: "refuse"`: the top-level argument names whose difference refuses a
   * call (spec IDENT-9). A call under a stored key that differs only in other fields is that
   * request re-worded (a memo the model re-wrote on a regenerate) and follows IDENT-3: the stored
   * outcome, or a re-run of the stored request. An MCP guard compares a tool's declared identity
   * this way, so a client's key stays its own while a re-worded memo is not refused.
   * @default every field (any difference refuses)
   * @example defineTool({ name: "pay", effect: "keyed_write", input, identity: ["key"], onRequestDiffers: "refuse", comparedFields: ["key", "identityArgs"], run })
   */
  comparedFields?: readonly (keyof z.output<Schema> & string)[];
  /**
   * How long one run of this tool may take, in milliseconds, before its dispatch stops waiting
   * (spec DISPATCH-18): an integer from 1 to 2^31 - 1, or `Infinity` for no bound. Overrides the
   * dispatcher's `runTimeoutMs` for this tool (a slow export that legitimately takes an hour; a
   * read that should give up within seconds).
   * @default the dispatcher's runTimeoutMs (300000)
   * @example defineTool({ name: "export_report", effect: "keyed_write", input, runTimeoutMs: 3_600_000, run })
   */
  runTimeoutMs?: number;
  /**
   * The names this write tool had before (spec IDENT-11), oldest first or in any order. A rename
   * changes every key (the name is part of it, KEY-1), so a turn that ran under an old name and
   * is run again after the deploy would meet no row and run its effect again; with the old names
   * listed, the re-run (IDENT-10) finds the rows they made and dispatches the call under the one
   * that is its. A former name cannot be another tool's name or former name (the registry refuses).
   * Keep a name listed while rows made under it are within retention.
   * @example defineTool({ name: "send_payment", formerNames: ["pay"], effect: "keyed_write", input, run })
   */
  formerNames?: readonly string[];
  run(args: z.output<Schema>, context: ToolRunContext): Promise<Result> | Result;
  /**
   * Optional probe (RECON-1): asks the downstream whether this call's effect happened (by the
   * idempotency key, a reference, or a search). Called with the call's stored request, only after
   * its run has ended, before the dispatcher would leave the outcome unknown, and on demand.
   */
  reconcile?(args: z.output<Schema>, context: ReconcileContext): Promise<ReconcileVerdict<Result>> | ReconcileVerdict<Result>;
}

/**
 * Declare a tool. The definition is checked here, so that a bad one is refused where it is
 * written, and again when it is added to a registry (which also takes definitions made without
 * this function); the checks against its schema (identity fields, IDENT-2) run in the dispatcher.
 */
export function defineTool<Schema extends z.ZodType, Result>(
  definition: ToolDefinition<Schema, Result>,
): ToolDefinition<Schema, Result> {
  checkDefinition(definition);
  return definition;
}

export interface ToolAuditEntry {
  name: string;
  effect: EffectClass;
  /** Whether a replay of the turn could perform this tool's effect twice without Dispatch-Once. */
  canDoubleFire: boolean;
  /** How the dispatcher protects it. */
  protection: string;
  identity: readonly string[] | "all arguments" | "n/a";
}

/** The JSON Schema form the Messages API expects in `tools`. */
export interface ProviderToolSchema {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
}

const EFFECTS: readonly EffectClass[] = ["read", "keyed_write", "unkeyed_write"];

/**
 * One place that lists every tool with its schema and effect class, so "which of our
 * tools can double-fire" is answered by reading one registry (spec EFFECT-5).
 */
export class ToolRegistry {
  private readonly tools = new Map<string, ToolDefinition>();
  /** Each former name (IDENT-11) and the tool that declares it. */
  private readonly formerNames = new Map<string, ToolDefinition>();

  constructor(tools: readonly ToolDefinition<any, any>[] = []) {
    // Anything else failed with a bare TypeError ("tools is not iterable"), or added nothing.
    if (!Array.isArray(tools)) throw new InvalidToolDefinitionError(`a ToolRegistry takes an array of tool definitions, got ${describeValue(tools)}`);
    for (const tool of tools) this.add(tool);
  }

  add(tool: ToolDefinition<any, any>): this {
    checkDefinition(tool);
    if (this.tools.has(tool.name)) {
      throw new InvalidToolDefinitionError(`tool ${tool.name} is registered twice`);
    }
    // IDENT-11: a name is one tool's, now or before. An unrelated tool under a renamed tool's old
    // name would have its rows read as the renamed tool's (and the renamed tool's as its own).
    const holder = this.formerNames.get(tool.name);
    if (holder !== undefined) {
      throw new InvalidToolDefinitionError(`tool ${tool.name}: its name is a former name of tool ${holder.name} (IDENT-11); give the new tool another name`);
    }
    for (const former of tool.formerNames ?? []) {
      if (this.tools.has(former)) {
        throw new InvalidToolDefinitionError(`tool ${tool.name}: former name ${former} is the name of a registered tool (IDENT-11)`);
      }
      const other = this.formerNames.get(former);
      if (other !== undefined) {
        throw new InvalidToolDefinitionError(`tool ${tool.name}: former name ${former} is also a former name of tool ${other.name} (IDENT-11); a name's rows can be one tool's only`);
      }
    }
    this.tools.set(tool.name, tool as ToolDefinition);
    for (const former of tool.formerNames ?? []) this.formerNames.set(former, tool as ToolDefinition);
    return this;
  }

  /** The tool that lists `formerName` among its former names (IDENT-11), if any. */
  renamed(formerName: string): ToolDefinition | undefined {
    return this.formerNames.get(formerName);
  }

  get(name: string): ToolDefinition {
    const tool = this.tools.get(name);
    if (tool === undefined) throw new UnknownToolError(name);
    return tool;
  }

  has(name: string): boolean {
    return this.tools.has(name);
  }

  list(): ToolDefinition[] {
    return [...this.tools.values()];
  }

  audit(): ToolAuditEntry[] {
    return this.list().map((tool) => {
      const identity = tool.effect === "read" ? "n/a" : (tool.identity ?? "all arguments");
      switch (tool.effect) {
        case "read":
          return { name: tool.name, effect: tool.effect, canDoubleFire: false, protection: "none needed (no effect)", identity };
        case "keyed_write":
          return {
            name: tool.name,
            effect: tool.effect,
            canDoubleFire: true,
            protection: "ledger claim + Idempotency-Key forwarded downstream",
            identity,
          };
        case "unkeyed_write":
          return {
            name: tool.name,
            effect: tool.effect,
            canDoubleFire: true,
            protection: "ledger claim only (durable ledger required; unknown outcomes never re-run)",
            identity,
          };
      }
    });
  }

  /** Tool declarations for the provider request, generated from the same zod schemas. */
  providerSchemas(): ProviderToolSchema[] {
    return this.list().map((tool) => {
      const { $schema: _drop, ...schema } = z.toJSONSchema(tool.input, { io: "input" }) as Record<string, unknown>;
      return {
        name: tool.name,
        ...(tool.description !== undefined ? { description: tool.description } : {}),
        input_schema: schema,
      };
    });
  }
}

/** Every member a tool definition may have; any other is refused, naming it. */
const DEFINITION_MEMBERS: { readonly [Member in keyof Required<ToolDefinition>]: true } = {
  name: true,
  description: true,
  effect: true,
  input: true,
  identity: true,
  onRequestDiffers: true,
  comparedFields: true,
  runTimeoutMs: true,
  formerNames: true,
  run: true,
  reconcile: true,
};

function checkDefinition(tool: ToolDefinition<any, any>): void {
  if (typeof tool !== "object" || tool === null) throw new InvalidToolDefinitionError(`a tool definition must be an object, got ${describeValue(tool)}`);
  if (typeof tool.name !== "string" || !TOOL_NAME_PATTERN.test(tool.name)) {
    throw new InvalidToolDefinitionError(
      `tool name ${JSON.stringify(tool.name)} must match ${TOOL_NAME_PATTERN.source}`,
    );
  }
  // EFFECT-8: a row under a reserved name is read as bookkeeping (never listed as an effect, never
  // an operator's to settle): an app's tool there would have its effects hidden.
  if (isRecordRowName(tool.name) && !isRecordTool(tool)) {
    throw new InvalidToolDefinitionError(`tool name ${JSON.stringify(tool.name)} is reserved: names beginning with "${RECORD_ROW_PREFIX}" are Dispatch-Once's own bookkeeping rows, which hold no effect (EFFECT-8); rename the tool`);
  }
  // A misspelt member is never ignored: `identiy` left the tool keyed by all its arguments, so a
  // replay that re-worded the memo got a new key and paid again (IDENT-1, ERR-1).
  const unknown = Object.keys(tool).find((member) => !Object.hasOwn(DEFINITION_MEMBERS, member));
  if (unknown !== undefined) {
    throw new InvalidToolDefinitionError(`tool ${tool.name}: ${JSON.stringify(unknown)} is not a member of a tool definition (its members: ${Object.keys(DEFINITION_MEMBERS).join(", ")})`);
  }
  if (tool.description !== undefined && typeof tool.description !== "string") {
    throw new InvalidToolDefinitionError(`tool ${tool.name}: description must be a string, got ${describeValue(tool.description)}`);
  }
  if (!EFFECTS.includes(tool.effect)) {
    throw new InvalidToolDefinitionError(
      `tool ${tool.name} must declare effect as one of ${EFFECTS.join(", ")}, got ${JSON.stringify(tool.effect)}`,
    );
  }
  // Duck-typed: a schema from another copy of zod is still a schema (instanceof is not).
  if (typeof (tool.input as { safeParse?: unknown } | undefined)?.safeParse !== "function") {
    throw new InvalidToolDefinitionError(`tool ${tool.name} needs a zod schema as input`);
  }
  if (typeof tool.run !== "function") {
    throw new InvalidToolDefinitionError(`tool ${tool.name} needs a run function`);
  }
  // setTimeout's own limit: a longer delay would fire at once (Node's TimeoutOverflowWarning).
  if (tool.runTimeoutMs !== undefined && tool.runTimeoutMs !== Infinity && !(Number.isSafeInteger(tool.runTimeoutMs) && tool.runTimeoutMs >= 1 && tool.runTimeoutMs <= 2 ** 31 - 1)) {
    throw new InvalidToolDefinitionError(`tool ${tool.name}: runTimeoutMs must be a whole number of milliseconds from 1 to ${2 ** 31 - 1}, or Infinity, got ${describeValue(tool.runTimeoutMs)}`);
  }
  if (tool.reconcile !== undefined) {
    if (typeof tool.reconcile !== "function") {
      throw new InvalidToolDefinitionError(`tool ${tool.name}: reconcile must be a function`);
    }
    if (tool.effect === "read") {
      throw new InvalidToolDefinitionError(`tool ${tool.name} is a read; it has no effect to reconcile`);
    }
  }
  if (tool.onRequestDiffers !== undefined) {
    if (tool.onRequestDiffers !== "use_first" && tool.onRequestDiffers !== "refuse") {
      throw new InvalidToolDefinitionError(
        `tool ${tool.name}: onRequestDiffers must be "use_first" or "refuse", got ${JSON.stringify(tool.onRequestDiffers)}`,
      );
    }
    if (tool.effect === "read") {
      throw new InvalidToolDefinitionError(`tool ${tool.name} is a read; onRequestDiffers only applies to writes`);
    }
  }
  if (tool.comparedFields !== undefined) {
    if (tool.onRequestDiffers !== "refuse") {
      throw new InvalidToolDefinitionError(`tool ${tool.name}: comparedFields only applies with onRequestDiffers: "refuse"`);
    }
    checkFieldList(tool, "comparedFields", tool.comparedFields);
  }
  if (tool.formerNames !== undefined) checkFormerNames(tool, tool.formerNames);
  if (tool.identity !== undefined) {
    if (tool.effect === "read") {
      throw new InvalidToolDefinitionError(`tool ${tool.name} is a read; identity only applies to writes`);
    }
    checkFieldList(tool, "identity", tool.identity);
  }
}

/** IDENT-11: distinct tool names, none the tool's own, on a write. */
function checkFormerNames(tool: ToolDefinition<any, any>, names: readonly string[]): void {
  if (!Array.isArray(names)) throw new InvalidToolDefinitionError(`tool ${tool.name}: formerNames must be an array of tool names, got ${describeValue(names)}`);
  // A read claims no rows (EFFECT-2): there is nothing of its old name to find.
  if (tool.effect === "read") throw new InvalidToolDefinitionError(`tool ${tool.name} is a read; formerNames only applies to writes`);
  for (const name of names) {
    if (typeof name !== "string" || !TOOL_NAME_PATTERN.test(name)) {
      throw new InvalidToolDefinitionError(`tool ${tool.name}: former name ${JSON.stringify(name)} must match ${TOOL_NAME_PATTERN.source}`);
    }
    if (name === tool.name) throw new InvalidToolDefinitionError(`tool ${tool.name}: formerNames lists its own name`);
    if (isRecordRowName(name)) throw new InvalidToolDefinitionError(`tool ${tool.name}: former name ${JSON.stringify(name)} is reserved: names beginning with "${RECORD_ROW_PREFIX}" are Dispatch-Once's own bookkeeping rows (EFFECT-8)`);
  }
  if (new Set(names).size !== names.length) throw new InvalidToolDefinitionError(`tool ${tool.name}: formerNames names a tool twice`);
}

/** IDENT-2 for an identity, IDENT-9 for compared fields: a non-empty list of distinct top-level fields of the schema. */
function checkFieldList(tool: ToolDefinition<any, any>, option: "identity" | "comparedFields", list: readonly string[]): void {
  const shape = (tool.input as { shape?: unknown }).shape;
  if (typeof shape !== "object" || shape === null) {
    throw new InvalidToolDefinitionError(`tool ${tool.name} declares ${option}, so its input must be a z.object`);
  }
  const fields = Object.keys(shape);
  if (!Array.isArray(list)) throw new InvalidToolDefinitionError(`tool ${tool.name}: ${option} must be an array of field names`);
  if (list.length === 0) throw new InvalidToolDefinitionError(`tool ${tool.name} declares an empty ${option}`);
  for (const field of list) {
    if (!fields.includes(field)) {
      throw new InvalidToolDefinitionError(
        `tool ${tool.name}: ${option} field ${JSON.stringify(field)} is not in its schema (${fields.join(", ")})`,
      );
    }
  }
  if (new Set(list).size !== list.length) {
    throw new InvalidToolDefinitionError(`tool ${tool.name}: ${option} names a field twice`);
  }
}
