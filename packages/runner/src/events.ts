import { InvalidArgumentError, describeValue } from "@dispatch-once/core";

/** What a member of a stream event must hold for an accumulator to read it. */
export type EventMemberKind = "object" | "string" | "number" | "array";

/** The members an accumulator reads from one kind of event (or block, delta, item), by name. */
export type EventShape = Readonly<Record<string, EventMemberKind>>;

function holds(value: unknown, kind: EventMemberKind): boolean {
  if (kind === "array") return Array.isArray(value);
  if (kind === "object") return typeof value === "object" && value !== null && !Array.isArray(value);
  return typeof value === kind;
}

/**
 * Refuses a part of a stream event (the event itself, its block, delta or item at `path`) whose
 * members `shape` names are not of their kinds, with an InvalidArgumentError naming the member
 * (ERR-1): read anyway, a missing member was a bare TypeError, or worse was appended as the text
 * "undefined" and committed as the model's words.
 */
export function checkEventMembers(value: object, shape: EventShape | undefined, path: string, eventType: string): void {
  if (shape === undefined) return;
  for (const member in shape) {
    const kind = shape[member]!;
    const given = (value as Record<string, unknown>)[member];
    if (!holds(given, kind)) throw new InvalidArgumentError(`${path}.${member}`, `must be ${kind === "array" ? "an array" : kind === "object" ? "an object" : `a ${kind}`} in a ${eventType} event, got ${describeValue(given)}`);
  }
}

/**
 * A nested part of an event typed by its own `type` (a content block, a delta, an output item):
 * an object with a string `type`, whose members `shapes[type]` names are checked. A type with no
 * shape is not read by the accumulator, and passes.
 */
export function checkEventPart(value: unknown, shapes: Readonly<Record<string, EventShape>>, path: string, eventType: string): void {
  if (!holds(value, "object")) throw new InvalidArgumentError(path, `must be an object in a ${eventType} event, got ${describeValue(value)}`);
  const type = (value as { type?: unknown }).type;
  if (typeof type !== "string") throw new InvalidArgumentError(`${path}.type`, `must be a string in a ${eventType} event, got ${describeValue(type)}`);
  if (Object.hasOwn(shapes, type)) checkEventMembers(value as object, shapes[type], path, eventType);
}

/**
 * What every accumulator's apply() checks first: the event is an object with a string `type`,
 * and the members its kind's shape names are there. An event type with no shape (a newer API's,
 * or one the accumulator does not read, such as `ping`) passes and is ignored, as the providers
 * add event types without notice.
 */
export function checkStreamEvent(event: unknown, shapes: Readonly<Record<string, EventShape>>): asserts event is { type: string } {
  if (!holds(event, "object")) throw new InvalidArgumentError("event", `must be a stream event (an object with a string type), got ${describeValue(event)}`);
  const type = (event as { type?: unknown }).type;
  if (typeof type !== "string") throw new InvalidArgumentError("event.type", `must be a string, got ${describeValue(type)}`);
  if (Object.hasOwn(shapes, type)) checkEventMembers(event as object, shapes[type], "event", type);
}
