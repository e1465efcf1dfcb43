import { z } from "zod";
import { checkThinking } from "./thinking.js";

/*
 * The subset of the Messages API request the mock checks, with the API's own rules for tool
 * pairing: a runner that writes a tool_result for a call the stream never completed, or drops a
 * result, gets the same 400 here as from the real API. Unknown fields pass through, as new API
 * parameters appear faster than a mock is updated.
 */

const cacheControl = z.object({ type: z.literal("ephemeral") }).loose().nullish();

const textBlock = z
  .object({ type: z.literal("text"), text: z.string(), cache_control: cacheControl })
  .loose();

const toolUseBlock = z
  .object({
    type: z.literal("tool_use"),
    id: z.string().min(1),
    name: z.string().min(1),
    input: z.record(z.string(), z.unknown()),
    cache_control: cacheControl,
  })
  .loose();

const toolResultBlock = z
  .object({
    type: z.literal("tool_result"),
    tool_use_id: z.string().min(1),
    content: z.union([z.string(), z.array(z.object({ type: z.string() }).loose())]).optional(),
    is_error: z.boolean().optional(),
    cache_control: cacheControl,
  })
  .loose();

const OTHER_BLOCK_TYPES = [
  "image",
  "document",
  "search_result",
  "thinking",
  "redacted_thinking",
  "server_tool_use",
  "web_search_tool_result",
  "web_fetch_tool_result",
  "code_execution_tool_result",
  "bash_code_execution_tool_result",
  "text_editor_code_execution_tool_result",
  "tool_search_tool_result",
  "container_upload",
  // A system message's tool changes (the inline-tools beta; the SDK runner's addTools/removeTools).
  "tool_addition",
  "tool_removal",
] as const;

const otherBlock = z.object({ type: z.enum(OTHER_BLOCK_TYPES) }).loose();

const contentBlock = z.discriminatedUnion("type", [textBlock, toolUseBlock, toolResultBlock, otherBlock]);

const messageParam = z
  .object({
    role: z.enum(["user", "assistant", "system"]),
    content: z.union([z.string(), z.array(contentBlock)]),
  })
  .loose();

const customTool = z
  .object({
    type: z.literal("custom").nullish(),
    name: z.string().regex(/^[a-zA-Z0-9_-]{1,128}$/, "String should match pattern '^[a-zA-Z0-9_-]{1,128}$'"),
    description: z.string().optional(),
    input_schema: z.object({ type: z.literal("object") }).loose(),
  })
  .loose();

// Server tools (web search, bash, ...) carry a versioned `type` and no input_schema.
const serverTool = z
  .object({ type: z.string().refine((t) => t !== "custom"), name: z.string().min(1) })
  .loose();

const toolChoice = z.discriminatedUnion("type", [
  z.object({ type: z.literal("auto"), disable_parallel_tool_use: z.boolean().optional() }).loose(),
  z.object({ type: z.literal("any"), disable_parallel_tool_use: z.boolean().optional() }).loose(),
  z.object({ type: z.literal("none") }).loose(),
  z
    .object({ type: z.literal("tool"), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() })
    .loose(),
]);

export const messagesRequestSchema = z
  .object({
    model: z.string().min(1),
    max_tokens: z.number().int().min(1),
    messages: z.array(messageParam).min(1),
    system: z.union([z.string(), z.array(textBlock)]).optional(),
    stream: z.boolean().optional(),
    temperature: z.number().min(0).max(1).optional(),
    top_p: z.number().min(0).max(1).optional(),
    top_k: z.number().int().min(0).optional(),
    stop_sequences: z.array(z.string()).optional(),
    metadata: z.object({ user_id: z.string().nullish() }).loose().optional(),
    tools: z.array(z.union([customTool, serverTool])).optional(),
    tool_choice: toolChoice.optional(),
  })
  .loose();

