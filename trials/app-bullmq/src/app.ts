// The worker's assistant: ConversationRunner (packages/anthropic README, "Adopting it") over
// @anthropic-ai/sdk, a Redis ledger (packages/ledger-redis) and a PostgreSQL conversation store
// (packages/conversation-postgres). What the user is told comes from the runner's records and typed
// errors, as the README's handleUserMessage does.
import Anthropic from "@anthropic-ai/sdk";
import pg from "pg";
import { ConversationBusyError, Dispatcher, StoreUnavailableError, UnguardedDispatcher, effectOf, isDispatchOnceError } from "@dispatch-once/core";
import { ConversationRunner, TurnFailedError } from "@dispatch-once/anthropic";
import { PostgresConversationStore } from "@dispatch-once/conversation-postgres";
import { createRedisLedger } from "@dispatch-once/ledger-redis";
import { tools } from "./tools.js";

/** `forMessage`: the client's id of an earlier message that failed, when the call was that message's (not this one's). */
export interface Effect { name: string; key: string; effect: string; input?: unknown; paymentId?: string; forMessage?: string }
export type Reply =
  | { status: "answered"; text: string; fromStore: boolean; calls: { name: string; key: string | undefined; result?: unknown; error?: string }[]; untold: Effect[] }
  | { status: "failed"; text: string; effects: Effect[]; retryable: boolean; cause: string }
  | { status: "unsaved"; text: string; effects: Effect[] }
  | { status: "busy"; text: string; inProgress: boolean; calls?: BusyCall[]; unknown?: string }
  | { status: "error"; code: string; effect: string; text: string };
/**
 * One call of a message another worker is still on, as the client is told it (the anthropic
 * README's ConversationBusyError entry, TURN-25): it happened (with the payment id the ledger
 * stored), may have happened (under way, or its worker stopped), or did not go through.
 */
export interface BusyCall { name: string; key: string; turnIndex: number; told: "happened" | "may_have_happened" | "did_not_happen"; state: string; input?: unknown; paymentId?: string; error?: string; forMessage?: string }

/**
 * The message a call was made for, as the client knows it, when it is not this one: the runner names
 * an earlier message that failed at the turn index this one took (`messageId` of a busy answer's
 * effects and of a resumed_turn record's calls, TURN-25, RECORD-8). Its effect was that message's,
 * told to its sender when it failed; this message's sender must not read it as one of theirs. Our
 * runner message ids are BullMQ job ids, `<conversation>.<client message id>` (web.ts).
 * PLANT=busyignoresmessageid: the app before it read the field.
 */
function earlierMessage(conversationId: string, ownMessageId: string, madeFor: string | undefined): string | undefined {
  if (madeFor === undefined || madeFor === ownMessageId || process.env.PLANT === "busyignoresmessageid") return undefined;
  return madeFor.startsWith(`${conversationId}.`) ? madeFor.slice(conversationId.length + 1) : madeFor;
}
const paymentIdOf = (result: unknown) => {
  const id = (result as { paymentId?: unknown } | undefined)?.paymentId;
  return typeof id === "string" ? id : undefined;
};
const effectOfEntry = (e: { name: string; key: string; effect: string; input?: unknown; result?: unknown }, forMessage?: string): Effect => {
  const paymentId = forMessage !== undefined ? paymentIdOf(e.result) : undefined;
  return { name: e.name, key: e.key, effect: e.effect, ...(e.input !== undefined ? { input: e.input } : {}), ...(paymentId !== undefined ? { paymentId } : {}), ...(forMessage !== undefined ? { forMessage } : {}) };
};
const fromEarlier = (forMessage: string | undefined) => (forMessage !== undefined ? `from your earlier message ${forMessage}, which failed: ` : "");
const say = (e: Effect) => {
  const args = e.input !== undefined ? ` ${JSON.stringify(e.input)}` : "";
  if (e.forMessage !== undefined) return `${fromEarlier(e.forMessage)}${e.name} ${e.effect.replace(/_/g, " ")}${e.paymentId !== undefined ? ` (payment ${e.paymentId})` : ""}${args}`;
  return `${e.name}: ${e.effect.replace(/_/g, " ")}${args}`;
};

