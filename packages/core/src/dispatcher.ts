import { hostname } from "node:os";
import { randomUUID } from "node:crypto";
import { canonicalize, type JsonValue } from "./canonical.js";
import {
  DispatchOnceError,
  DurabilityMismatchError,
  InFlightElsewhereError,
  OutcomeUnknownError,
  ResultNotStorableError,
  ToolError,
  ToolFailedError,
  ToolInputError,
  type StoredError,
} from "./errors.js";
import { deriveKey } from "./key.js";
import type { InFlightRow, Ledger, LedgerEffect, TerminalRow } from "./ledger.js";
import { utf8ByteLength } from "./memory-ledger.js";
import { ToolRegistry, type ToolDefinition } from "./registry.js";

/** Where a call sits: identical across every replay of the turn (spec §4). */
export interface TurnContext {
  conversationId: string;
  turnIndex: number;
}

export interface ToolCall {
  name: string;
  /** The arguments exactly as the model produced them. */
  input: unknown;
  /** The provider's call id (toolu_...), for logs only: it never enters the key (KEY-9). */
  callId?: string;
}

export interface DispatchOutcome {
  key: string;
  toolName: string;
  effect: ToolDefinition["effect"];
  ordinal: number;
  /** The parse of the stored JSON text: identical on the first run and every replay (DISPATCH-5). */
  result: JsonValue;
  resultJson: string;
  /** True when the result came from the ledger and the tool did not run in this call. */
  replayed: boolean;
}

export type DispatchEvent =
  | { type: "claimed"; key: string; toolName: string; ordinal: number; fence: number; takeover: boolean }
  | { type: "run_started"; key: string; toolName: string; ordinal: number }
  | { type: "run_finished"; key: string; toolName: string; ordinal: number; ok: boolean }
  | { type: "replayed"; key: string; toolName: string; ordinal: number; state: TerminalRow["state"] }
  | { type: "waiting"; key: string; toolName: string; ordinal: number; owner: string }
  | { type: "released"; key: string; toolName: string; ordinal: number }
  | { type: "lease_lost"; key: string; toolName: string; ordinal: number };

export interface DispatchLogger {
  warn(message: string, fields?: Record<string, unknown>): void;
}

export interface DispatcherOptions {
  tools: ToolRegistry | readonly ToolDefinition<any, any>[];
  ledger: Ledger;
  /** Identifies this process in ledger rows; diagnostics only. */
  owner?: string;
  /** Lease on a claim; renewed every third of it while the tool runs (LEDGER-9). Default 30 s. */
  leaseMs?: number;
  /** How long a caller waits on another attempt's in-flight claim before giving up (LEDGER-15). Default 10 s. */
  waitMs?: number;
  /** First back-off between re-claims while waiting; doubles up to `maxPollMs`. Default 20 ms. */
  pollMs?: number;
  /** Longest back-off between re-claims while waiting. Default 500 ms. */
  maxPollMs?: number;
  /**
   * Run unkeyed_write tools on a ledger that declares itself volatile. Refused by default
   * because such a ledger can forget a claim and nothing downstream would catch the repeat (LEDGER-14).
   */
  allowVolatileLedgerForUnkeyedWrites?: boolean;
  logger?: DispatchLogger;
  onEvent?: (event: DispatchEvent) => void;
}

/** What the stream side needs from a dispatcher; the guarded one and the unguarded baseline both provide it. */
export interface CallDispatcher {
  turn(context: TurnContext): TurnDispatch;
}

export interface TurnDispatch {
  /** Dispatch a call whose content_block_stop has arrived; ordinals follow the order of these calls. */
  dispatch(call: ToolCall): Promise<DispatchOutcome>;
}

const consoleLogger: DispatchLogger = {
  warn: (message, fields) => console.warn(`[dispatch-once] ${message}`, fields ?? ""),
};

interface PreparedCall {
  tool: ToolDefinition;
  args: unknown;
  /** Canonical text of what identifies the call: the identity projection or all arguments. */
  identityText: string;
  identityArgs: unknown;
}

/**
 * The exactly-once dispatcher (spec §7): validate, derive the key, claim before running,
 * run with the key, record the outcome, and answer repeats from the ledger.
 */
