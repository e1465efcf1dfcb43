import { encodeEventStreamMessage } from "./eventstream.js";

/*
 * Amazon Bedrock's Converse API (`POST /model/{modelId}/converse-stream`, `/converse` without
 * streaming), as the AWS API reference describes it (ConverseStream, ConverseStreamOutput,
 * ContentBlockStartEvent, ContentBlockDeltaEvent, MessageStopEvent, ConverseStreamMetadataEvent)
 * and `@ai-sdk/amazon-bedrock` 4.0.186 reads it. The mock's model is the Messages API's: a
 * Converse request is read as the Messages request it stands for, and each Messages event the
 * script renders is sent as the Converse event at the same logical point (or as none), so the
 * same scripts and faults play on either route.
 */

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** A Converse ToolResultBlock's content (`[{text}|{json}]`) as a tool_result's text blocks. */
function toolResultContent(content: unknown): unknown {
  if (!Array.isArray(content)) return content;
  return content.map((c: unknown) => {
    if (isObject(c) && typeof c["text"] === "string") return { type: "text", text: c["text"] };
    if (isObject(c) && "json" in c) return { type: "text", text: JSON.stringify(c["json"]) };
    return c;
  });
}

/** One Converse ContentBlock as the Messages API's block; `undefined` for what the model does not read (cachePoint, reasoning). */
function contentBlock(block: unknown): unknown {
  if (!isObject(block)) return block;
  if (typeof block["text"] === "string") return { type: "text", text: block["text"] };
  const toolUse = block["toolUse"];
  if (isObject(toolUse)) return { type: "tool_use", id: toolUse["toolUseId"], name: toolUse["name"], input: toolUse["input"] };
  const toolResult = block["toolResult"];
  if (isObject(toolResult)) {
    return {
      type: "tool_result",
      tool_use_id: toolResult["toolUseId"],
      content: toolResultContent(toolResult["content"]),
      ...(toolResult["status"] === "error" ? { is_error: true } : {}),
    };
  }
  if ("cachePoint" in block || "reasoningContent" in block) return undefined;
  return block;
}

/**
 * A Converse request body (`messages` of `{role, content: [{text}|{toolUse}|{toolResult}]}`,
 * `system: [{text}]`, `inferenceConfig.maxTokens`, `toolConfig: {tools: [{toolSpec}], toolChoice}`)
 * as the Messages request it stands for. What does not fit is passed as it is, for the Messages
 * validation to refuse with its own message.
 */
export function messagesFromConverse(body: unknown, model: string, stream: boolean): unknown {
  if (!isObject(body)) return body;
  const out: Json = { model, stream };
  const messages = body["messages"];
  out["messages"] = Array.isArray(messages)
    ? messages.map((m: unknown) =>
        isObject(m) && Array.isArray(m["content"]) ? { role: m["role"], content: m["content"].map(contentBlock).filter((b) => b !== undefined) } : m,
      )
    : messages;
  const system = body["system"];
  if (Array.isArray(system)) {
    const texts = system.filter((s): s is { text: string } => isObject(s) && typeof s["text"] === "string").map((s) => s.text);
    if (texts.length > 0) out["system"] = texts.join("\n");
  }
  const inference = isObject(body["inferenceConfig"]) ? body["inferenceConfig"] : {};
  out["max_tokens"] = typeof inference["maxTokens"] === "number" ? inference["maxTokens"] : 4096;
  if (typeof inference["temperature"] === "number") out["temperature"] = inference["temperature"];
  const toolConfig = body["toolConfig"];
  if (isObject(toolConfig)) {
    const tools = toolConfig["tools"];
    if (Array.isArray(tools)) {
      out["tools"] = tools
        .filter((t: unknown) => !(isObject(t) && "cachePoint" in t))
        .map((t: unknown) => {
          const spec = isObject(t) ? t["toolSpec"] : undefined;
          if (!isObject(spec)) return t;
          const schema = isObject(spec["inputSchema"]) ? spec["inputSchema"]["json"] : undefined;
          return { name: spec["name"], ...(typeof spec["description"] === "string" ? { description: spec["description"] } : {}), input_schema: schema ?? { type: "object" } };
        });
    }
    const choice = toolConfig["toolChoice"];
    if (isObject(choice)) {
      if ("any" in choice) out["tool_choice"] = { type: "any" };
      else if (isObject(choice["tool"])) out["tool_choice"] = { type: "tool", name: choice["tool"]["name"] };
      else out["tool_choice"] = { type: "auto" };
    }
  }
  return out;
}

