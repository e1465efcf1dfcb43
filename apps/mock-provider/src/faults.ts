import { z } from "zod";
import { MockProviderError } from "./errors.js";
import type { PlannedEvent } from "./render.js";
import type { Fault, FaultPosition, FaultRule, Timing } from "./types.js";

const nonNegativeInt = z.number().int().min(0);
const delay = z.number().min(0).max(600_000);

export const timingSchema = z
  .object({
    firstEventMs: delay,
    betweenEventsMs: delay,
    afterBlockStopMs: delay,
    beforeMessageStopMs: delay,
  })
  .strict();

const partialTiming = timingSchema.partial();

export const faultPositionSchema = z.union([
  z.object({ event: nonNegativeInt }).strict(),
  z.object({ toolUse: nonNegativeInt, afterFragment: nonNegativeInt }).strict(),
  z.object({ afterBlockStop: nonNegativeInt }).strict(),
  z.object({ afterToolUseStop: nonNegativeInt }).strict(),
  z.object({ beforeMessageStop: z.literal(true) }).strict(),
  z.object({ afterMessageStop: z.literal(true) }).strict(),
  z.object({ afterMs: delay }).strict(),
]);

const apiErrorSchema = z.object({ type: z.string().min(1), message: z.string() }).strict();

export const faultSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("reset"), at: faultPositionSchema, timing: partialTiming.optional() }).strict(),
  z.object({ kind: z.literal("tcp_reset"), at: faultPositionSchema, timing: partialTiming.optional() }).strict(),
  z.object({ kind: z.literal("clean_close"), at: faultPositionSchema, timing: partialTiming.optional() }).strict(),
  z.object({ kind: z.literal("truncate"), at: faultPositionSchema, timing: partialTiming.optional() }).strict(),
  z
    .object({
      kind: z.literal("error_event"),
      at: faultPositionSchema,
      error: apiErrorSchema.optional(),
      timing: partialTiming.optional(),
    })
    .strict(),
  z.object({ kind: z.literal("hold"), at: faultPositionSchema, timing: partialTiming.optional() }).strict(),
  z
    .object({
      kind: z.literal("status"),
      status: z.number().int().min(400).max(599),
      error: apiErrorSchema.optional(),
      retryAfterMs: z.number().min(0).optional(),
      shouldRetry: z.boolean().optional(),
      timing: partialTiming.optional(),
    })
    .strict(),
  z
    .object({
      kind: z.literal("splice"),
      at: faultPositionSchema,
      messageStart: z.boolean(),
      lead: z.string().min(1).optional(),
      timing: partialTiming.optional(),
    })
    .strict(),
  z.object({ kind: z.literal("repeat_call"), call: z.number().int().min(0), timing: partialTiming.optional() }).strict(),
  z.object({ kind: z.literal("timing"), timing: partialTiming }).strict(),
]);

export const faultRuleSchema = z
  .object({
    attempt: z.number().int().min(1).optional(),
    requestNumber: z.number().int().min(1).optional(),
    bodyContains: z.string().optional(),
    times: z.number().int().min(1).optional(),
    fault: faultSchema,
  })
  .strict();

function describeIssues(error: z.ZodError): string {
  return error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ");
}

/** Parse a fault from untrusted input (header, control endpoint, CLI). */
export function parseFault(input: unknown): Fault {
  const parsed = faultSchema.safeParse(input);
  if (!parsed.success) throw new MockProviderError("invalid_fault", `invalid fault: ${describeIssues(parsed.error)}`);
  return parsed.data as Fault;
}

export function parseFaultRule(input: unknown): FaultRule {
  const parsed = faultRuleSchema.safeParse(input);
  if (!parsed.success) throw new MockProviderError("invalid_fault", `invalid fault rule: ${describeIssues(parsed.error)}`);
  return parsed.data as FaultRule;
}

export function parseTiming(input: unknown): Partial<Timing> {
  const parsed = partialTiming.safeParse(input);
  if (!parsed.success) throw new MockProviderError("invalid_timing", `invalid timing: ${describeIssues(parsed.error)}`);
  return parsed.data;
}

