// A Gemini stream side for @dispatch-once/runner, written from packages/runner/README.md ("What a
// provider supplies") and its .d.ts (StreamProvider, CallPhases), over @google/genai's
// `models.generateContentStream`. Dispatch-Once wraps no Gemini SDK: this is the part an adopter
// writes. STREAM-7 for Gemini, as this app names it:
// - a call is *complete* when its `functionCall` part arrives (the Gemini API sends a call whole,
//   its `args` parsed), unless that chunk also ends the response with a finishReason other than
//   STOP: such a call is left open and so abandoned (never dispatched half-made);
// - the response is *finished* by a chunk with `finishReason: "STOP"`; MAX_TOKENS with no call in
//   the response finishes it too (a long answer cut, nothing to dispatch). Every other finishReason
//   (SAFETY, MALFORMED_FUNCTION_CALL, RECITATION, ..., MAX_TOKENS with a call), and a prompt blocked by
//   `promptFeedback.blockReason`, ends it for good
//   (STREAM-13: not retried, not committed); a stream that ends without a finishReason is a failed
//   stream (STREAM-1), retried.
import type { GoogleGenAI, GenerateContentResponse, Part, Content, FunctionDeclaration } from "@google/genai";
import { CallPhases, isCall, checkUserContent, readStoredResult, type CallAnswer, type CallState, type CommitShape, type StoredTurnView, type StreamProvider, type StreamStep } from "@dispatch-once/runner";
import type { JsonValue, StoredTurn } from "@dispatch-once/core";

/** One call as the accumulator keeps it: `geminiId` is the id Gemini gave it (absent on older models). */
export interface GeminiCall extends CallState { geminiId?: string }

export class GeminiAccumulator extends CallPhases<GeminiCall> {
  /** Every part the response streamed, in order, as Gemini sent it (thought parts and signatures kept). */
  readonly rawParts: Part[] = [];
  finishReason: string | undefined;
  finishMessage: string | undefined;
  /** The response's id, from its first chunk; a chunk naming another one is another response spliced in. */
  responseId: string | undefined;
  private nextIndex = 0;
  private responseSeq = 0;
  private static responses = 0;

  constructor() {
    super();
    this.responseSeq = ++GeminiAccumulator.responses;
  }

  apply(chunk: GenerateContentResponse): StreamStep {
    this.eventsSeen++;
    if (this.finishReason !== undefined) return {}; // nothing after the finish belongs to the turn (STREAM-1)
    if (chunk.responseId !== undefined) {
      if (this.responseId === undefined) this.responseId = chunk.responseId;
      else if (chunk.responseId !== this.responseId) throw new Error(`a chunk of another response (${chunk.responseId}) in the stream of ${this.responseId}: spliced`);
    }
    // A prompt the API blocks: one chunk of promptFeedback, no candidate. The same request is blocked again (STREAM-13).
    const blocked = chunk.promptFeedback?.blockReason;
    if (blocked !== undefined && (chunk.candidates ?? []).length === 0) {
      this.finishReason = `promptFeedback.blockReason ${blocked}`;
      return {};
    }
    const candidate = chunk.candidates?.[0];
    const finish = candidate?.finishReason as string | undefined;
    const endsForGood = finish !== undefined && finish !== "STOP";
    const completed: GeminiCall[] = [];
    let textDelta: StreamStep["textDelta"];
    for (const part of candidate?.content?.parts ?? []) {
      this.rawParts.push(part);
      const index = this.nextIndex++;
      if (part.functionCall !== undefined) {
        const fc = part.functionCall;
        const geminiId = typeof fc.id === "string" && fc.id !== "" ? fc.id : undefined;
        // No id from the model: one of our own, for logs and records only (the key never uses it).
        const call = this.openCall({ index, callId: geminiId ?? `gemini-call-${this.responseSeq}-${index}`, name: fc.name ?? "", phase: "announced", partialJson: "", ...(geminiId !== undefined ? { geminiId } : {}) });
        // In the chunk that ends the response for good: never dispatched (PLANT=dispatch-final removes this guard).
        if (endsForGood && process.env.PLANT !== "dispatch-final") continue;
        const done = this.completeCall(call, { json: JSON.stringify(fc.args ?? {}), requireObject: true });
        if (done !== undefined) completed.push(done);
      } else if (typeof part.text === "string" && part.thought !== true && part.text !== "") {
        this.setText(index, part.text); // a part of its own (appendText adds only to a part setText began)
        textDelta = { index, text: part.text };
      }
    }
    if (finish !== undefined) {
      this.finishReason = finish;
      if (typeof candidate?.finishMessage === "string") this.finishMessage = candidate.finishMessage;
    }
    const [first, ...more] = completed;
    return { ...(first !== undefined ? { complete: first } : {}), ...(more.length > 0 ? { completeMore: more } : {}), ...(textDelta !== undefined ? { textDelta } : {}) };
  }

  /** MAX_TOKENS finishes a response that made no call; any other reason but STOP ends it for good. */
  get endedForGood(): string | undefined {
    const r = this.finishReason;
    if (r === undefined || r === "STOP") return undefined;
    if (r === "MAX_TOKENS" && this.calls.length === 0) return undefined;
    return r;
  }

