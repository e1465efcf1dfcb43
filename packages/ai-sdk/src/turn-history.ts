import { InvalidArgumentError } from "@dispatch-once/core";

/**
 * A call of the current turn that an earlier request of it gave an ordinal (AISDK-9): it ran
 * (its history shows a result), or it was approved (the request that carries the approval runs
 * it, or ran it). Where things happened is told by message index: the request that carried the
 * messages up to index p saw the call as counted when `doneAt <= p || approvedAt <= p`, and as
 * approved without a result (executed by that request) when `approvedAt <= p < resolvedAt`.
 */
export interface TurnHistoryCall {
  toolCallId: string;
  toolName: string;
  input: unknown;
  /** The message of its first result that is not a denial (Infinity: none). */
  doneAt: number;
  /** The message of its first approval (Infinity: none). */
  approvedAt: number;
  /** The message of its first result of any kind, a denial included (Infinity: none). */
  resolvedAt: number;
  /** The AI SDK executes it in this request: approved in the last message, without a result there. */
  executesNow: boolean;
  /**
   * The history shows it answered with a result (UI `output-available`; a model `tool-result`
   * whose output is not an error or a denial): its effect is told there (AISDK-14).
   */
  answered: boolean;
}

interface ModelCall {
  part: Obj;
  at: string;
  doneAt: number;
  approvedAt: number;
  resolvedAt: number;
  /** Approved in the last message, which has no result for it (the AI SDK's own rule). */
  approvedLast: boolean;
  /** Denied in the last message (a tool message), which has no result for it. */
  deniedLast: number | undefined;
  resultLast: boolean;
  answered: boolean;
}

/** Model tool-result output types that do not tell a call's effect as done: an error, a denial. */
const MODEL_NOT_ANSWERED = new Set(["error-text", "error-json", "execution-denied"]);

const UI_STATES = new Set(["input-streaming", "input-available", "approval-requested", "approval-responded", "output-available", "output-error", "output-denied"]);

type Obj = Record<string, unknown>;
const isObject = (value: unknown): value is Obj => typeof value === "object" && value !== null && !Array.isArray(value);

function string(owner: Obj, key: string, field: string): string {
  const value = owner[key];
  if (typeof value !== "string") throw new InvalidArgumentError(`${field}.${key}`, `must be a string, as the AI SDK writes it (got ${typeof value})`);
  return value;
}

/**
 * The calls of the turn being answered that hold an ordinal, read from the request's messages
 * (`UIMessage[]` or `ModelMessage[]`, message by message): the messages after the last user
 * message, or all of them when there is none (`turnMessages` given without its user message).
 * Earlier turns are not read. What cannot be read is refused with `InvalidArgumentError` naming
 * the field (`messages[3].parts[1].state`): a part misread would seed a wrong ordinal silently.
 *
 * `deniedNow` receives the calls the last message denies (the AI SDK reports them denied in this
 * request), with `approvedAt` at that message, as if it had approved them (AISDK-12).
 *
 * Counted: a wrapped call's part with a result (UI `output-available`, `output-error` with its
 * input; model `tool-call` with a `tool-result`), except a denial (`output-denied`, an
 * `execution-denied` result) of a call nobody approved; and an approved call (it is given its
 * ordinal in the request that carries the approval, even if the AI SDK then denies it on
 * revalidation). Not counted: calls waiting for input or an approval, a call the AI SDK found
 * invalid (UI `output-error` without `input`: never executed), provider-executed calls.
 */