export type MessagesRequest = z.infer<typeof messagesRequestSchema>;
export type MessageParam = MessagesRequest["messages"][number];
export type ContentBlockParam = Exclude<MessageParam["content"], string>[number];

export type RequestValidation =
  | { ok: true; request: MessagesRequest }
  | { ok: false; message: string };

function describePath(path: readonly PropertyKey[]): string {
  return path.map((p) => String(p)).join(".");
}

/** Parse and check a request body the way the API does; the message mimics the API's wording. */
export function validateMessagesRequest(body: unknown): RequestValidation {
  // The shapes SDKs send (what a chaos run sends thousands of times) are recognised by a plain
  // walk that accepts only what the schema certainly accepts; anything else, valid or not, goes
  // through the schema, whose messages the API's wording comes from. Same verdict, a fraction of
  // the CPU (the schema copies every object it passes).
  if (hasCommonShape(body)) {
    const problem = checkConversation(body) ?? checkThinking(body);
    return problem ? { ok: false, message: problem } : { ok: true, request: body };
  }
  return validateWithSchema(body);
}

/** The schema's verdict alone (no plain-walk path): what `validateMessagesRequest` must agree with. */
export function validateWithSchema(body: unknown): RequestValidation {
  const parsed = messagesRequestSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    if (!issue) return { ok: false, message: "invalid request body" };
    const missing = issue.code === "invalid_type" && issue.message.includes("received undefined");
    const path = describePath(issue.path);
    const text = missing ? "Field required" : issue.message;
    return { ok: false, message: path ? `${path}: ${text}` : text };
  }
  const problem = checkConversation(parsed.data) ?? checkThinking(parsed.data);
  return problem ? { ok: false, message: problem } : { ok: true, request: parsed.data };
}

type Plain = Record<string, unknown>;
const isPlain = (value: unknown): value is Plain =>
  typeof value === "object" && value !== null && !Array.isArray(value) && Object.getPrototypeOf(value) === Object.prototype;
const isNonEmptyString = (value: unknown): value is string => typeof value === "string" && value.length > 0;
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/;
/** Top-level fields the plain walk does not check: present, the schema decides. */
const SCHEMA_ONLY_FIELDS = ["temperature", "top_p", "top_k", "stop_sequences", "metadata", "tool_choice"] as const;

/**
 * True only when `messagesRequestSchema` certainly accepts the body: text, tool_use and
 * tool_result blocks without cache_control, custom tools, a string system prompt. False says
 * nothing about validity (the schema then decides).
 */
function hasCommonShape(body: unknown): body is MessagesRequest {
  if (!isPlain(body)) return false;
  if (!isNonEmptyString(body["model"])) return false;
  if (!Number.isSafeInteger(body["max_tokens"]) || (body["max_tokens"] as number) < 1) return false;
  if (body["system"] !== undefined && typeof body["system"] !== "string") return false;
  if (body["stream"] !== undefined && typeof body["stream"] !== "boolean") return false;
  for (const field of SCHEMA_ONLY_FIELDS) if (body[field] !== undefined) return false;
  const messages = body["messages"];
  if (!Array.isArray(messages) || messages.length === 0) return false;
  for (const message of messages) {
    if (!isPlain(message)) return false;
    const role = message["role"];
    if (role !== "user" && role !== "assistant" && role !== "system") return false;
    const content = message["content"];
    if (typeof content === "string") continue;
    if (!Array.isArray(content)) return false;
    for (const block of content) if (!isCommonBlock(block)) return false;
  }
  const tools = body["tools"];
  if (tools !== undefined) {
    if (!Array.isArray(tools)) return false;
    for (const tool of tools) {
      if (!isPlain(tool) || tool["type"] !== undefined) return false;
      if (typeof tool["name"] !== "string" || !TOOL_NAME.test(tool["name"])) return false;
      if (tool["description"] !== undefined && typeof tool["description"] !== "string") return false;
      const schema = tool["input_schema"];
      if (!isPlain(schema) || schema["type"] !== "object") return false;
    }
  }
  return true;
}

