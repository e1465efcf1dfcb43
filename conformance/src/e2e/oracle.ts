import type { Effect } from "@dispatch-once/mock-payments";
import type { CaseContext } from "./world.js";
import type { PlannedCall } from "./scenario.js";

export interface OracleViolation {
  rule: string;
  message: string;
}

/** What identifies an effect downstream: the fields that tell two effects apart. */
function plannedSignature(call: PlannedCall): string | undefined {
  const a = call.args;
  switch (call.tool) {
    case "send_payment":
      return `payment ${a.payee} ${a.amount} ${a.currency} ${a.reference}`;
    case "create_invoice":
      return `invoice ${a.customer} ${a.amount} ${a.currency} ${a.memo}`;
    case "void_payment":
      return `void ${a.reference}`;
    case "search_payments":
      return undefined;
  }
}

function effectSignature(effect: Effect, referenceOf: Map<string, string>): string | undefined {
  const p = effect.payload;
  switch (effect.kind) {
    case "payment_created":
      return `payment ${p.payee} ${p.amount} ${p.currency} ${p.reference}`;
    case "invoice_created":
      return `invoice ${p.customer} ${p.amount} ${p.currency} ${p.memo}`;
    case "payment_voided":
      return `void ${referenceOf.get(String(p.paymentId)) ?? `?${String(p.paymentId)}`}`;
    default:
      return undefined;
  }
}

type Block = { type: string; id?: string; tool_use_id?: string; is_error?: boolean; content?: unknown; name?: string };

/**
 * The Jepsen-style oracle: the downstream effect log against what the conversations committed.
 * Every logical effect of a committed turn happened exactly once; of a failed turn at most once;
 * legitimate repeats were not swallowed; replays returned identical results; abandoned calls
 * were never dispatched; nothing the stream did not establish entered a conversation.
 */
export async function checkOracle(ctx: CaseContext, effects: Effect[]): Promise<OracleViolation[]> {
  const violations: OracleViolation[] = [];
  const referenceOf = new Map<string, string>();
  for (const e of effects) if (e.kind === "payment_created") referenceOf.set(e.resourceId, String(e.payload.reference));

  const lower = new Map<string, number>();
  const upper = new Map<string, number>();
  const bump = (m: Map<string, number>, k: string) => m.set(k, (m.get(k) ?? 0) + 1);

  for (const conversation of ctx.scenario.conversations) {
    const snapshot = await ctx.store.load(conversation.id);
    const messages = snapshot.messages;

    // RECORD-1 / RECORD-3: the committed history is well formed and only holds what streams established.
    const assistants = messages.filter((m) => m.role === "assistant").length;
    if (assistants !== snapshot.turnCount) {
      violations.push({ rule: "TURN-5", message: `${conversation.id}: ${assistants} assistant messages but ${snapshot.turnCount} committed turns` });
    }
    for (let i = 0; i < messages.length; i++) {
      const m = messages[i]!;
      if (m.role !== "assistant" || typeof m.content === "string") continue;
      const uses = (m.content as Block[]).filter((b) => b.type === "tool_use").map((b) => b.id!);
      const next = messages[i + 1];
      const results =
        next && next.role === "user" && Array.isArray(next.content)
          ? (next.content as Block[]).filter((b) => b.type === "tool_result").map((b) => b.tool_use_id!)
          : [];
      if (uses.length > 0 && JSON.stringify(uses) !== JSON.stringify(results)) {
        violations.push({
          rule: "RECORD-1",
          message: `${conversation.id} message ${i}: tool_use ids ${JSON.stringify(uses)} but tool_result ids ${JSON.stringify(results)}`,
        });
      }
    }

    for (const plan of conversation.messages) {
      const content = `${ctx.account} ${plan.text}`;
      const sent = ctx.outcomes.some((o) => o.conversation === conversation.id && o.message === plan.text) ||
        messages.some((m) => m.content === content);
      if (!sent) continue;
      const at = messages.findIndex((m) => m.role === "user" && m.content === content);
      const assistant = at >= 0 ? messages[at + 1] : undefined;
      const committed = assistant !== undefined && assistant.role === "assistant";
      const resultBlocks = committed ? ((messages[at + 2]?.content ?? []) as Block[]) : [];
      plan.calls.forEach((call, index) => {
        const signature = plannedSignature(call);
        if (signature === undefined) return;
        bump(upper, signature);
        const result = resultBlocks.filter((b) => b.type === "tool_result")[index];
        if (committed && result !== undefined && !result.is_error) bump(lower, signature);
      });
    }
  }

  const performed = new Map<string, number>();
  for (const e of effects) {
    const s = effectSignature(e, referenceOf);
    if (s !== undefined) bump(performed, s);
  }
  for (const signature of new Set([...upper.keys(), ...performed.keys()])) {
    const n = performed.get(signature) ?? 0;
    const min = lower.get(signature) ?? 0;
    const max = upper.get(signature) ?? 0;
    if (n > max) {
      violations.push({ rule: "CONF-2", message: `${signature}: performed ${n} times downstream, but at most ${max} calls were planned (a duplicate)` });
    } else if (n < min) {
      violations.push({ rule: "TURN-1", message: `${signature}: performed ${n} times, but ${min} committed calls report success (a swallowed effect)` });
    }
  }

  // STREAM-3: an abandoned call is never dispatched in the attempt that abandoned it.
  const completed = new Set(ctx.events.filter((e) => e.type === "call_complete").map((e) => (e as { callId: string }).callId));
  for (const e of ctx.events) {
    if (e.type === "call_abandoned" && completed.has(e.callId)) {
      violations.push({ rule: "STREAM-3", message: `call ${e.callId} was abandoned but also dispatched` });
    }
  }

  // DISPATCH-5: every answer for one key is the same bytes, and a payment result names a real payment.
  const byKey = new Map<string, string>();
  const createdIds = new Set(effects.filter((e) => e.kind === "payment_created").map((e) => e.resourceId));
  for (const outcome of ctx.outcomes) {
    for (const turn of outcome.result?.turns ?? []) {
      for (const call of turn.calls) {
        if (call.key === undefined || call.result === undefined || call.name === "search_payments") continue;
        const text = JSON.stringify(call.result);
        const seen = byKey.get(call.key);
        if (seen !== undefined && seen !== text) {
          violations.push({ rule: "DISPATCH-5", message: `key ${call.key} answered ${seen} and later ${text}` });
        }
        byKey.set(call.key, text);
        const id = (call.result as { paymentId?: string }).paymentId;
        if (call.name === "send_payment" && id !== undefined && !createdIds.has(id)) {
          violations.push({ rule: "DISPATCH-5", message: `send_payment answered with ${id}, which the payments API never created` });
        }
      }
    }
  }
  return violations;
}