export function turnCallsOf(messages: unknown, field: string, deniedNow: TurnHistoryCall[] = []): TurnHistoryCall[] {
  if (!Array.isArray(messages)) throw new InvalidArgumentError(field, "must be the app's message array (UIMessage[] or ModelMessage[])");
  let start = 0;
  for (let i = messages.length - 1; i >= 0; i--) {
    const message: unknown = messages[i];
    if (!isObject(message)) throw new InvalidArgumentError(`${field}[${i}]`, "must be a message object");
    if (typeof message["role"] !== "string") throw new InvalidArgumentError(`${field}[${i}].role`, "must be a string");
    if (message["role"] === "user") {
      start = i + 1;
      break;
    }
  }
  const calls: TurnHistoryCall[] = [];
  // Model messages: each result and approval belongs to the latest call before it with its
  // toolCallId (a provider may number its calls per response, so an id can recur in a turn).
  const modelCalls: ModelCall[] = [];
  const byId = new Map<string, ModelCall[]>();
  const latest = (id: string, unresolved: boolean) => {
    const list = byId.get(id);
    if (list === undefined) return undefined;
    for (let k = list.length - 1; k >= 0; k--) if (!unresolved || list[k]!.resolvedAt === Infinity) return list[k];
    return unresolved ? list[list.length - 1] : undefined;
  };
  const approvals = new Map<string, ModelCall>(); // approvalId → its call
  for (let i = start; i < messages.length; i++) {
    const message = messages[i] as Obj;
    const at = `${field}[${i}]`;
    const role = message["role"];
    if (role !== "assistant" && role !== "tool") continue;
    if (Array.isArray(message["parts"])) {
      (message["parts"] as unknown[]).forEach((part, j) => uiPart(part, `${at}.parts[${j}]`, i, calls, i === messages.length - 1 ? deniedNow : undefined));
      continue;
    }
    const content = message["content"];
    const last = i === messages.length - 1;
    if (typeof content === "string" && role === "assistant") continue;
    if (!Array.isArray(content)) throw new InvalidArgumentError(`${at}.content`, `must be an array of parts (${role === "tool" ? "a tool" : "an assistant"} ModelMessage), or the message must have parts (a UIMessage)`);
    content.forEach((part: unknown, j) => {
      const partAt = `${at}.content[${j}]`;
      if (!isObject(part)) throw new InvalidArgumentError(partAt, "must be a message part object");
      switch (part["type"]) {
        case "tool-call": {
          const id = string(part, "toolCallId", partAt);
          string(part, "toolName", partAt);
          if (part["providerExecuted"] === true) break;
          const modelCall: ModelCall = { part, at: partAt, doneAt: Infinity, approvedAt: Infinity, resolvedAt: Infinity, approvedLast: false, deniedLast: undefined, resultLast: false, answered: false };
          modelCalls.push(modelCall);
          byId.set(id, [...(byId.get(id) ?? []), modelCall]);
          break;
        }
        case "tool-result": {
          const id = string(part, "toolCallId", partAt);
          const output = part["output"];
          if (!isObject(output)) throw new InvalidArgumentError(`${partAt}.output`, "must be the AI SDK's tool result output ({ type, ... })");
          const type = string(output, "type", `${partAt}.output`);
          const owner = latest(id, true);
          if (owner !== undefined) {
            owner.resolvedAt = Math.min(owner.resolvedAt, i);
            if (type !== "execution-denied") owner.doneAt = Math.min(owner.doneAt, i);
            if (!MODEL_NOT_ANSWERED.has(type)) owner.answered = true;
            if (last) owner.resultLast = true;
          }
          break;
        }
        case "tool-approval-request": {
          const approvalId = string(part, "approvalId", partAt);
          const owner = latest(string(part, "toolCallId", partAt), false);
          if (owner !== undefined) approvals.set(approvalId, owner);
          break;
        }
        case "tool-approval-response": {
          const owner = approvals.get(string(part, "approvalId", partAt));
          if (typeof part["approved"] !== "boolean") throw new InvalidArgumentError(`${partAt}.approved`, "must be a boolean");
          if (owner !== undefined && part["approved"]) {
            owner.approvedAt = Math.min(owner.approvedAt, i);
            if (last && role === "tool") owner.approvedLast = true;
          } else if (owner !== undefined && last && role === "tool") {
            owner.deniedLast = i;
          }
          break;
        }
        default:
          break; // text, reasoning, files: nothing about calls
      }
    });
  }
  for (const { part, at, doneAt, approvedAt, resolvedAt, approvedLast, deniedLast, resultLast, answered } of modelCalls) {
    if (deniedLast !== undefined && !resultLast && approvedAt === Infinity && "input" in part) {
      deniedNow.push({ toolCallId: part["toolCallId"] as string, toolName: part["toolName"] as string, input: part["input"], doneAt: Infinity, approvedAt: deniedLast, resolvedAt: Infinity, executesNow: true, answered: false });
    }
    if (doneAt === Infinity && approvedAt === Infinity) continue;
    if (!("input" in part)) throw new InvalidArgumentError(`${at}.input`, "must be the call's input");
    const call = { toolCallId: part["toolCallId"] as string, toolName: part["toolName"] as string, input: part["input"] };
    calls.push({ ...call, doneAt, approvedAt, resolvedAt, executesNow: approvedLast && !resultLast, answered });
  }
  return calls;
}

