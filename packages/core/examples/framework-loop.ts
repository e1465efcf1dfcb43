import { effectOf, isDispatchOnceError, retryableOf, type Dispatcher, type DispatchOutcome } from "@dispatch-once/core";

/** One call of an assistant message, as the framework hands it over (LangGraph: `AIMessage.tool_calls`). */
export interface AssistantCall {
  id: string;
  name: string;
  args: unknown;
}

/** What the step commits for a call: the tool result the model reads, and what the effect was. */
export interface CallAnswer {
  callId: string;
  content: string;
  /** Present when the call ran or was answered from the ledger. */
  outcome?: DispatchOutcome;
  /** For a refusal: what the error catalogue says of the effect ("no": it did not happen). */
  effect?: "no";
}

/** A call that may have had its effect and will not be re-run: stop and tell the user; never ask the model. */
export class EffectNeedsAPerson extends Error {
  constructor(
    readonly call: AssistantCall,
    readonly answered: CallAnswer[],
    override readonly cause: unknown,
  ) {
    super(`${call.name} may have happened and cannot be re-run: a person must check`);
  }
}

/**
 * Runs the calls of ONE assistant message. Call it every time the framework runs (or re-runs: a
 * retry policy, a resume after a crash or an interrupt) the step that executes that message's calls,
 * with the same arguments: the ledger answers what already ran.
 * - conversationId: the framework's thread id. turnIndex: a counter committed in the same write as
 *   the assistant message (TURN-1), never a count of a list the app trims or edits.
 * - Only for a message whose response ended with a stop reason: a cut stream's last call may hold
 *   half its arguments, which a lenient schema accepts (STREAM-1, STREAM-8).
 */
export async function runAssistantCalls(dispatcher: Dispatcher, conversationId: string, turnIndex: number, calls: AssistantCall[]): Promise<CallAnswer[]> {
  // One dispatch context for the message: identical calls get ordinals 0, 1, ... (TURN-4), so a
  // user who asked twice pays twice, and a re-run of the step meets both rows.
  const turn = dispatcher.turn({ conversationId, turnIndex });
  const answered: CallAnswer[] = [];
  for (const call of calls) {
    // In the message's order, one at a time: the ordinals follow it, not the order runs finish.
    try {
      const outcome = await turn.dispatch({ name: call.name, input: call.args, callId: call.id });
      answered.push({ callId: call.id, content: outcome.resultJson, outcome });
    } catch (error) {
      // A re-run of this step can settle it (a claim released after a lost response, another
      // attempt still paying): throw to the framework's retry. Told to the model as a tool error,
      // it would ask again in its next response, under the next turn's key, and pay again.
      if (!isDispatchOnceError(error) || retryableOf(error) === "same_message") throw error;
      // May have happened (outcome_unknown) or happened unrecorded: nothing may re-run it.
      if (effectOf(error) !== "no") throw new EffectNeedsAPerson(call, answered, error);
      // It did not happen (a definite refusal, invalid arguments): the model may read why.
      answered.push({ callId: call.id, content: `error ${error.code}: ${error.message}`, effect: "no" });
    }
  }
  return answered;
}
