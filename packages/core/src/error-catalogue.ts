import { isDispatchOnceError, type DispatchOnceErrorCode } from "./errors/index.js";

/**
 * Whether the effect of the call an error is about may have happened:
 * - "no": it certainly did not (nothing was claimed, or the tool said so);
 * - "yes": it did (its result could not be kept);
 * - "possibly": nobody can tell from here (a lost response, a lost lease, another attempt).
 */
export type EffectKnowledge = "no" | "yes" | "possibly";

/**
 * What a caller can do about the error:
 * - "no": asking again cannot help (a bad input, a recorded failure, an unknown outcome that
 *   a person must settle);
 * - "same_message": re-send the SAME message id (or re-dispatch the same call) later; the
 *   ledger and the conversation store make that safe, and it may succeed.
 */
export type Retryable = "no" | "same_message";

export interface ErrorCatalogueEntry {
  code: DispatchOnceErrorCode;
  /** Spec rules that define when it is raised. */
  rules: readonly string[];
  /** Fields the error carries besides `code` and `message` (ERR-2). */
  carries: readonly string[];
  effect: EffectKnowledge;
  retryable: Retryable;
  /** When it is raised, in a few words. */
  raisedWhen: string;
}

/** Every code with its entry; a `Record` over the code union, so a new code cannot be left out. */
const ENTRIES: { readonly [C in DispatchOnceErrorCode]: Omit<ErrorCatalogueEntry, "code"> } = {
  invalid_key_input: { rules: ["KEY-2", "KEY-3", "KEY-4", "KEY-11"], carries: ["field"], effect: "no", retryable: "no", raisedWhen: "a key component is outside its alphabet or range" },
  not_canonicalizable: { rules: ["KEY-6"], carries: ["problem", "path"], effect: "no", retryable: "no", raisedWhen: "arguments have no JCS form" },
  invalid_argument: { rules: ["ERR-1", "ERR-6", "KEY-4", "EFFECT-8", "STREAM-15", "STREAM-18", "STREAM-19", "STREAM-21", "DISPATCH-18", "MCP-10", "MCP-11", "MCP-15", "AISDK-7", "AISDK-9", "AISDK-15", "AISDK-17", "AISDK-18", "ATR-2", "ATR-3", "ATR-4", "ATR-7", "ATR-8", "ATR-10", "ATR-13", "THREAD-6", "LANGGRAPH-1", "LANGGRAPH-2", "LANGGRAPH-3"], carries: ["field"], effect: "no", retryable: "no", raisedWhen: "a public API is called with an argument it does not accept" },
  unknown_tool: { rules: ["DISPATCH-1"], carries: ["toolName"], effect: "no", retryable: "no", raisedWhen: "the call names no registered tool" },
  invalid_tool_definition: { rules: ["EFFECT-1", "EFFECT-8", "IDENT-2", "IDENT-5", "IDENT-9", "IDENT-11", "DISPATCH-18", "MCP-11", "AISDK-7"], carries: [], effect: "no", retryable: "no", raisedWhen: "a tool definition or its schema breaks the registry's rules" },
  tool_input_invalid: { rules: ["DISPATCH-2", "IDENT-7"], carries: ["toolName", "issues"], effect: "no", retryable: "no", raisedWhen: "arguments fail the tool's schema, or a write's key arguments hold a number beyond 2^53 − 1" },
  invalid_arguments_json: { rules: ["DISPATCH-2", "LANGGRAPH-7"], carries: ["toolName"], effect: "no", retryable: "no", raisedWhen: "a complete call's arguments are not JSON (or, on the OpenAI sides, not a JSON object)" },
  idempotency_key_reused: { rules: ["IDENT-6", "MCP-9"], carries: ["key", "toolName"], effect: "no", retryable: "no", raisedWhen: "a call's key is stored with other arguments, for a tool that refuses differing requests; nothing ran" },
  tool_definition_changed: { rules: ["IDENT-10", "IDENT-11", "TURN-23"], carries: ["key", "toolName", "rowKey", "rowState", "reason", "rowTurnIndex"], effect: "no", retryable: "no", raisedWhen: "a re-run of a turn met a row of the tool made under another definition that may be the call's, and nothing can tell (its stored request refused now, or several rows match), or an earlier turn of the message left a call of the tool unanswered whose stored request is refused now; nothing claimed or ran for the call" },
  in_flight_elsewhere: { rules: ["LEDGER-15", "DISPATCH-18"], carries: ["key", "waitedMs", "runTimeoutMs", "storedRequest"], effect: "possibly", retryable: "same_message", raisedWhen: "another attempt holds a live claim past the wait bound, or this dispatch's own run did not settle within its run timeout" },
  claim_released: { rules: ["LEDGER-8", "LEDGER-21"], carries: ["key", "effectMayHaveHappened", "cause", "storedRequest"], effect: "possibly", retryable: "same_message", raisedWhen: "the tool's error did not settle the call; the claim was released for a re-run with the stored request" },
  outcome_unknown: { rules: ["LEDGER-7", "LEDGER-8", "EFFECT-6"], carries: ["key", "reason", "storedRequest"], effect: "possibly", retryable: "no", raisedWhen: "the row is unknown: nobody can tell if the effect happened; never re-run" },
  tool_failed: { rules: ["LEDGER-8", "DISPATCH-9"], carries: ["key", "error", "replayed", "storedRequest"], effect: "no", retryable: "no", raisedWhen: "a definite failure, first run or replayed" },
  stale_claim: { rules: ["LEDGER-5", "DISPATCH-8"], carries: ["key", "fence", "effectHappened", "storedRequest"], effect: "possibly", retryable: "same_message", raisedWhen: "a fence no longer owns an in-flight row" },
  ledger_unavailable: { rules: ["LEDGER-12", "DISPATCH-10", "ERR-5"], carries: ["cause", "key", "effectHappened", "storedRequest"], effect: "possibly", retryable: "same_message", raisedWhen: "the ledger's store cannot be reached or refused the operation (`effectHappened`: a record given up after the run performed the effect, DISPATCH-10, also when its write met an error that is not Dispatch-Once's, kept as `cause`)" },
  ledger_corrupt: { rules: ["LEDGER-11", "LEDGER-25", "DISPATCH-10", "DISPATCH-17"], carries: ["key", "effectHappened", "storedRequest"], effect: "possibly", retryable: "no", raisedWhen: "a ledger row cannot be read back (`effectHappened`: while recording an effect the run performed, DISPATCH-10)" },
  result_not_storable: { rules: ["LEDGER-10", "DISPATCH-7"], carries: ["key", "storedRequest"], effect: "yes", retryable: "no", raisedWhen: "the effect happened and its result is not JSON or is too large (first run or replayed)" },
  durability_mismatch: { rules: ["LEDGER-14", "TURN-14"], carries: ["tools"], effect: "no", retryable: "no", raisedWhen: "unkeyed_write tools on a volatile ledger, or a volatile conversation store beside a durable ledger" },
  invalid_ledger_input: { rules: ["LEDGER-13", "LEDGER-20", "LEDGER-22", "LEDGER-28", "LEDGER-29", "LEDGER-30", "LIST-4", "RESOLVE-1"], carries: ["field"], effect: "no", retryable: "no", raisedWhen: "a ledger option or argument the adapter cannot accept" },
  unsafe_store_config: { rules: ["LEDGER-14"], carries: ["node", "setting", "value"], effect: "no", retryable: "no", raisedWhen: "the store is configured so it can forget acknowledged rows" },
  stream_incomplete: { rules: ["STREAM-1", "STREAM-12", "STREAM-16", "AISDK-16", "LANGGRAPH-3"], carries: ["eventsSeen", "finishEvent", "streamError", "finalStop", "idleMs"], effect: "no", retryable: "same_message", raisedWhen: "a stream ended without its finishing event (message_stop, response.completed, a Chat Completions finish_reason stop or tool_calls), or went silent past the runner's streamIdleTimeoutMs (idleMs; the request is aborted); its calls are judged one by one" },
  turn_failed: { rules: ["RECORD-2", "RECORD-5", "TURN-12"], carries: ["record", "replayed", "notRetried"], effect: "possibly", retryable: "same_message", raisedWhen: "a turn failed within the retry policy; the record says which effects happened" },
  message_id_reused: { rules: ["TURN-20"], carries: ["conversationId", "messageId"], effect: "no", retryable: "no", raisedWhen: "a send's message id is stored with other content; nothing was appended, reopened or run for it" },
  conversation_busy: { rules: ["TURN-10", "TURN-25"], carries: ["conversationId", "messageId", "waitedMs", "inProgress", "effects", "effectsUnknown"], effect: "no", retryable: "same_message", raisedWhen: "another worker holds the conversation's turn lease past the wait bound; the message is queued, or in progress under that holder (`inProgress`: its effects may have happened, `effectOf` says \"possibly\"; `effects` lists the calls the ledger holds for it, or `effectsUnknown` says why they are not known)" },
  conversation_lease_lost: { rules: ["TURN-10"], carries: ["conversationId", "fence"], effect: "possibly", retryable: "same_message", raisedWhen: "a turn lease presented (by its fence, or an acquire by its grant id) no longer holds the conversation" },
  store_unavailable: { rules: ["TURN-14", "RECORD-9", "ERR-5", "THREAD-4"], carries: ["cause", "effects"], effect: "possibly", retryable: "same_message", raisedWhen: "the conversation store cannot be reached or refused the operation; at a turn's end after calls ran, `effects` says what the runner knew of each (RECORD-9)" },
  store_corrupt: { rules: ["TURN-14"], carries: ["conversationId"], effect: "possibly", retryable: "no", raisedWhen: "stored conversation data cannot be read back" },
  resolution_refused: { rules: ["RESOLVE-2"], carries: ["key", "state"], effect: "possibly", retryable: "no", raisedWhen: "resolve() met a live in-flight, completed, failed, released or absent row" },
  invalid_store_input: { rules: ["LEDGER-20", "TURN-10", "TURN-12", "TURN-17", "TURN-18", "TURN-22", "TURN-24"], carries: ["field"], effect: "no", retryable: "no", raisedWhen: "a conversation-store option or argument it cannot accept" },
};

