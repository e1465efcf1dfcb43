import fc from "fast-check";
import type { CutKind, DownstreamFault, PlannedCall, StreamCut } from "./scenario.js";

/**
 * A random scenario for the Vercel AI SDK profile (spec §13.2): chats whose server route runs
 * real `streamText` with tools wrapped by `createOnceTools`, against the mock Responses API.
 * There is no runner here: the app keeps its messages, counts its turns from them (AISDK-1),
 * re-sends the same messages after a mid-stream failure (AISDK-6) and regenerates answered
 * turns. Everything is data, so fast-check can shrink it.
 */

/**
 * Where a response of the turn is cut: in the tool step (the response that makes the calls:
 * inside a call's arguments, right after its tool-call part, before response.completed), or in
 * the confirmation the model streams after the tool step finished (the chapter's incident).
 */
export interface AiSdkCut {
  phase: "tool_step" | "confirmation";
  cut: StreamCut;
}

export interface AiSdkMessagePlan {
  /** The user's text; the scripted model maps it to `calls`. Unique within its chat. */
  text: string;
  /** Distinct calls (their references or memos differ): each is one intent. */
  calls: PlannedCall[];
  /** The cut of each request attempt of this turn, in order (attempt n meets cuts[n - 1]). */
  cuts: AiSdkCut[];
  /** Downstream faults by call index, applied to the call's first execution. */
  downstream: Partial<Record<number, DownstreamFault>>;
  /** How often the app re-sends the same messages after a failed attempt (AISDK-6). */
  resends: number;
  /** After the turn settled, the user presses regenerate: the same user messages once more. */
  regenerate: boolean;
}

export interface AiSdkChatPlan {
  id: string;
  /** Where the wrapped tools run: when the step finishes (the AI SDK's way) or at the tool-call part (AISDK-4). */
  dispatchAt: "step" | "tool-call";
  messages: AiSdkMessagePlan[];
}

export interface AiSdkScenario {
  chats: AiSdkChatPlan[];
}

const PAYEES = ["acme", "globex", "initech"];
const CURRENCIES = ["EUR", "USD"];

function callArbitrary(chat: number, message: number, index: number): fc.Arbitrary<PlannedCall> {
  const payment = fc.record({
    payee: fc.constantFrom(...PAYEES),
    amount: fc.integer({ min: 1, max: 99_999 }),
    currency: fc.constantFrom(...CURRENCIES),
    // Unique per call: an intent is one planned call, and its effects are found by it.
    reference: fc.constant(`c${chat}-m${message}-r${index}`),
    memo: fc.constantFrom("Invoice", "Monthly fee", "Refund"),
  });
  const invoice = fc.record({
    customer: fc.constantFrom(...PAYEES),
    amount: fc.integer({ min: 1, max: 99_999 }),
    currency: fc.constantFrom(...CURRENCIES),
    memo: fc.constant(`Services c${chat}m${message}i${index}`),
  });
  return fc.oneof(
    { weight: 3, arbitrary: payment.map((args): PlannedCall => ({ tool: "send_payment", args })) },
    { weight: 1, arbitrary: invoice.map((args): PlannedCall => ({ tool: "create_invoice", args })) },
  );
}

const cutKind = fc.constantFrom<CutKind>("reset", "reset", "clean_close", "error_event");

function cutArbitrary(calls: number): fc.Arbitrary<AiSdkCut> {
  const call = fc.integer({ min: 0, max: calls - 1 });
  const toolStep = fc.oneof(
    fc.record({ at: fc.constant("arguments" as const), toolUse: call, afterFragment: fc.integer({ min: 0, max: 2 }), kind: cutKind }),
    { weight: 2, arbitrary: fc.record({ at: fc.constant("after_call" as const), toolUse: call, kind: cutKind }) },
    fc.record({ at: fc.constant("before_message_stop" as const), kind: cutKind }),
    fc.record({ at: fc.constant("event" as const), event: fc.integer({ min: 0, max: 3 + calls * 5 }), kind: cutKind }),
  );
  // The confirmation has no calls: cut it while its text streams, or where response.completed goes.
  const confirmation = fc.oneof(
    { weight: 2, arbitrary: fc.record({ at: fc.constant("before_message_stop" as const), kind: cutKind }) },
    fc.record({ at: fc.constant("event" as const), event: fc.integer({ min: 2, max: 6 }), kind: cutKind }),
  );
  return fc.oneof(
    { weight: 3, arbitrary: toolStep.map((cut): AiSdkCut => ({ phase: "tool_step", cut })) },
    { weight: 2, arbitrary: confirmation.map((cut): AiSdkCut => ({ phase: "confirmation", cut })) },
  );
}

function messageArbitrary(chat: number, message: number): fc.Arbitrary<AiSdkMessagePlan> {
  return fc.integer({ min: 1, max: 2 }).chain((count) =>
    fc.tuple(...Array.from({ length: count }, (_, i) => callArbitrary(chat, message, i))).chain((calls) =>
      fc.record({
        text: fc.constant(`c${chat} message ${message}`),
        calls: fc.constant(calls as PlannedCall[]),
        cuts: fc.array(cutArbitrary(calls.length), { maxLength: 3 }),
        downstream: fc.oneof(
          { weight: 2, arbitrary: fc.constant({}) },
          {
            weight: 1,
            arbitrary: fc
              .tuple(fc.integer({ min: 0, max: calls.length - 1 }), fc.constantFrom<DownstreamFault>("fail_before_accept", "drop_after_accept", "drop_after_accept"))
              .map(([i, fault]) => ({ [i]: fault })),
          },
        ) as fc.Arbitrary<Partial<Record<number, DownstreamFault>>>,
        resends: fc.integer({ min: 0, max: 2 }),
        regenerate: fc.boolean(),
      }),
    ),
  );
}

function chatArbitrary(chat: number): fc.Arbitrary<AiSdkChatPlan> {
  return fc.record({
    id: fc.constant(`chat-${chat}`),
    dispatchAt: fc.constantFrom<AiSdkChatPlan["dispatchAt"]>("step", "tool-call"),
    // Two messages reach the next turn's keys; more only cost time (CI runs this on every push).
    messages: fc.integer({ min: 1, max: 2 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, m) => messageArbitrary(chat, m)))),
  });
}

export function aiSdkScenarioArbitrary(): fc.Arbitrary<AiSdkScenario> {
  return fc.integer({ min: 1, max: 2 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, c) => chatArbitrary(c)))).map((chats) => ({ chats }));
}