/** One part of a UIMessage: a tool part (`tool-<name>` or `dynamic-tool`) is read; any other is not. */
function uiPart(part: unknown, at: string, index: number, calls: TurnHistoryCall[], deniedNow: TurnHistoryCall[] | undefined): void {
  if (!isObject(part)) throw new InvalidArgumentError(at, "must be a message part object");
  const type = part["type"];
  if (typeof type !== "string") throw new InvalidArgumentError(`${at}.type`, "must be a string");
  let toolName: string;
  if (type === "dynamic-tool") toolName = string(part, "toolName", at);
  else if (type.startsWith("tool-")) toolName = type.slice("tool-".length);
  else return;
  const toolCallId = string(part, "toolCallId", at);
  const state = part["state"];
  if (typeof state !== "string" || !UI_STATES.has(state)) {
    throw new InvalidArgumentError(`${at}.state`, `must be one of the AI SDK's tool part states (${[...UI_STATES].join(", ")}), got ${JSON.stringify(state) ?? "undefined"}`);
  }
  if (part["providerExecuted"] === true) return;
  let approved = false;
  let resolved = true;
  let done = true;
  switch (state) {
    case "input-streaming":
    case "input-available":
    case "approval-requested":
      return;
    case "approval-responded":
      if (!approvedOf(part, at)) {
        // Denied in the last message: the AI SDK reports it denied in this request.
        if (deniedNow !== undefined && "input" in part && part["input"] !== undefined) {
          deniedNow.push({ toolCallId, toolName, input: part["input"], doneAt: Infinity, approvedAt: index, resolvedAt: Infinity, executesNow: true, answered: false });
        }
        return;
      }
      approved = true;
      resolved = false;
      done = false;
      break;
    case "output-denied":
      // Denied by the user: never run. Approved, then denied by the AI SDK's revalidation: it
      // was given its ordinal in the request that carried the approval.
      if (!approvedOf(part, at)) return;
      approved = true;
      done = false;
      break;
    case "output-error":
      // The AI SDK's own refusal of an invalid call keeps its raw input beside an undefined
      // `input`: it never reached execute. A call that ran keeps its input.
      if (part["input"] === undefined) return;
      break;
    default: // output-available
      break;
  }
  if (!("input" in part) || part["input"] === undefined) throw new InvalidArgumentError(`${at}.input`, `must be the call's input (state ${state})`);
  calls.push({
    toolCallId,
    toolName,
    input: part["input"],
    doneAt: done ? index : Infinity,
    approvedAt: approved ? index : Infinity,
    resolvedAt: resolved ? index : Infinity,
    executesNow: approved && !resolved,
    answered: state === "output-available",
  });
}

function approvedOf(part: Obj, at: string): boolean {
  const approval = part["approval"];
  if (!isObject(approval) || typeof approval["approved"] !== "boolean") {
    throw new InvalidArgumentError(`${at}.approval`, `must be { id, approved: boolean } in state ${String(part["state"])}`);
  }
  return approval["approved"];
}
