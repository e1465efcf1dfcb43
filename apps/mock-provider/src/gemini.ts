import { signThinking } from "./thinking.js";

/*
 * Google's Gemini API (`POST /v1beta/models/{model}:streamGenerateContent?alt=sse`,
 * `:generateContent` without streaming), and Gemini on Vertex AI (`POST
 * /v1beta1/projects/{p}/locations/{l}/publishers/google/models/{model}:streamGenerateContent`,
 * or `/v1/publishers/google/models/...` in express mode), as Google's API reference describes it
 * (GenerateContentRequest, GenerateContentResponse, Candidate.FinishReason, the `x-goog-api-key`
 * header, the `{error: {code, message, status}}` envelope) and `@ai-sdk/google` 3.0.129 reads it.
 * The mock's model is the Messages API's: a Gemini request is read as the Messages request it
 * stands for, and each Messages event the script renders is sent as the Gemini chunk at the same
 * logical point (or as none), so the same scripts and faults play on this route.
 */

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** Google's canonical error status for an HTTP status (google.rpc.Code, as the Gemini API's troubleshooting page lists them). */
export function geminiErrorStatus(status: number): string {
  switch (status) {
    case 400:
      return "INVALID_ARGUMENT";
    case 401:
      return "UNAUTHENTICATED";
    case 403:
      return "PERMISSION_DENIED";
    case 404:
      return "NOT_FOUND";
    case 429:
      return "RESOURCE_EXHAUSTED";
    case 503:
    case 529:
      return "UNAVAILABLE";
    case 504:
      return "DEADLINE_EXCEEDED";
    default:
      return "INTERNAL";
  }
}

/** Google's error envelope. */
export function geminiError(code: number, message: string): { error: { code: number; message: string; status: string } } {
  return { error: { code, message, status: geminiErrorStatus(code) } };
}

/** A Messages API error type (as the scripts' faults name them) as the HTTP code Google would send it with. */
export function geminiErrorCode(type: string): number {
  switch (type) {
    case "overloaded_error":
      return 503;
    case "rate_limit_error":
      return 429;
    case "invalid_request_error":
      return 400;
    case "authentication_error":
      return 401;
    case "permission_error":
      return 403;
    case "not_found_error":
      return 404;
    default:
      return 500;
  }
}

/**
 * A declaration's `parameters` (the API's OpenAPI Schema subset) as JSON Schema: its `type` is the
 * `Type` enum, which the API takes in upper case (`OBJECT`, `STRING`, ...) and `@google/genai`
 * always sends so; lower-cased at every level (`properties`, `items`, `anyOf`). `parametersJsonSchema`
 * is JSON Schema already.
 */
function jsonSchemaOf(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(jsonSchemaOf);
  if (!isObject(schema)) return schema;
  const out: Json = {};
  for (const [k, v] of Object.entries(schema)) {
    if (k === "type" && typeof v === "string") out[k] = v.toLowerCase();
    else if (k === "properties" && isObject(v)) out[k] = Object.fromEntries(Object.entries(v).map(([name, s]) => [name, jsonSchemaOf(s)]));
    else if (k === "items" || k === "anyOf") out[k] = jsonSchemaOf(v);
    else out[k] = v;
  }
  return out;
}

/**
 * A Gemini request body (`contents` of `{role: user|model, parts: [{text}|{functionCall}|{functionResponse}]}`,
 * `systemInstruction: {parts: [{text}]}`, `tools: [{functionDeclarations}]`, `toolConfig.functionCallingConfig`,
 * `generationConfig.maxOutputTokens`) as the Messages request it stands for. A call without an `id`
 * (the Gemini API makes them optional) is paired with its response by name and order. What does not
 * fit is passed as it is, for the Messages validation to refuse with its own message.
 */