export class Dispatcher implements CallDispatcher {
  readonly registry: ToolRegistry;
  readonly ledger: Ledger;
  readonly owner: string;
  private readonly leaseMs: number;
  private readonly waitMs: number;
  private readonly pollMs: number;
  private readonly maxPollMs: number;
  private readonly logger: DispatchLogger;
  private readonly onEvent: ((event: DispatchEvent) => void) | undefined;

  constructor(options: DispatcherOptions) {
    this.registry = options.tools instanceof ToolRegistry ? options.tools : new ToolRegistry(options.tools);
    this.ledger = options.ledger;
    this.owner = options.owner ?? `${hostname()}:${process.pid}:${randomUUID().slice(0, 8)}`;
    this.leaseMs = options.leaseMs ?? 30_000;
    this.waitMs = options.waitMs ?? 10_000;
    this.pollMs = options.pollMs ?? 20;
    this.maxPollMs = options.maxPollMs ?? 500;
    this.logger = options.logger ?? consoleLogger;
    this.onEvent = options.onEvent;

    const unkeyed = this.registry.list().filter((t) => t.effect === "unkeyed_write").map((t) => t.name);
    if (unkeyed.length > 0 && this.ledger.capabilities.durability !== "durable") {
      const message =
        `unkeyed_write tools (${unkeyed.join(", ")}) need a durable ledger: this one can lose ` +
        `acknowledged rows, and nothing downstream would catch the repeat`;
      if (!options.allowVolatileLedgerForUnkeyedWrites) throw new DurabilityMismatchError(unkeyed, message);
      this.logger.warn(`${message} (allowed by allowVolatileLedgerForUnkeyedWrites)`, { tools: unkeyed });
    }
  }

  /** A per-attempt dispatcher that assigns ordinals in dispatch order (TURN-4, TURN-6). */
  turn(context: TurnContext): TurnDispatch {
    const seen = new Map<string, number>();
    return {
      dispatch: (call: ToolCall) => {
        // Everything up to the ordinal is synchronous, so ordinals follow call order.
        let prepared: PreparedCall;
        try {
          prepared = this.prepare(call);
        } catch (error) {
          return Promise.reject(error);
        }
        const identity = `${prepared.tool.name}|${prepared.identityText}`;
        const ordinal = seen.get(identity) ?? 0;
        seen.set(identity, ordinal + 1);
        if (ordinal > 0) {
          // Usually a model error, but it may be meant: run it and make it visible (DISPATCH-6).
          this.logger.warn("the same call appears more than once in one turn; running it again", {
            tool: prepared.tool.name,
            ordinal,
            conversationId: context.conversationId,
            turnIndex: context.turnIndex,
          });
        }
        return this.execute(prepared, context, ordinal);
      },
    };
  }

  /** Dispatch one call at an explicit ordinal (default 0). */
  async dispatch(call: ToolCall, context: TurnContext & { ordinal?: number }): Promise<DispatchOutcome> {
    return this.execute(this.prepare(call), context, context.ordinal ?? 0);
  }

  /** The key a call would get, without claiming or running anything. */
  keyFor(call: ToolCall, context: TurnContext & { ordinal?: number }): string {
    const prepared = this.prepare(call);
    return deriveKey({
      conversationId: context.conversationId,
      turnIndex: context.turnIndex,
      name: prepared.tool.name,
      args: prepared.identityArgs,
      ordinal: context.ordinal ?? 0,
    });
  }

  private prepare(call: ToolCall): PreparedCall {
    const tool = this.registry.get(call.name);
    const parsed = tool.input.safeParse(call.input);
    if (!parsed.success) {
      throw new ToolInputError(
        tool.name,
        parsed.error.issues.map((issue) => ({
          path: issue.path.map((p) => (typeof p === "symbol" ? String(p) : p)),
          message: issue.message,
        })),
      );
    }
    const args = parsed.data;
    const identityArgs = tool.identity === undefined ? args : project(args as Record<string, unknown>, tool.identity);
    return { tool, args, identityArgs, identityText: canonicalize(identityArgs) };
  }