  text(): string {
    return this.orderedParts().flatMap((p) => (isCall(p) ? [] : [p.text])).join("");
  }
}

export interface GeminiStreamOptions {
  client: GoogleGenAI;
  model: string;
  functionDeclarations: FunctionDeclaration[];
  system?: string;
  /** Ask for the model's thoughts (`thinkingConfig.includeThoughts`): their parts and signatures are committed as sent. */
  thoughts?: boolean;
}

/** A function result as Gemini's `functionResponse.response` (an object): `{ output }` or `{ error }`. */
const responseOf = (answer: CallAnswer<GeminiCall>["answer"]): Record<string, unknown> =>
  answer.ok ? { output: JSON.parse(answer.resultJson) as unknown } : { error: answer.error };

/** PLANT=drop-thoughts: what an app that keeps only "the content" commits (thought parts and signatures gone). */
const withoutThoughts = (parts: Part[]): Part[] => parts.filter((p) => p.thought !== true).map(({ thoughtSignature: _s, ...p }) => p);

export class GeminiStream implements StreamProvider<GeminiAccumulator, GenerateContentResponse, string> {
  readonly finishEvent = "finishReason STOP";
  constructor(private readonly options: GeminiStreamOptions) {}

  createAccumulator(): GeminiAccumulator {
    return new GeminiAccumulator();
  }

  checkContent(content: string): void {
    checkUserContent(content);
  }

  userMessage(content: string): JsonValue {
    return { role: "user", parts: [{ text: content }] };
  }

  async open(input: JsonValue[], { headers, signal }: { headers?: Record<string, string>; signal?: AbortSignal; followUp?: boolean }): Promise<AsyncIterable<GenerateContentResponse>> {
    const { client, model, functionDeclarations, system, thoughts } = this.options;
    return client.models.generateContentStream({
      model,
      contents: input as unknown as Content[],
      config: {
        tools: [{ functionDeclarations }],
        ...(system !== undefined ? { systemInstruction: system } : {}),
        ...(thoughts ? { thinkingConfig: { includeThoughts: true, thinkingBudget: 1024 } } : {}),
        // The runner aborts an idle or abandoned stream (STREAM-16): the SDK frees the connection.
        ...(signal !== undefined ? { abortSignal: signal } : {}),
        ...(headers !== undefined ? { httpOptions: { headers } } : {}),
      },
    });
  }

  apply(accumulator: GeminiAccumulator, event: GenerateContentResponse): StreamStep {
    return accumulator.apply(event);
  }

  finished(accumulator: GeminiAccumulator): boolean {
    return accumulator.finishReason !== undefined && accumulator.endedForGood === undefined;
  }

  streamError(accumulator: GeminiAccumulator): string | undefined {
    const r = accumulator.endedForGood;
    return r === undefined ? undefined : `finishReason ${r}${accumulator.finishMessage !== undefined ? `: ${accumulator.finishMessage}` : ""}`;
  }

  finalStop(accumulator: GeminiAccumulator): string | undefined {
    return accumulator.endedForGood;
  }

  commitShape(accumulator: GeminiAccumulator, answers: CallAnswer[]): CommitShape {
    const parts = answers.map(({ call, answer }) => {
      const c = call as GeminiCall;
      // The response's own id when it had one; none when it had none (the API pairs them by name and order).
      return { functionResponse: { ...(c.geminiId !== undefined ? { id: c.geminiId } : {}), name: c.name, response: responseOf(answer) } };
    });
    return {
      // As the stream sent it: thought parts and their thoughtSignature go back unchanged, or the API refuses the next request.
      assistant: { role: "model", parts: process.env.PLANT === "drop-thoughts" ? withoutThoughts(accumulator.rawParts) : accumulator.rawParts } as unknown as JsonValue,
      ...(parts.length > 0 ? { toolResults: { role: "user", parts } as unknown as JsonValue } : {}),
      stopReason: accumulator.finishReason ?? null,
      answers: accumulator.calls.length === 0,
      text: accumulator.text(),
    };
  }

  readTurn(turn: StoredTurn): StoredTurnView {
    const parts = ((turn.assistant as { parts?: Part[] }).parts ?? []) as Part[];
    const results = (((turn.toolResults as { parts?: Part[] } | undefined)?.parts ?? []) as Part[]).map((p) => p.functionResponse);
    const calls = parts.filter((p) => p.functionCall !== undefined);
    return {
      text: parts.filter((p) => typeof p.text === "string" && p.thought !== true).map((p) => p.text).join(""),
      calls: calls.map((p, i) => {
        const fc = p.functionCall!;
        // By id when the call had one, else by position (the results are written in the calls' order).
        const r = fc.id !== undefined ? results.find((x) => x?.id === fc.id) : results[i];
        const response = (r?.response ?? {}) as { output?: unknown; error?: unknown };
        const stored = response.error !== undefined ? readStoredResult(JSON.stringify(response.error), true) : readStoredResult(JSON.stringify(response.output ?? null), false);
        return { callId: fc.id ?? `call-${i}`, name: fc.name ?? "", ...(fc.args !== undefined ? { input: fc.args } : {}), ...stored };
      }),
    };
  }
}
