import { InvalidArgumentError } from "@dispatch-once/core";

/**
 * A call of the current turn that an earlier request of it gave an ordinal (AISDK-9): it ran
 * (its history shows a result), or it was approved (the request that carries the approval runs
 * it, or ran it).
 */
export interface TurnHistoryCall {
  toolCallId: string;
  toolName: string;
  input: unknown;
  /** Approved and without a result yet: the AI SDK executes it in this request. */
  pending: boolean;
}

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
 * Counted: a wrapped call's part with a result (UI `output-available`, `output-error` with its
 * input; model `tool-call` with a `tool-result`), except a denial (`output-denied`, an
 * `execution-denied` result) of a call nobody approved; and an approved call (it is given its
 * ordinal in the request that carries the approval, even if the AI SDK then denies it on
 * revalidation). Not counted: calls waiting for input or an approval, a call the AI SDK found
 * invalid (UI `output-error` without `input`: never executed), provider-executed calls.
 */
export function turnCallsOf(messages: unknown, field: string): TurnHistoryCall[] {
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
  // Model messages: results and approvals are matched to the turn's tool-call parts by id.
  const modelCalls: { part: Obj; at: string }[] = [];
  const results = new Map<string, boolean>(); // toolCallId → denied (an execution-denied result)
  const approvalCall = new Map<string, string>(); // approvalId → toolCallId
  const approved = new Map<string, boolean>(); // approvalId → approved
  for (let i = start; i < messages.length; i++) {
    const message = messages[i] as Obj;
    const at = `${field}[${i}]`;
    const role = message["role"];
    if (role !== "assistant" && role !== "tool") continue;
    if (Array.isArray(message["parts"])) {
      (message["parts"] as unknown[]).forEach((part, j) => uiPart(part, `${at}.parts[${j}]`, calls));
      continue;
    }
    const content = message["content"];
    if (typeof content === "string" && role === "assistant") continue;
    if (!Array.isArray(content)) throw new InvalidArgumentError(`${at}.content`, `must be an array of parts (${role === "tool" ? "a tool" : "an assistant"} ModelMessage), or the message must have parts (a UIMessage)`);
    content.forEach((part: unknown, j) => {
      const partAt = `${at}.content[${j}]`;
      if (!isObject(part)) throw new InvalidArgumentError(partAt, "must be a message part object");
      switch (part["type"]) {
        case "tool-call":
          string(part, "toolCallId", partAt);
          string(part, "toolName", partAt);
          if (part["providerExecuted"] !== true) modelCalls.push({ part, at: partAt });
          break;
        case "tool-result": {
          const id = string(part, "toolCallId", partAt);
          const output = part["output"];
          if (!isObject(output)) throw new InvalidArgumentError(`${partAt}.output`, "must be the AI SDK's tool result output ({ type, ... })");
          const type = string(output, "type", `${partAt}.output`);
          results.set(id, (results.get(id) ?? true) && type === "execution-denied");
          break;
        }
        case "tool-approval-request":
          approvalCall.set(string(part, "approvalId", partAt), string(part, "toolCallId", partAt));
          break;
        case "tool-approval-response": {
          const id = string(part, "approvalId", partAt);
          if (typeof part["approved"] !== "boolean") throw new InvalidArgumentError(`${partAt}.approved`, "must be a boolean");
          approved.set(id, part["approved"] === true || approved.get(id) === true);
          break;
        }
        default:
          break; // text, reasoning, files: nothing about calls
      }
    });
  }
  if (modelCalls.length > 0) {
    const approvedCalls = new Set<string>();
    for (const [approvalId, toolCallId] of approvalCall) if (approved.get(approvalId) === true) approvedCalls.add(toolCallId);
    for (const { part, at } of modelCalls) {
      const id = part["toolCallId"] as string;
      const denied = results.get(id);
      const isApproved = approvedCalls.has(id);
      if (!isApproved && (denied === undefined || denied)) continue;
      if (!("input" in part)) throw new InvalidArgumentError(`${at}.input`, "must be the call's input");
      calls.push({ toolCallId: id, toolName: part["toolName"] as string, input: part["input"], pending: isApproved && denied === undefined });
    }
  }
  return calls;
}

/** One part of a UIMessage: a tool part (`tool-<name>` or `dynamic-tool`) is read; any other is not. */
function uiPart(part: unknown, at: string, calls: TurnHistoryCall[]): void {
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
  let pending = false;
  switch (state) {
    case "input-streaming":
    case "input-available":
    case "approval-requested":
      return;
    case "approval-responded":
      if (!approvedOf(part, at)) return;
      pending = true;
      break;
    case "output-denied":
      // Denied by the user: never run. Approved, then denied by the AI SDK's revalidation: it
      // was given its ordinal in the request that carried the approval.
      if (!approvedOf(part, at)) return;
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
  calls.push({ toolCallId, toolName, input: part["input"], pending });
}

function approvedOf(part: Obj, at: string): boolean {
  const approval = part["approval"];
  if (!isObject(approval) || typeof approval["approved"] !== "boolean") {
    throw new InvalidArgumentError(`${at}.approval`, `must be { id, approved: boolean } in state ${String(part["state"])}`);
  }
  return approval["approved"];
}