export function messagesFromGemini(body: unknown, model: string, stream: boolean): unknown {
  if (!isObject(body)) return body;
  const out: Json = { model, stream };
  const contents = body["contents"];
  const pending = new Map<string, string[]>();
  let calls = 0;
  out["messages"] = Array.isArray(contents)
    ? contents.map((c: unknown) => {
        if (!isObject(c) || !Array.isArray(c["parts"])) return c;
        // A model turn's thought parts (`thought: true`) are its thinking block; the turn's thoughtSignature (on
        // whichever part carries it: the first call, a text) is that block's signature, checked as the Messages API checks it.
        const thoughts = c["parts"].filter((p): p is Json => isObject(p) && p["thought"] === true && typeof p["text"] === "string");
        const signature = c["parts"].find((p): p is Json => isObject(p) && typeof p["thoughtSignature"] === "string")?.["thoughtSignature"];
        const thinking = thoughts.length > 0 ? [{ type: "thinking", thinking: thoughts.map((p) => String(p["text"])).join(""), signature }] : [];
        const content = c["parts"].flatMap((p: unknown): unknown[] => {
          if (!isObject(p)) return [p];
          if (p["thought"] === true && typeof p["text"] === "string") return [];
          if (typeof p["text"] === "string") return p["text"] === "" ? [] : [{ type: "text", text: p["text"] }];
          const call = p["functionCall"];
          if (isObject(call)) {
            const name = String(call["name"]);
            const id = typeof call["id"] === "string" ? call["id"] : `gemini_call_${++calls}`;
            pending.set(name, [...(pending.get(name) ?? []), id]);
            return [{ type: "tool_use", id, name, input: call["args"] ?? {} }];
          }
          const response = p["functionResponse"];
          if (isObject(response)) {
            const name = String(response["name"]);
            const queue = pending.get(name) ?? [];
            const id = typeof response["id"] === "string" ? response["id"] : (queue[0] ?? `gemini_call_${name}`);
            pending.set(name, queue.filter((q) => q !== id));
            const result = isObject(response["response"]) ? response["response"] : {};
            const text = "content" in result ? result["content"] : result;
            return [{ type: "tool_result", tool_use_id: id, content: typeof text === "string" ? text : JSON.stringify(text) }];
          }
          if ("thoughtSignature" in p) return [];
          return [p];
        });
        return { role: c["role"] === "model" ? "assistant" : c["role"], content: [...thinking, ...content] };
      })
    : contents;
  const system = body["systemInstruction"];
  if (isObject(system) && Array.isArray(system["parts"])) {
    const texts = system["parts"].filter((s): s is { text: string } => isObject(s) && typeof s["text"] === "string").map((s) => s.text);
    if (texts.length > 0) out["system"] = texts.join("\n");
  }
  const generation = isObject(body["generationConfig"]) ? body["generationConfig"] : {};
  out["max_tokens"] = typeof generation["maxOutputTokens"] === "number" ? generation["maxOutputTokens"] : 8192;
  if (typeof generation["temperature"] === "number") out["temperature"] = generation["temperature"];
  // Thoughts asked for (`thinkingConfig.includeThoughts`): the Messages request's thinking, so the script's turn opens with one.
  const thinkingConfig = isObject(generation["thinkingConfig"]) ? generation["thinkingConfig"] : {};
  if (thinkingConfig["includeThoughts"] === true) {
    const budget = typeof thinkingConfig["thinkingBudget"] === "number" && thinkingConfig["thinkingBudget"] > 1024 ? thinkingConfig["thinkingBudget"] : 1024;
    out["thinking"] = { type: "enabled", budget_tokens: budget };
    if ((out["max_tokens"] as number) <= budget) out["max_tokens"] = budget + 8192;
  }
  const tools = body["tools"];
  if (Array.isArray(tools)) {
    // Provider-run tools (googleSearch, codeExecution, urlContext) have no Messages counterpart: the mock does not run them.
    out["tools"] = tools.flatMap((t: unknown) =>
      isObject(t) && Array.isArray(t["functionDeclarations"])
        ? t["functionDeclarations"].map((d: unknown) => {
            if (!isObject(d)) return d;
            const schema = isObject(d["parameters"]) ? jsonSchemaOf(d["parameters"]) : isObject(d["parametersJsonSchema"]) ? d["parametersJsonSchema"] : { type: "object" };
            return { name: d["name"], ...(typeof d["description"] === "string" ? { description: d["description"] } : {}), input_schema: schema };
          })
        : [],
    );
  }
  const config = isObject(body["toolConfig"]) ? body["toolConfig"]["functionCallingConfig"] : undefined;
  if (isObject(config)) {
    const allowed = config["allowedFunctionNames"];
    if (config["mode"] === "ANY" && Array.isArray(allowed) && allowed.length === 1) out["tool_choice"] = { type: "tool", name: allowed[0] };
    else if (config["mode"] === "ANY") out["tool_choice"] = { type: "any" };
    else if (config["mode"] === "NONE") out["tool_choice"] = { type: "none" };
  }
  return out;
}