function isCommonBlock(block: unknown): boolean {
  if (!isPlain(block) || block["cache_control"] !== undefined) return false;
  switch (block["type"]) {
    case "text":
      return typeof block["text"] === "string";
    case "tool_use":
      return isNonEmptyString(block["id"]) && isNonEmptyString(block["name"]) && isPlain(block["input"]);
    case "tool_result":
      return (
        isNonEmptyString(block["tool_use_id"]) &&
        (block["content"] === undefined || typeof block["content"] === "string") &&
        (block["is_error"] === undefined || typeof block["is_error"] === "boolean")
      );
    default:
      return false;
  }
}

function blocksOf(message: MessageParam): ContentBlockParam[] {
  return typeof message.content === "string" ? [] : message.content;
}

function isEmptyContent(message: MessageParam): boolean {
  if (typeof message.content === "string") return message.content.length === 0;
  return message.content.length === 0;
}

function checkConversation(request: MessagesRequest): string | undefined {
  const { messages } = request;
  const toolNames = new Set<string>();
  for (const tool of request.tools ?? []) {
    if (toolNames.has(tool.name)) return "tools: Tool names must be unique.";
    toolNames.add(tool.name);
  }
  const seenToolUseIds = new Set<string>();
  let usesToolBlocks = false;
  for (let i = 0; i < messages.length; i++) {
    const message = messages[i]!;
    const isLast = i === messages.length - 1;
    if (isEmptyContent(message) && !(isLast && message.role === "assistant")) {
      return `messages.${i}: all messages must have non-empty content except for the optional final assistant message`;
    }
    const blocks = blocksOf(message);
    for (let j = 0; j < blocks.length; j++) {
      const block = blocks[j]!;
      if (block.type === "tool_use" || block.type === "tool_result") usesToolBlocks = true;
      if (block.type === "tool_use") {
        if (message.role !== "assistant") return `messages.${i}.content.${j}: tool_use blocks may only appear in assistant messages`;
        const id = (block as { id: string }).id;
        if (seenToolUseIds.has(id)) return `messages.${i}.content.${j}: \`tool_use\` ids must be unique`;
        seenToolUseIds.add(id);
      }
      if (block.type === "tool_result" && message.role !== "user") {
        return `messages.${i}.content.${j}: tool_result blocks may only appear in user messages`;
      }
    }
    // Every tool_use must be answered by a tool_result in the very next message.
    if (message.role === "assistant") {
      const ids = blocks.filter((b) => b.type === "tool_use").map((b) => (b as { id: string }).id);
      if (ids.length > 0) {
        const next = messages[i + 1];
        const answered = new Set(
          next && next.role === "user"
            ? blocksOf(next)
                .filter((b) => b.type === "tool_result")
                .map((b) => (b as { tool_use_id: string }).tool_use_id)
            : [],
        );
        const missing = ids.filter((id) => !answered.has(id));
        if (missing.length > 0) {
          return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(", ")}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
        }
      }
    }
    // Every tool_result must answer a tool_use of the message right before it.
    if (message.role === "user") {
      const prev = messages[i - 1];
      const offered = new Set(
        prev && prev.role === "assistant"
          ? blocksOf(prev)
              .filter((b) => b.type === "tool_use")
              .map((b) => (b as { id: string }).id)
          : [],
      );
      for (let j = 0; j < blocks.length; j++) {
        const block = blocks[j]!;
        if (block.type !== "tool_result") continue;
        const id = (block as { tool_use_id: string }).tool_use_id;
        if (!offered.has(id)) {
          return `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
        }
      }
    }
  }
  if (usesToolBlocks && toolNames.size === 0 && (request.tools ?? []).length === 0) {
    return "Requests which include `tool_use` or `tool_result` blocks must define tools.";
  }
  return undefined;
}