/**
 * Every error code any Dispatch-Once package raises (spec §11, ERR-1 … ERR-4), as data. The
 * spec's table is checked against this list by a test, so the two cannot drift.
 */
export const ERROR_CATALOGUE: readonly ErrorCatalogueEntry[] = (Object.keys(ENTRIES) as DispatchOnceErrorCode[]).map((code) => ({
  code,
  ...ENTRIES[code],
}));

const BY_CODE = new Map(ERROR_CATALOGUE.map((entry) => [entry.code, entry]));

/** The catalogue entry of an error of any copy of Dispatch-Once, or undefined for any other value. */
export function catalogueEntry(error: unknown): ErrorCatalogueEntry | undefined {
  if (!isDispatchOnceError(error)) return undefined;
  return BY_CODE.get(error.code);
}

/**
 * Whether the effect of the call behind `error` may have happened, read from the error
 * itself where it knows better than its code (a `claim_released` of a not-performed failure,
 * a `conversation_busy` whose message is in progress under another holder). Anything that is not a Dispatch-Once error is
 * "possibly": an unclassified error says nothing about the effect.
 */
export function effectOf(error: unknown): EffectKnowledge {
  const entry = catalogueEntry(error);
  if (entry === undefined) return "possibly";
  // A claim lost after its run performed the effect, before the outcome was recorded (DISPATCH-8).
  if (isDispatchOnceError(error, "stale_claim") && (error as { effectHappened?: unknown }).effectHappened === true) return "yes";
  // A record given up after the run performed the effect (DISPATCH-10): the ledger lacks it, the run knows it.
  if (isDispatchOnceError(error, "ledger_unavailable") && (error as { effectHappened?: unknown }).effectHappened === true) return "yes";
  // The same record whose row could not be read back, or held what this version did not write (DISPATCH-10).
  if (isDispatchOnceError(error, "ledger_corrupt") && (error as { effectHappened?: unknown }).effectHappened === true) return "yes";
  // A busy conversation whose turn under way is this message's own (TURN-10): its calls may have run.
  if (isDispatchOnceError(error, "conversation_busy") && (error as { inProgress?: unknown }).inProgress === true) return "possibly";
  if (isDispatchOnceError(error, "claim_released")) {
    return (error as { effectMayHaveHappened?: unknown }).effectMayHaveHappened === false ? "no" : "possibly";
  }
  return entry.effect;
}

/**
 * Whether re-sending the same message id or call can help (spec §11), read from the error itself
 * where it knows better than its code: never for an effect known to have happened (a
 * `stale_claim` after the run performed it, DISPATCH-8; a `ledger_unavailable` or `ledger_corrupt`
 * whose record of it was lost, DISPATCH-10). Its row is a new owner's or an
 * operator's, who may have released it, and a re-send would then perform the effect again
 * (MCP-6, ATR-5); nor for a `turn_failed` whose record says it is not retryable. Anything that is
 * not a Dispatch-Once error is "no": an unclassified error gives
 * no ground for a re-send.
 */
export function retryableOf(error: unknown): Retryable {
  const entry = catalogueEntry(error);
  if (entry === undefined || effectOf(error) === "yes") return "no";
  // A turn_failed carries its failed-turn record, which says whether a re-send can complete the
  // turn (past the re-send window, a later message bound, a permanent refusal: RECORD-5, TURN-12).
  if (isDispatchOnceError(error, "turn_failed") && (error as { record?: { retryable?: unknown } }).record?.retryable === false) return "no";
  return entry.retryable;
}