/** The Messages API's stop reason as Gemini's finishReason (a call ends with STOP too: Gemini has no reason of its own for it). */
export function geminiFinishReason(stopReason: unknown): string {
  switch (stopReason) {
    case "max_tokens":
      return "MAX_TOKENS";
    case "refusal":
      return "SAFETY";
    default:
      return "STOP";
  }
}

const candidate = (parts: Json[], extra: Json = {}): Json => ({ candidates: [{ content: { role: "model", parts }, ...extra, index: 0 }] });

/** A `partialArgs` entry's value field (Vertex AI's PartialArg: one of stringValue, numberValue, boolValue, nullValue). */
function partialValue(value: unknown): Json {
  if (typeof value === "string") return { stringValue: value };
  if (typeof value === "number") return { numberValue: value };
  if (typeof value === "boolean") return { boolValue: value };
  return { nullValue: "NULL_VALUE" };
}

/** The leaves of a call's arguments as JSON paths (RFC 9535, `$.a.b[0]`), in order. Empty objects and arrays have no leaf: Vertex AI's partial args cannot say them. */
function leavesOf(value: unknown, path = "$"): { jsonPath: string; value: unknown }[] {
  if (Array.isArray(value)) return value.flatMap((v, i) => leavesOf(v, `${path}[${i}]`));
  if (isObject(value)) return Object.entries(value).flatMap(([k, v]) => leavesOf(v, `${path}.${k}`));
  return [{ jsonPath: path, value }];
}

/**
 * The part of a call's argument text streamed so far whose values are whole: the text up to its
 * last comma between two members (outside strings), its open containers closed. `undefined` until
 * one member is whole.
 */
function settledArgs(text: string): unknown {
  const stack: string[] = [];
  let inString = false;
  let escaped = false;
  let settled: string | undefined;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (inString) {
      if (escaped) escaped = false;
      else if (ch === "\\") escaped = true;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    else if (ch === "{" || ch === "[") stack.push(ch === "{" ? "}" : "]");
    else if (ch === "}" || ch === "]") stack.pop();
    else if (ch === ",") settled = text.slice(0, i) + [...stack].reverse().join("");
  }
  if (settled === undefined) return undefined;
  try {
    return JSON.parse(settled);
  } catch {
    return undefined;
  }
}

export interface GeminiChunksOptions {
  /**
   * Stream each call's arguments as Vertex AI does when the request's
   * `toolConfig.functionCallingConfig.streamFunctionCallArguments` is true: a first part with the
   * call's name and `willContinue: true`, then `partialArgs` (`jsonPath` and a value; a string in
   * two pieces, the first `willContinue`) as the arguments' members become whole, then a terminal
   * part `functionCall: {}`. Otherwise a call is whole in one part, as the Gemini API sends it.
   */
  streamArgs?: boolean;
}

