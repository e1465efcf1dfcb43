import type { BetaToolRunContext } from "@anthropic-ai/sdk/lib/tools/BetaRunnableTool";

/** What a wrapped tool's `run` finds in its context besides the SDK's own (read it with `dispatchOnceOf`). */
export interface DispatchOnceCallInfo {
  /** Forward it as the `Idempotency-Key` of the downstream request (DISPATCH-4). */
  idempotencyKey: string;
  conversationId: string;
  turnIndex: number;
  ordinal: number;
}

/** The run context a wrapped tool receives: the SDK's, plus `dispatchOnce`. */
export type OnceToolRunContext = BetaToolRunContext & { dispatchOnce: DispatchOnceCallInfo };

/** The Dispatch-Once part of a wrapped tool's run context (undefined when the tool runs unwrapped). */
export function dispatchOnceOf(context: BetaToolRunContext | undefined): DispatchOnceCallInfo | undefined {
  return (context as Partial<OnceToolRunContext> | undefined)?.dispatchOnce;
}
