import type { JsonValue, StoredTurn } from "@dispatch-once/core";
import { readStoredResult, type CallAnswer, type CommitShape, type StoredTurnView } from "../src/index.js";
import type { ToyAccumulator } from "./toy.js";

/**
 * The toy provider, committing each call's name and arguments and reading them back, as the SDK
 * providers do (TURN-23 reads a committed turn's calls back to know which listed calls it answered).
 */
export function readingInputs(provider: { commitShape: (a: ToyAccumulator, answers: CallAnswer[]) => CommitShape; readTurn: (turn: StoredTurn) => StoredTurnView }): void {
  const shape = provider.commitShape.bind(provider);
  provider.commitShape = (accumulator, answers) => {
    const committed = shape(accumulator, answers);
    if (Array.isArray(committed.toolResults)) {
      // An error as the SDK providers commit it: { error: StoredError } as JSON text, its code kept.
      committed.toolResults = answers.map(({ call, answer }): JsonValue => ({
        id: call.callId,
        name: call.name,
        ...(answer.ok ? { ok: answer.resultJson } : { error: JSON.stringify({ error: answer.error }) }),
        input: call.input as JsonValue,
      }));
    }
    return committed;
  };
  provider.readTurn = (turn) => ({
    text: "",
    calls: (Array.isArray(turn.toolResults) ? (turn.toolResults as { id: string; name?: string; input: unknown; ok?: string; error?: string }[]) : []).map((r) => ({
      callId: r.id,
      name: r.name ?? "pay",
      input: r.input,
      ...readStoredResult(r.ok ?? r.error, r.ok === undefined),
    })),
  });
}