/**
 * Sends a Messages response's events as Gemini's SSE chunks at the same points. Gemini has no
 * start chunk and no block events: a text delta is a chunk with a text part, a thinking delta one
 * with a thought part (`thought: true`); a call is whole in one chunk, its `functionCall` with its
 * parsed `args`, at its block's `content_block_stop` (streamed, see `streamArgs`); the stop reason
 * (`message_delta`) is the last chunk, with `finishReason` and `usageMetadata`. A thinking block's
 * signature is the `thoughtSignature` of the next part (the step's first call, else a text, else
 * the last chunk's empty text), as Gemini signs a thinking turn. Every chunk names its response
 * (`responseId`) and the model (`modelVersion`). A spliced response with its own `message_start`
 * brings its own `responseId`; one without (headless: its first block restarts an index this
 * response already used) carries none, as a proxy that stitched bodies together without the
 * upstream's identity would send it.
 */
export class GeminiChunks {
  private responseId: string | undefined;
  private readonly seen = new Set<number>();
  private readonly calls = new Map<number, { id: unknown; name: unknown; json: string; sent: Set<string> }>();
  private readonly thinking = new Map<number, string>();
  private signature: string | undefined;

  constructor(
    private readonly model: string,
    private readonly usage: { input: number; output: number },
    private readonly options: GeminiChunksOptions = {},
  ) {}

  private chunk(body: Json): Json {
    return { ...body, ...(this.responseId !== undefined ? { responseId: this.responseId } : {}), modelVersion: this.model };
  }

  /** A part, with the pending thinking signature if one waits. */
  private signed(part: Json): Json {
    if (this.signature === undefined) return part;
    const signed = { ...part, thoughtSignature: this.signature };
    this.signature = undefined;
    return signed;
  }

  /** The chunk standing at a Messages event's point, or `undefined` where Gemini sends nothing (with streamed arguments, a call's last event has two: see `chunksOf`). */
  of(data: Json): Json | undefined {
    return this.chunksOf(data)[0];
  }

  /** The chunks standing at a Messages event's point, none where Gemini sends nothing. */
  chunksOf(data: Json): Json[] {
    const index = typeof data["index"] === "number" ? data["index"] : -1;
    switch (data["type"]) {
      case "message_start": {
        const message = isObject(data["message"]) ? data["message"] : {};
        this.responseId = typeof message["id"] === "string" ? message["id"].replace(/^msg_/, "") : undefined;
        this.seen.clear();
        return [];
      }
      case "content_block_start": {
        if (this.seen.has(index)) this.responseId = undefined;
        this.seen.add(index);
        const block = isObject(data["content_block"]) ? data["content_block"] : {};
        if (block["type"] === "thinking") this.thinking.set(index, "");
        if (block["type"] !== "tool_use") return [];
        this.calls.set(index, { id: block["id"], name: block["name"], json: "", sent: new Set() });
        if (!this.options.streamArgs) return [];
        return [this.chunk(candidate([this.signed({ functionCall: { id: block["id"], name: block["name"], willContinue: true } })]))];
      }
      case "content_block_delta": {
        const delta = isObject(data["delta"]) ? data["delta"] : {};
        if (delta["type"] === "text_delta") return [this.chunk(candidate([this.signed({ text: delta["text"] })]))];
        if (delta["type"] === "thinking_delta") {
          this.thinking.set(index, (this.thinking.get(index) ?? "") + String(delta["thinking"] ?? ""));
          return [this.chunk(candidate([{ text: delta["thinking"], thought: true }]))];
        }
        if (delta["type"] !== "input_json_delta") return [];
        const call = this.calls.get(index);
        if (!call) return [];
        call.json += String(delta["partial_json"] ?? "");
        if (!this.options.streamArgs) return [];
        const partialArgs = this.newLeaves(call, settledArgs(call.json));
        return partialArgs.length === 0 ? [] : [this.chunk(candidate([{ functionCall: { partialArgs, willContinue: true } }]))];
      }
      case "content_block_stop": {
        const thought = this.thinking.get(index);
        if (thought !== undefined) {
          this.thinking.delete(index);
          this.signature = signThinking(thought);
          return [];
        }
        const call = this.calls.get(index);
        if (!call) return [];
        this.calls.delete(index);
        let args: unknown;
        try {
          args = call.json === "" ? {} : JSON.parse(call.json);
        } catch {
          // An output limit or a refusal cut the arguments (the Messages API closes the block anyway):
          // the API sends no call it could not parse; the finishReason (MAX_TOKENS, SAFETY) says why.
          return [];
        }
        if (!this.options.streamArgs) return [this.chunk(candidate([this.signed({ functionCall: { id: call.id, name: call.name, args } })]))];
        const partialArgs = this.newLeaves(call, args);
        return [
          ...(partialArgs.length > 0 ? [this.chunk(candidate([{ functionCall: { partialArgs, willContinue: true } }]))] : []),
          this.chunk(candidate([{ functionCall: {} }])),
        ];
      }
      case "message_delta": {
        const delta = isObject(data["delta"]) ? data["delta"] : {};
        return [
          this.chunk({
            ...candidate([this.signed({ text: "" })], { finishReason: geminiFinishReason(delta["stop_reason"]) }),
            usageMetadata: { promptTokenCount: this.usage.input, candidatesTokenCount: this.usage.output, totalTokenCount: this.usage.input + this.usage.output },
          }),
        ];
      }
      default:
        return [];
    }
  }

