import fc from "fast-check";

/**
 * A random end-to-end scenario (issue 6, level 2): conversations of tool calls run through the
 * real turn runner, SDK, mock provider and mock payments, with faults at every position the spec
 * names and every replay route. Everything here is data, so fast-check can shrink it.
 */

export type ToolName = "send_payment" | "void_payment" | "create_invoice" | "search_payments";

export interface PlannedCall {
  tool: ToolName;
  args: Record<string, unknown>;
}

/** Where the provider cuts a response (spec STREAM-2 positions, plus raw event numbers). */
export type StreamCut =
  | { at: "event"; event: number; kind: CutKind }
  | { at: "arguments"; toolUse: number; afterFragment: number; kind: CutKind }
  | { at: "after_call"; toolUse: number; kind: CutKind }
  | { at: "before_message_stop"; kind: CutKind };

export type CutKind = "reset" | "clean_close" | "error_event";

/** Where the downstream call fails (applied once, to the first execution of the call). */
export type DownstreamFault = "fail_before_accept" | "drop_after_accept";

/** A worker process dying mid-dispatch: its claim stays in flight until the lease runs out. */
export type WorkerDeath = { call: number; when: "before_downstream" | "after_response_before_complete" };

export type ReplayRoute = "automatic_retry" | "client_resend" | "queue_redelivery" | "double_send";

export interface MessagePlan {
  /** The user's text; the scripted model maps it to `calls`. Unique within its conversation. */
  text: string;
  calls: PlannedCall[];
  /** Provider faults for the first responses to this turn's request (one per attempt). */
  cuts: StreamCut[];
  /** Downstream faults by call index. */
  downstream: Partial<Record<number, DownstreamFault>>;
  death: WorkerDeath | undefined;
  route: ReplayRoute;
}

export interface ConversationPlan {
  id: string;
  messages: MessagePlan[];
}

export interface Scenario {
  conversations: ConversationPlan[];
  /** Seeds the mock provider's per-response variation (key order, whitespace, fragments, re-wording). */
  providerSeed: number;
}

const PAYEES = ["acme", "globex", "initech"];
const CURRENCIES = ["EUR", "USD"];

function callArbitrary(conversation: number, message: number): fc.Arbitrary<PlannedCall> {
  const reference = fc.integer({ min: 0, max: 2 }).map((r) => `c${conversation}-m${message}-r${r}`);
  const payment = fc.record({
    payee: fc.constantFrom(...PAYEES),
    amount: fc.integer({ min: 1, max: 99_999 }),
    currency: fc.constantFrom(...CURRENCIES),
    reference,
    memo: fc.constantFrom("Invoice", "Monthly fee", "Refund"),
  });
  return fc.oneof(
    { weight: 5, arbitrary: payment.map((args): PlannedCall => ({ tool: "send_payment", args })) },
    {
      weight: 2,
      arbitrary: fc
        .record({
          customer: fc.constantFrom(...PAYEES),
          amount: fc.integer({ min: 1, max: 99_999 }),
          currency: fc.constantFrom(...CURRENCIES),
          memo: fc.constant("Services"),
        })
        .map((args): PlannedCall => ({ tool: "create_invoice", args: { ...args, memo: `${args.memo} c${conversation}m${message}` } })),
    },
    { weight: 1, arbitrary: fc.constant<PlannedCall>({ tool: "search_payments", args: {} }) },
  );
}

const cutKind = fc.constantFrom<CutKind>("reset", "reset", "clean_close", "error_event");

function cutArbitrary(calls: number): fc.Arbitrary<StreamCut> {
  const toolUse = fc.integer({ min: 0, max: Math.max(0, calls - 1) });
  return fc.oneof(
    fc.record({ at: fc.constant("event" as const), event: fc.integer({ min: 0, max: 6 + calls * 6 }), kind: cutKind }),
    fc.record({ at: fc.constant("arguments" as const), toolUse, afterFragment: fc.integer({ min: 0, max: 4 }), kind: cutKind }),
    fc.record({ at: fc.constant("after_call" as const), toolUse, kind: cutKind }),
    fc.record({ at: fc.constant("before_message_stop" as const), kind: cutKind }),
  );
}

function messageArbitrary(conversation: number, message: number, previous: PlannedCall[]): fc.Arbitrary<MessagePlan> {
  // A legitimate repeat of an earlier message's payment, and identical calls inside one turn.
  const repeat = previous.filter((c) => c.tool === "send_payment");
  const fresh = callArbitrary(conversation, message);
  const call = repeat.length > 0 ? fc.oneof({ weight: 4, arbitrary: fresh }, { weight: 1, arbitrary: fc.constantFrom(...repeat) }) : fresh;
  return fc
    .array(call, { minLength: 1, maxLength: 3 })
    .chain((calls) => {
      // A void of a payment this conversation made once, in an earlier message.
      const voidable = previous.filter((c) => c.tool === "send_payment");
      const withVoid = voidable.length > 0
        ? fc.option(fc.constantFrom(...voidable), { freq: 3 }).map((v) =>
            v === null ? calls : [...calls, { tool: "void_payment" as const, args: { reference: v.args.reference } }],
          )
        : fc.constant(calls);
      const duplicated = withVoid.chain((list) =>
        fc.boolean().map((dup) => (dup && list[0]!.tool === "send_payment" ? [list[0]!, ...list] : list)),
      );
      return duplicated;
    })
    .chain((calls) =>
      fc.record({
        text: fc.constant(`c${conversation} message ${message}`),
        calls: fc.constant(calls),
        cuts: fc.array(cutArbitrary(calls.length), { maxLength: 2 }),
        downstream: fc.dictionary(
          fc.integer({ min: 0, max: calls.length - 1 }).map(String),
          fc.constantFrom<DownstreamFault>("fail_before_accept", "drop_after_accept"),
          { maxKeys: 1 },
        ) as fc.Arbitrary<Partial<Record<number, DownstreamFault>>>,
        // Deaths are rarer: each costs a lease expiry before the call can move on.
        death: fc.oneof(
          { weight: 6, arbitrary: fc.constant(undefined) },
          {
            weight: 1,
            arbitrary: fc.record({
              call: fc.integer({ min: 0, max: calls.length - 1 }),
              when: fc.constantFrom<WorkerDeath["when"]>("before_downstream", "after_response_before_complete"),
            }),
          },
        ),
        route: fc.constantFrom<ReplayRoute>("automatic_retry", "client_resend", "queue_redelivery", "double_send"),
      }),
    );
}

function conversationArbitrary(conversation: number): fc.Arbitrary<ConversationPlan> {
  const messages = (count: number, index: number, previous: PlannedCall[]): fc.Arbitrary<MessagePlan[]> =>
    index >= count
      ? fc.constant([])
      : messageArbitrary(conversation, index, previous).chain((m) =>
          messages(count, index + 1, [...previous, ...m.calls]).map((rest) => [m, ...rest]),
        );
  return fc.integer({ min: 1, max: 3 }).chain((count) => messages(count, 0, [])).map((m) => ({ id: `conv-${conversation}`, messages: m }));
}

export function scenarioArbitrary(): fc.Arbitrary<Scenario> {
  return fc.record({
    conversations: fc.integer({ min: 1, max: 3 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => conversationArbitrary(i)))),
    providerSeed: fc.integer({ min: 0, max: 2 ** 31 - 1 }),
  });
}
