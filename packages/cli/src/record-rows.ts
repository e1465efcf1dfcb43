import { isRecordRowName } from "@dispatch-once/core";

export { isRecordRowName };

/** What each of the AI SDK wrapper's bookkeeping rows records (AISDK-11, AISDK-17), in words. */
const RECORD_ROW_WORDS: Readonly<Record<string, string>> = {
  "dispatch-once-turn": "the AI SDK wrapper's record of which user message holds a place at a turn index, AISDK-17",
  "dispatch-once-message": "the AI SDK wrapper's record of the turn index a user message first dispatched at, AISDK-17",
  "dispatch-once-repair": "the AI SDK wrapper's record of a repaired tool call, AISDK-11",
};

/** What a bookkeeping row (EFFECT-8) records, for an operator. */
export function recordRowWords(toolName: string): string {
  return RECORD_ROW_WORDS[toolName] ?? "a row a Dispatch-Once package keeps for itself";
}