  /** The `partialArgs` of the leaves of `args` not yet sent for this call; a string of more than one character in two pieces, the first `willContinue`. */
  private newLeaves(call: { sent: Set<string> }, args: unknown): Json[] {
    if (args === undefined) return [];
    return leavesOf(args)
      .filter((leaf) => leaf.jsonPath !== "$" && !call.sent.has(leaf.jsonPath))
      .flatMap((leaf) => {
        call.sent.add(leaf.jsonPath);
        if (typeof leaf.value === "string" && leaf.value.length > 1) {
          const half = Math.ceil(leaf.value.length / 2);
          return [
            { jsonPath: leaf.jsonPath, stringValue: leaf.value.slice(0, half), willContinue: true },
            { jsonPath: leaf.jsonPath, stringValue: leaf.value.slice(half) },
          ];
        }
        return [{ jsonPath: leaf.jsonPath, ...partialValue(leaf.value) }];
      });
  }
}

/** One SSE event as the Gemini API sends it with `alt=sse`: a `data:` line, no `event:` name. */
export const geminiSse = (chunk: Json): string => `data: ${JSON.stringify(chunk)}\r\n\r\n`;

/** The Messages API's whole response as Gemini's GenerateContentResponse. */
export function geminiWhole(message: Json, model: string): Json {
  const content = Array.isArray(message["content"]) ? message["content"] : [];
  const usage = isObject(message["usage"]) ? message["usage"] : {};
  const input = typeof usage["input_tokens"] === "number" ? usage["input_tokens"] : 0;
  const output = typeof usage["output_tokens"] === "number" ? usage["output_tokens"] : 0;
  const parts = content.flatMap((b: unknown): Json[] => {
    if (!isObject(b)) return [];
    if (b["type"] === "text") return [{ text: b["text"] }];
    if (b["type"] === "tool_use") return [{ functionCall: { id: b["id"], name: b["name"], args: b["input"] } }];
    return [];
  });
  return {
    ...candidate(parts, { finishReason: geminiFinishReason(message["stop_reason"]) }),
    usageMetadata: { promptTokenCount: input, candidatesTokenCount: output, totalTokenCount: input + output },
    modelVersion: model,
    responseId: typeof message["id"] === "string" ? message["id"].replace(/^msg_/, "") : undefined,
  };
}