/** The Messages API's stop reason as Converse's (`end_turn`, `tool_use`, `max_tokens`, `stop_sequence`, `content_filtered`, ...). */
export function converseStopReason(stopReason: unknown): string {
  return stopReason === "refusal" ? "content_filtered" : typeof stopReason === "string" ? stopReason : "end_turn";
}

/**
 * The Converse event standing at a Messages event's point, as `[event type, payload]`, or
 * `undefined` where Converse sends nothing (a text block's start: Converse starts only tool-use
 * blocks; a ping). `message_delta` (the stop reason) is `messageStop`, `message_stop` (the last
 * event) is `metadata`, Converse's last event, with the usage.
 */
export function converseEventOf(data: Json, usage: { input: number; output: number }): [string, Json] | undefined {
  const index = data["index"];
  switch (data["type"]) {
    case "message_start":
      return ["messageStart", { role: "assistant" }];
    case "content_block_start": {
      const block = isObject(data["content_block"]) ? data["content_block"] : {};
      if (block["type"] !== "tool_use") return undefined;
      return ["contentBlockStart", { contentBlockIndex: index, start: { toolUse: { toolUseId: block["id"], name: block["name"] } } }];
    }
    case "content_block_delta": {
      const delta = isObject(data["delta"]) ? data["delta"] : {};
      switch (delta["type"]) {
        case "text_delta":
          return ["contentBlockDelta", { contentBlockIndex: index, delta: { text: delta["text"] } }];
        case "input_json_delta":
          return ["contentBlockDelta", { contentBlockIndex: index, delta: { toolUse: { input: delta["partial_json"] } } }];
        case "thinking_delta":
          return ["contentBlockDelta", { contentBlockIndex: index, delta: { reasoningContent: { text: delta["thinking"] } } }];
        case "signature_delta":
          return ["contentBlockDelta", { contentBlockIndex: index, delta: { reasoningContent: { signature: delta["signature"] } } }];
        default:
          return undefined;
      }
    }
    case "content_block_stop":
      return ["contentBlockStop", { contentBlockIndex: index }];
    case "message_delta": {
      const delta = isObject(data["delta"]) ? data["delta"] : {};
      return ["messageStop", { stopReason: converseStopReason(delta["stop_reason"]) }];
    }
    case "message_stop":
      return ["metadata", { usage: { inputTokens: usage.input, outputTokens: usage.output, totalTokens: usage.input + usage.output }, metrics: { latencyMs: 1 } }];
    default:
      return undefined;
  }
}

/** One Converse stream event in the AWS event-stream framing: `:event-type` names it, its payload is the event's JSON. */
export function converseFrame(eventType: string, payload: Json): Buffer {
  return encodeEventStreamMessage(
    { ":event-type": eventType, ":content-type": "application/json", ":message-type": "event" },
    Buffer.from(JSON.stringify(payload), "utf8"),
  );
}

/** The Messages API's whole response as Converse's (`output.message`, `stopReason`, `usage`, `metrics`). */
export function converseWhole(message: Json): Json {
  const content = Array.isArray(message["content"]) ? message["content"] : [];
  const usage = isObject(message["usage"]) ? message["usage"] : {};
  const input = typeof usage["input_tokens"] === "number" ? usage["input_tokens"] : 0;
  const output = typeof usage["output_tokens"] === "number" ? usage["output_tokens"] : 0;
  return {
    output: {
      message: {
        role: "assistant",
        content: content.flatMap((b: unknown): Json[] => {
          if (!isObject(b)) return [];
          if (b["type"] === "text") return [{ text: b["text"] }];
          if (b["type"] === "tool_use") return [{ toolUse: { toolUseId: b["id"], name: b["name"], input: b["input"] } }];
          return [];
        }),
      },
    },
    stopReason: converseStopReason(message["stop_reason"]),
    usage: { inputTokens: input, outputTokens: output, totalTokens: input + output },
    metrics: { latencyMs: 1 },
  };
}