export async function openApp(config: { databaseUrl: string; schema: string; redisUrl: string; ledgerPrefix: string; providerURL: string; owner: string; unguarded: boolean }) {
  const pool = new pg.Pool({ connectionString: config.databaseUrl, max: 4 });
  pool.on("error", (error) => console.warn("pg pool:", error.message));
  const store = new PostgresConversationStore({ pool, schema: config.schema, timeoutMs: 3000 });
  await store.migrate();
  const ledger = await createRedisLedger({ url: config.redisUrl, prefix: config.ledgerPrefix });
  const client = new Anthropic({ apiKey: "sk-trial", baseURL: config.providerURL, maxRetries: 2 });
  const dispatcher = config.unguarded ? new UnguardedDispatcher(tools) : new Dispatcher({ tools, ledger, leaseMs: 3000 });
  const runner = new ConversationRunner({
    client,
    dispatcher,
    store,
    model: "claude-sonnet-5-5",
    tools: tools.providerSchemas(),
    system: "You are a payments assistant. Pay only when asked.",
    owner: config.owner,
    turnLeaseMs: Number(process.env.TURN_LEASE_MS ?? 4000),
    busyWaitMs: Number(process.env.BUSY_WAIT_MS ?? 20_000),
    retry: { attempts: 2 },
    onEvent: (e) => {
      if (e.type === "stream_failed") console.error(`[${config.owner}] stream_failed ${e.conversationId} attempt ${e.attempt}: ${e.error}`);
    },
  });

  async function handle(conversationId: string, messageId: string, text: string): Promise<Reply> {
    try {
      const { turns, records, fromStore } = await runner.send(conversationId, { id: messageId, content: text });
      const calls = turns.flatMap((t) => t.calls.map((c) => ({ name: c.name, key: c.key, ...(c.error !== undefined ? { error: c.error.message } : { result: c.result }) })));
      // Effects of a resumed or retried turn that its committed answer does not mention (RECORD-8).
      // A call of an earlier failed message is told as that message's, not as this one's.
      const untold = (records ?? []).flatMap((r) => r.calls).map((c) => effectOfEntry(c, earlierMessage(conversationId, messageId, c.messageId)));
      return { status: "answered", text: [turns.map((t) => t.text).join(""), ...untold.map(say)].filter((l) => l !== "").join("\n"), fromStore: fromStore === true, calls, untold };
    } catch (error) {
      if (TurnFailedError.isInstance(error)) {
        const effects = error.record.effects.map((e) => effectOfEntry(e));
        const cause = `${error.record.error.code ?? error.record.error.name}: ${error.record.error.message}`;
        const advice = error.record.retryable ? "the answer did not complete; send the same message again" : `the turn failed and sending it again will not help (${cause})`;
        return { status: "failed", text: [...effects.map(say), advice].join("\n"), effects, retryable: error.record.retryable, cause };
      }
      if (StoreUnavailableError.isInstance(error) && error.effects !== undefined) {
        const effects = error.effects.map((e) => effectOfEntry(e));
        return { status: "unsaved", text: effects.map((e) => `${say(e)}; its confirmation was not saved, send the same message again`).join("\n"), effects };
      }
      // Another worker is on this very message (a redelivered or re-run job meeting the holder's
      // turn lease): tell the client which calls the ledger lists for it, or that it is unknown.
      // PLANT=busyuntold: the app before TURN-25's adoption (busy answered as any typed error).
      if (ConversationBusyError.isInstance(error) && process.env.PLANT !== "busyuntold") return busyReply(conversationId, messageId, error);
      if (isDispatchOnceError(error)) return { status: "error", code: error.code, effect: String(effectOf(error)), text: error.message };
      throw error;
    }
  }

  function busyReply(conversationId: string, messageId: string, error: ConversationBusyError): Reply {
    const again = "still working on it; send the same message again for the answer";
    if (!error.inProgress) return { status: "busy", inProgress: false, text: `your message is queued behind another one; ${again}` };
    if (error.effects === undefined) {
      const unknown = error.effectsUnknown ?? "not listed";
      return { status: "busy", inProgress: true, unknown, text: `which payments it made is not known yet (${unknown})\n${again}` };
    }
    // Plants for the oracle's busy checks: PLANT=busyoverclaims tells every listed call "happened";
    // PLANT=busydropsunderway leaves out the calls that may have happened.
    const listed = process.env.PLANT === "busydropsunderway" ? error.effects.filter((e) => e.effect !== "may_have_happened") : error.effects;
    const calls = listed.map((e): BusyCall => {
      const paymentId = paymentIdOf(e.result);
      const forMessage = earlierMessage(conversationId, messageId, e.messageId);
      return {
        name: e.name, key: e.key, turnIndex: e.turnIndex, state: e.state,
        told: e.effect === "happened" || process.env.PLANT === "busyoverclaims" ? "happened" : e.effect === "not_happened" ? "did_not_happen" : "may_have_happened",
        ...(e.input !== undefined ? { input: e.input } : {}),
        ...(paymentId !== undefined ? { paymentId } : {}),
        ...(e.error !== undefined ? { error: e.error.message } : {}),
        ...(forMessage !== undefined ? { forMessage } : {}),
      };
    });
    const line = (c: BusyCall) => {
      const args = c.input !== undefined ? ` ${JSON.stringify(c.input)}` : "";
      const from = fromEarlier(c.forMessage);
      if (c.told === "happened") return `${from}${c.name} happened${c.paymentId !== undefined ? ` (payment ${c.paymentId})` : ""}${args}`;
      if (c.told === "did_not_happen") return `${from}${c.name} did not go through${args}: ${c.error ?? "failed"}`;
      return `${from}${c.name} may have happened (under way, or its worker stopped)${args}`;
    };
    const lines = calls.length > 0 ? calls.map(line) : ["no call of it had started when we looked"];
    return { status: "busy", inProgress: true, calls, text: [...lines, again].join("\n") };
  }

  async function close() {
    await store.close();
    await ledger.close();
    await pool.end();
  }
  return { handle, close, store, ledger, runner };
}