  private async execute(prepared: PreparedCall, context: TurnContext, ordinal: number): Promise<DispatchOutcome> {
    const { tool } = prepared;
    const key = deriveKey({
      conversationId: context.conversationId,
      turnIndex: context.turnIndex,
      name: tool.name,
      args: prepared.identityArgs,
      ordinal,
    });
    const base = { key, toolName: tool.name, effect: tool.effect, ordinal };

    if (tool.effect === "read") {
      // Reads have no effect to guard (EFFECT-2): run every time, never claim.
      const result = await tool.run(prepared.args, this.runContext(tool.name, key, context, ordinal, new AbortController().signal));
      const resultJson = canonicalize(result === undefined ? null : result);
      return { ...base, result: JSON.parse(resultJson) as JsonValue, resultJson, replayed: false };
    }

    const effect: LedgerEffect = tool.effect;
    const started = Date.now();
    let delay = this.pollMs;
    for (;;) {
      const claim = await this.ledger.claim({ key, toolName: tool.name, effect, owner: this.owner, leaseMs: this.leaseMs });
      if (claim.outcome === "claimed") {
        this.emit({ type: "claimed", key, toolName: tool.name, ordinal, fence: claim.fence, takeover: claim.takeover });
        return this.runClaimed(prepared, context, ordinal, key, claim.fence, base);
      }
      const row = claim.row;
      if (row.state !== "in_flight") return this.replay(row, base);
      const waited = Date.now() - started;
      if (waited >= this.waitMs) throw new InFlightElsewhereError(key, waited);
      this.emit({ type: "waiting", key, toolName: tool.name, ordinal, owner: (row as InFlightRow).owner });
      await sleep(Math.min(delay, this.waitMs - waited));
      delay = Math.min(delay * 2, this.maxPollMs);
    }
  }

  private replay(row: TerminalRow, base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">): DispatchOutcome {
    this.emit({ type: "replayed", key: base.key, toolName: base.toolName, ordinal: base.ordinal, state: row.state });
    switch (row.state) {
      case "completed":
        return { ...base, result: JSON.parse(row.result) as JsonValue, resultJson: row.result, replayed: true };
      case "failed":
        throw new ToolFailedError(base.key, row.error, true);
      case "unknown":
        throw new OutcomeUnknownError(base.key, row.reason);
    }
  }

  private async runClaimed(
    prepared: PreparedCall,
    context: TurnContext,
    ordinal: number,
    key: string,
    fence: number,
    base: Omit<DispatchOutcome, "result" | "resultJson" | "replayed">,
  ): Promise<DispatchOutcome> {
    const { tool } = prepared;
    const lease = new AbortController();
    // Keep the claim while a slow tool runs (LEDGER-9); if it is lost, tell the tool.
    const renewal = setInterval(() => {
      this.ledger.renew(key, fence, this.leaseMs).catch((error: unknown) => {
        if (error instanceof DispatchOnceError && error.code === "stale_claim") {
          clearInterval(renewal);
          this.emit({ type: "lease_lost", key, toolName: tool.name, ordinal });
          lease.abort(error);
        } else {
          this.logger.warn("lease renewal failed; will retry", { key, error: String(error) });
        }
      });
    }, Math.max(1, Math.floor(this.leaseMs / 3)));
    renewal.unref?.();

    this.emit({ type: "run_started", key, toolName: tool.name, ordinal });
    let result: unknown;
    try {
      result = await tool.run(prepared.args, this.runContext(tool.name, key, context, ordinal, lease.signal));
    } catch (error) {
      clearInterval(renewal);
      this.emit({ type: "run_finished", key, toolName: tool.name, ordinal, ok: false });
      return this.recordFailure(error, tool, key, fence, base);
    }
    clearInterval(renewal);
    this.emit({ type: "run_finished", key, toolName: tool.name, ordinal, ok: true });

    let resultJson: string;
    try {
      // A tool that returns nothing has the result null.
      resultJson = canonicalize(result === undefined ? null : result);
      const size = utf8ByteLength(resultJson);
      if (size > this.ledger.capabilities.maxResultBytes) {
        throw new ResultNotStorableError(
          key,
          `${size} bytes exceeds the ledger's limit of ${this.ledger.capabilities.maxResultBytes}`,
        );
      }
      await this.ledger.complete(key, fence, resultJson);
    } catch (error) {
      if (!(error instanceof DispatchOnceError) || !["not_canonicalizable", "result_not_storable"].includes(error.code)) {
        throw error;
      }
      // The effect happened and its result cannot be kept: fail closed, never re-run (LEDGER-10).
      const notStorable =
        error instanceof ResultNotStorableError ? error : new ResultNotStorableError(key, error.message, { cause: error });
      await this.ledger.fail(key, fence, {
        name: "ResultNotStorableError",
        message: notStorable.message,
        code: "result_not_storable",
      });
      throw notStorable;
    }
    return { ...base, result: JSON.parse(resultJson) as JsonValue, resultJson, replayed: false };
  }

