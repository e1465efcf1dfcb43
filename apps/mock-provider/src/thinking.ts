import { createHash } from "node:crypto";
import type { ContentBlockParam, MessageParam, MessagesRequest } from "./request-schema.js";

/*
 * Extended thinking, as far as a runner can get it wrong. With `thinking` enabled every response
 * opens with a `thinking` block whose `signature` vouches for its text, and the API refuses a
 * conversation that drops it where it is required or alters it (the wording is the API's). A
 * runner that commits only text and tool_use blocks then breaks the conversation on its next
 * request, which is what these checks catch.
 */

const DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking";

/** True when the request asks for thinking: each response then opens with a thinking block. */
export function thinkingEnabled(request: MessagesRequest): boolean {
  const type = (request as { thinking?: { type?: unknown } }).thinking?.type;
  return type === "enabled" || type === "adaptive";
}

/**
 * The mock's signature of a thinking text. The real one is opaque and encrypted; this one only has
 * to change when the text does, so an altered or re-assembled block is refused as the API refuses it.
 */
export function signThinking(thinking: string): string {
  return createHash("sha256").update(`mock-provider thinking\0${thinking}`).digest("base64");
}

function blocksOf(message: MessageParam): ContentBlockParam[] {
  return typeof message.content === "string" ? [] : message.content;
}

/**
 * The API's test string: a request with thinking on whose user messages carry it gets a response
 * with a `redacted_thinking` block (reasoning the safety systems encrypted), as the real API does.
 */
export const REDACTED_THINKING_TRIGGER = "ANTHROPIC_MAGIC_STRING_TRIGGER_REDACTED_THINKING_46C9A13E193C177646C7398A98432ECCCE4C1253";

/** True when the request's user messages carry the trigger and thinking is on. */
export function redactedThinkingRequested(request: MessagesRequest): boolean {
  if (!thinkingEnabled(request)) return false;
  return request.messages.some(
    (m) => m.role === "user" && (typeof m.content === "string" ? m.content.includes(REDACTED_THINKING_TRIGGER) : m.content.some((b) => b.type === "text" && (b as { text: string }).text.includes(REDACTED_THINKING_TRIGGER))),
  );
}

/**
 * The `data` of a redacted_thinking block: opaque to the client, as the API's encrypted reasoning
 * is, and checked when it comes back, so a runner that alters, re-encodes or re-assembles it is
 * refused. `nonce` makes each response's data its own.
 */
export function sealRedactedThinking(nonce: string): string {
  const mac = createHash("sha256").update(`mock-provider redacted\0${nonce}`).digest("base64url");
  return Buffer.from(`redacted\0${nonce}\0${mac}`, "utf8").toString("base64");
}

function isSealedRedactedThinking(data: string): boolean {
  const decoded = Buffer.from(data, "base64");
  if (decoded.toString("base64") !== data) return false; // not canonical base64: altered
  const [tag, nonce, mac, ...rest] = decoded.toString("utf8").split("\0");
  return tag === "redacted" && nonce !== undefined && mac !== undefined && rest.length === 0 && sealRedactedThinking(nonce) === data;
}

const isThinking = (block: ContentBlockParam | undefined): boolean => block?.type === "thinking" || block?.type === "redacted_thinking";

/** The request's `thinking` parameter, checked as the API checks it. */
function checkThinkingConfig(request: MessagesRequest): string | undefined {
  const thinking = (request as { thinking?: unknown }).thinking;
  if (thinking === undefined) return undefined;
  if (thinking === null || typeof thinking !== "object" || Array.isArray(thinking)) return "thinking: Input should be a valid dictionary or object";
  const { type, budget_tokens: budget } = thinking as { type?: unknown; budget_tokens?: unknown };
  if (type !== "enabled" && type !== "disabled" && type !== "adaptive") {
    return `thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'`;
  }
  if (type !== "enabled") return undefined;
  if (budget === undefined) return "thinking.enabled.budget_tokens: Field required";
  if (typeof budget !== "number" || !Number.isInteger(budget)) return "thinking.enabled.budget_tokens: Input should be a valid integer";
  if (budget < 1024) return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024";
  if (request.max_tokens <= budget) return "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation at https://docs.claude.com/en/docs/build-with-claude/extended-thinking#max-tokens-and-context-window-size";
  return undefined;
}

/**
 * The API's rules for thinking blocks in a request: its `thinking` parameter; in an assistant
 * message that has thinking blocks they come first; each thinking block carries the signature of
 * its own text; and with thinking enabled, the assistant message of the lastmost tool_use /
 * tool_result pair starts with a thinking block.
 */
export function checkThinking(request: MessagesRequest): string | undefined {
  const config = checkThinkingConfig(request);
  if (config !== undefined) return config;
  const { messages } = request;
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!;
    if (message.role !== "assistant") continue;
    const blocks = blocksOf(message);
    if (blocks.some(isThinking) && !isThinking(blocks[0])) {
      return `messages.${i}.content.0: If an assistant message contains any thinking blocks, the first block must be thinking or redacted_thinking. Found ${blocks[0]!.type}.`;
    }
    for (let j = 0; j < blocks.length; j++) {
      const block = blocks[j] as { type: string; thinking?: unknown; signature?: unknown; data?: unknown };
      if (block.type === "thinking") {
        if (typeof block.thinking !== "string") return `messages.${i}.content.${j}.thinking.thinking: Field required`;
        if (typeof block.signature !== "string") return `messages.${i}.content.${j}.thinking.signature: Field required`;
        if (block.signature !== signThinking(block.thinking)) return `messages.${i}.content.${j}: Invalid \`signature\` in \`thinking\` block`;
      } else if (block.type === "redacted_thinking") {
        if (typeof block.data !== "string") return `messages.${i}.content.${j}.redacted_thinking.data: Field required`;
        if (!isSealedRedactedThinking(block.data)) return `messages.${i}.content.${j}: Invalid \`data\` in \`redacted_thinking\` block`;
      }
    }
  }
  if (!thinkingEnabled(request)) return undefined;
  const last = messages[messages.length - 1];
  const before = messages[messages.length - 2];
  if (last?.role === "user" && blocksOf(last).some((b) => b.type === "tool_result") && before?.role === "assistant") {
    const first = blocksOf(before)[0];
    if (!isThinking(first)) {
      return `messages.${messages.length - 2}.content.0.type: Expected \`thinking\` or \`redacted_thinking\`, but found \`${first?.type ?? "nothing"}\`. When \`thinking\` is enabled, a final \`assistant\` message must start with a thinking block (preceeding the lastmost set of \`tool_use\` and \`tool_result\` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable \`thinking\`. Please consult our documentation at ${DOCS}`;
    }
  }
  return undefined;
}