/** Standard status texts and error types of the API, for `status` faults. */
export function errorForStatus(status: number): { type: string; message: string } {
  switch (status) {
    case 400:
      return { type: "invalid_request_error", message: "Invalid request" };
    case 401:
      return { type: "authentication_error", message: "invalid x-api-key" };
    case 403:
      return { type: "permission_error", message: "Your API key does not have permission to use the specified resource." };
    case 404:
      return { type: "not_found_error", message: "Not found" };
    case 413:
      return { type: "request_too_large", message: "Request exceeds the maximum allowed number of bytes." };
    case 429:
      return { type: "rate_limit_error", message: "Number of request tokens has exceeded your per-minute rate limit" };
    case 529:
      return { type: "overloaded_error", message: "Overloaded" };
    case 500:
      return { type: "api_error", message: "Internal server error" };
    case 503:
      return { type: "api_error", message: "Service unavailable" };
    default:
      return status >= 500 ? { type: "api_error", message: "Internal server error" } : { type: "invalid_request_error", message: "Invalid request" };
  }
}

function describePosition(position: FaultPosition): string {
  return JSON.stringify(position);
}

/**
 * The index of the event a positional fault replaces, or undefined for `afterMs` (a timer).
 * A position the response never reaches is an error, not a silent no-op: a test that cuts
 * "during the second call" of a turn with one call is mis-scripted and must fail loudly.
 */
export function resolvePosition(position: FaultPosition, events: readonly PlannedEvent[]): number | undefined {
  const unreachable = (why: string) =>
    new MockProviderError("fault_position_unreachable", `fault position ${describePosition(position)}: ${why}`);
  if ("afterMs" in position) return undefined;
  if ("event" in position) {
    if (position.event >= events.length) throw unreachable(`the response has only ${events.length} events`);
    return position.event;
  }
  if ("beforeMessageStop" in position) return events.findIndex((e) => e.type === "message_stop");
  // One past the last event: the turn is complete and only the transport fails (STREAM-1).
  if ("afterMessageStop" in position) return events.length;
  if ("toolUse" in position) {
    const start = events.findIndex((e) => e.type === "content_block_start" && e.toolUse === position.toolUse);
    if (start === -1) throw unreachable(`the turn has no tool_use block number ${position.toolUse}`);
    let last = start;
    for (let i = start + 1; i < events.length; i++) {
      const e = events[i]!;
      if (e.toolUse !== position.toolUse || e.type !== "content_block_delta") continue;
      if ((e.fragment ?? 0) > position.afterFragment) break;
      last = i;
    }
    return last + 1;
  }
  const stop =
    "afterBlockStop" in position
      ? events.findIndex((e) => e.type === "content_block_stop" && e.block === position.afterBlockStop)
      : events.findIndex((e) => e.type === "content_block_stop" && e.toolUse === position.afterToolUseStop);
  if (stop === -1) throw unreachable("the turn has no such content block");
  return stop + 1;
}

/**
 * The `repeat_call` fault's body: the events of tool_use block number `call`, unchanged but for
 * their content index (the next free one, past the response's last block), inserted before the
 * response's `message_delta`, as a relay that renumbers what it re-sends delivers the call again.
 */
export function repeatToolUse(events: readonly PlannedEvent[], call: number): PlannedEvent[] {
  const own = events.filter((e) => e.toolUse === call && e.type.startsWith("content_block_"));
  if (!own.some((e) => e.type === "content_block_stop")) {
    throw new MockProviderError("fault_not_applicable", `fault repeat_call: the turn has no completed tool_use block number ${call}`);
  }
  const index = Math.max(...events.map((e) => e.block ?? -1)) + 1;
  // Unmarked as the call's (`toolUse`, `fragment`): a position names the call's first delivery.
  const again = own.map(({ type, data }): PlannedEvent => ({ type, block: index, data: { ...data, index } }));
  const end = events.findIndex((e) => e.type === "message_delta");
  const at = end === -1 ? events.length : end;
  return [...events.slice(0, at), ...again, ...events.slice(at)];
}