  private async recordFailure(
    error: unknown,
    tool: ToolDefinition,
    key: string,
    fence: number,
    base: { ordinal: number },
  ): Promise<never> {
    if (isToolError(error)) {
      if (error.disposition === "not_performed") {
        await this.ledger.release(key, fence);
        this.emit({ type: "released", key, toolName: tool.name, ordinal: base.ordinal });
        throw error;
      }
      const stored = toStoredError(error);
      await this.ledger.fail(key, fence, stored);
      throw new ToolFailedError(key, stored, false);
    }
    if (tool.effect === "keyed_write") {
      // Unknown outcome, but a re-run carries the same Idempotency-Key and collapses downstream.
      await this.ledger.release(key, fence);
      this.emit({ type: "released", key, toolName: tool.name, ordinal: base.ordinal });
      throw error;
    }
    // Unknown outcome and nothing downstream to collapse a repeat: never re-run (EFFECT-4).
    const reason = `tool_error: ${error instanceof Error ? error.message : String(error)}`;
    await this.ledger.markUnknown(key, fence, reason);
    throw Object.assign(new OutcomeUnknownError(key, reason), { cause: error });
  }

  private runContext(toolName: string, key: string, context: TurnContext, ordinal: number, signal: AbortSignal) {
    return {
      idempotencyKey: key,
      conversationId: context.conversationId,
      turnIndex: context.turnIndex,
      ordinal,
      toolName,
      signal,
    };
  }

  private emit(event: DispatchEvent): void {
    this.onEvent?.(event);
  }
}

/**
 * The handler the chapter starts from: runs every call it is handed, with no memory.
 * Exported only as a baseline for demos and tests; it is the bug this package fixes.
 */
export class UnguardedDispatcher implements CallDispatcher {
  private readonly registry: ToolRegistry;
  constructor(tools: ToolRegistry | readonly ToolDefinition<any, any>[]) {
    this.registry = tools instanceof ToolRegistry ? tools : new ToolRegistry(tools);
  }
  turn(context: TurnContext): TurnDispatch {
    return {
      dispatch: async (call) => {
        const tool = this.registry.get(call.name);
        const args = tool.input.parse(call.input);
        // Keyed on the provider's call id, as naive code does: it changes on every response.
        const key = call.callId ?? randomUUID();
        const result = await tool.run(args, {
          idempotencyKey: key,
          conversationId: context.conversationId,
          turnIndex: context.turnIndex,
          ordinal: 0,
          toolName: tool.name,
          signal: new AbortController().signal,
        });
        const resultJson = canonicalize(result === undefined ? null : result);
        return {
          key,
          toolName: tool.name,
          effect: tool.effect,
          ordinal: 0,
          result: JSON.parse(resultJson) as JsonValue,
          resultJson,
          replayed: false,
        };
      },
    };
  }
}

function project(args: Record<string, unknown>, fields: readonly string[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const field of fields) if (args[field] !== undefined) out[field] = args[field];
  return out;
}

function isToolError(error: unknown): error is ToolError {
  if (error instanceof ToolError) return true;
  // A ToolError from another copy of this package still carries its disposition.
  return (
    error instanceof Error &&
    error.name === "ToolError" &&
    ((error as ToolError).disposition === "definite" || (error as ToolError).disposition === "not_performed")
  );
}

function toStoredError(error: ToolError): StoredError {
  const stored: StoredError = { name: error.name, message: error.message };
  if (error.code !== undefined) stored.code = error.code;
  if (error.details !== undefined) {
    try {
      stored.details = JSON.parse(canonicalize(error.details));
    } catch {
      stored.details = String(error.details);
    }
  }
  return stored;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
