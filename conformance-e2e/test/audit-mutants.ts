/**
 * Audit mutants (not planted before): each plants one realistic bug through the hooks the kit's
 * planted-bug tests use (dispatcher factory, tool wrapper, ledger subject, conversation store).
 */
import {
  Dispatcher,
  MemoryConversationStore,
  type JsonValue,
  ToolError,
  ToolRegistry,
  type CallDispatcher,
  type ClaimResult,
  type ConversationStore,
  type Ledger,
  type LedgerRow,
  type TurnDispatch,
} from "@dispatch-once/core";
import { memoryLedgerSubject, type LedgerSubject } from "@dispatch-once/conformance/ledger";
import type { EndToEndOptions } from "../src/index.js";

export const memory = memoryLedgerSubject();

type DispatcherFactory = NonNullable<EndToEndOptions["dispatcher"]>;
type Tools = Parameters<DispatcherFactory>[0];

/** The real dispatcher, as the kit builds it by default: the hooks' mutants wrap it, and their controls run it. */
export function realDispatcher(tools: Tools, ledger: Ledger, defaults: Parameters<DispatcherFactory>[2]): Dispatcher {
  return new Dispatcher({ ...defaults, ledger, tools: new ToolRegistry(tools) });
}

/**
 * A dispatcher whose turns are `turn`'s, its effect classes, keys and carried calls' dispatch
 * (TURN-23: a call a later turn of the message makes again, answered under an earlier turn's key)
 * and ledger the inner one's: a plant breaks what its `turn` breaks, and keeps TURN-23, which the runner
 * gives only a dispatcher with `keyFor` and `dispatch` of its own (test/e2e-deferred-call-planted.test.ts
 * plants a runner without it).
 */
export function wrapDispatcher(inner: Dispatcher, turn: CallDispatcher["turn"], options: { carry?: boolean } = {}): CallDispatcher {
  // A plant whose turn derives other keys than the inner keyFor (`carry: false`) gets neither: the
  // runner would read its turns back under keys it never dispatched, and carry under them.
  if (options.carry === false) return { turn, effectClassOf: (name) => inner.effectClassOf(name) };
  // `ledger` too: the runner lists a resumed turn's rows through it (RECORD-8), and carries what they list.
  const carrying = { keyFor: inner.keyFor.bind(inner), dispatch: inner.dispatch.bind(inner), ledger: inner.ledger };
  return { turn, effectClassOf: (name) => inner.effectClassOf(name), ...carrying } as CallDispatcher;
}

/** The ledger, with each claim's result shown to `seen` first (which claims took over an expired one). */
export function observeClaims(ledger: Ledger, seen: (key: string, claim: ClaimResult) => void): Ledger {
  const observed = Object.create(ledger) as Ledger;
  observed.claim = async (request) => {
    const claim = await ledger.claim(request);
    seen(request.key, claim);
    return claim;
  };
  return observed;
}

/**
 * The ledger, with each `listRows` page leaving out the rows `hide` picks (the capability still
 * declared, so a resumed turn's record says it listed them); `hidden` counts what it left out.
 */
export function listingWithout(ledger: Ledger, hide: (row: LedgerRow) => boolean, hidden: { count: number } = { count: 0 }): Ledger {
  const view = Object.create(ledger) as Ledger;
  view.listRows = async (query) => {
    const page = await ledger.listRows!(query);
    const rows = page.rows.filter((row) => !hide(row));
    hidden.count += page.rows.length - rows.length;
    return { ...page, rows };
  };
  return view;
}

export function wrapTools(tools: Tools, run: (tool: Tools[number], args: unknown, context: any) => Promise<unknown>): Tools {
  return tools.map((tool) => ({ ...tool, run: (args: unknown, context: any) => run(tool, args, context) }));
}

/** Every method of a store bound to it, with some replaced. */
export function storeWith(inner: ConversationStore, overrides: Partial<ConversationStore>): ConversationStore {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop in overrides) return (overrides as Record<string | symbol, unknown>)[prop];
      const value = Reflect.get(target, prop, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

function ledgerSubjectWith(make: (inner: Ledger) => Ledger): LedgerSubject {
  return {
    ...memory,
    async create(options) {
      const fixture = await memory.create(options);
      const ledger = make(fixture.ledger);
      return { ...fixture, ledger, reopen: async () => make(await fixture.reopen()) };
    },
  };
}

function ledgerWith(inner: Ledger, overrides: Partial<Ledger>): Ledger {
  return new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop in overrides) return (overrides as Record<string | symbol, unknown>)[prop];
      const value = Reflect.get(target, prop, receiver);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

export interface AuditMutant {
  name: string;
  /** The MUST rule it breaks. */
  breaks: string;
  subject?: LedgerSubject;
  options: () => Partial<EndToEndOptions>;
}

export const MUTANTS: AuditMutant[] = [
  {
    // Each call counts its ordinal alone (as if keyed by its toolu_ id): two identical calls of
    // one response both get ordinal 0, one key; the second is answered with the first's result.
    name: "ordinalPerCall",
    breaks: "DISPATCH-6",
    options: () => ({
      dispatcher: (tools, ledger, defaults) => {
        const inner = realDispatcher(tools, ledger, defaults);
        return wrapDispatcher(inner, (context) => ({ dispatch: (call) => inner.turn(context).dispatch(call) }), { carry: false });
      },
    }),
  },
  {
    // The ordinal count is kept per turn across attempts instead of starting again (TURN-6).
    name: "ordinalAcrossAttempts",
    breaks: "TURN-6",
    options: () => ({
      dispatcher: (tools, ledger, defaults) => {
        const inner = realDispatcher(tools, ledger, defaults);
        const turns = new Map<string, TurnDispatch>();
        return wrapDispatcher(inner, (context) => {
          const id = `${context.conversationId}|${context.turnIndex}`;
          if (!turns.has(id)) turns.set(id, inner.turn(context));
          return turns.get(id)!;
        });
      },
    }),
  },
  {
    // A re-run of a key (a takeover, a released claim) goes out without its Idempotency-Key.
    name: "dropsKeyOnRerun",
    breaks: "DISPATCH-4",
    options: () => {
      const ran = new Set<string>();
      return {
        dispatcher: (tools, ledger, defaults) =>
          realDispatcher(
            wrapTools(tools, (tool, args, context) => {
              const again = ran.has(context.idempotencyKey);
              ran.add(context.idempotencyKey);
              return tool.run(args, again ? { ...context, idempotencyKey: undefined } : context);
            }),
            ledger,
            defaults,
          ),
      };
    },
  },
  {
    // A lost response (the downstream may have performed it) is reported as a definite decline.
    name: "lostResponseAsDeclined",
    breaks: "RECORD-3",
    options: () => ({
      dispatcher: (tools, ledger, defaults) =>
        realDispatcher(
          wrapTools(tools, async (tool, args, context) => {
            try {
              return await tool.run(args, context);
            } catch (e) {
              if (ToolError.isInstance(e) && (e.disposition === "definite" || e.disposition === "not_performed")) throw e;
              throw new ToolError(e instanceof Error ? e.message : String(e), { disposition: "definite", code: "declined" });
            }
          }),
          ledger,
          defaults,
        ),
    }),
  },
  {
    // A lost response is reported as "not performed": the claim is released as if nothing happened.
    name: "lostResponseAsNotPerformed",
    breaks: "RECORD-2",
    options: () => ({
      dispatcher: (tools, ledger, defaults) =>
        realDispatcher(
          wrapTools(tools, async (tool, args, context) => {
            try {
              return await tool.run(args, context);
            } catch (e) {
              if (ToolError.isInstance(e) && (e.disposition === "definite" || e.disposition === "not_performed")) throw e;
              throw new ToolError(e instanceof Error ? e.message : String(e), { disposition: "not_performed", code: "not_sent" });
            }
          }),
          ledger,
          defaults,
        ),
    }),
  },
  {
    // The ledger forgets "unknown": markUnknown releases the row, so an unkeyed write is re-run.
    name: "unknownReleased",
    breaks: "EFFECT-4",
    subject: ledgerSubjectWith((inner) => ledgerWith(inner, { markUnknown: (k, f) => inner.release(k, f) })),
    options: () => ({}),
  },
  {
    // The runner does not pass `resumed` on to the dispatcher (TURN-15).
    name: "resumedNotPassed",
    breaks: "TURN-15",
    options: () => ({
      dispatcher: (tools, ledger, defaults) => {
        const inner = realDispatcher(tools, ledger, defaults);
        return wrapDispatcher(inner, (context) => inner.turn({ ...context, resumed: false }));
      },
    }),
  },
  {
    // The store never says a turn is resumed (TURN-15).
    name: "storeNeverResumed",
    breaks: "TURN-15",
    options: () => ({
      conversationStore: ({ now }) => {
        const inner = new MemoryConversationStore({ now });
        return storeWith(inner, {
          beginTurn: async (c, f) => {
            const s = await inner.beginTurn(c, f);
            return s === undefined ? s : { ...s, resumed: false };
          },
        });
      },
    }),
  },
  {
    // Superseded-attempt records are reported as events but never kept beside the conversation.
    name: "supersededRecordsNotKept",
    breaks: "TURN-13",
    options: () => ({
      conversationStore: ({ now }) => {
        const inner = new MemoryConversationStore({ now });
        return storeWith(inner, {
          addRecord: async (c, r) => {
            if ((r as { kind?: string }).kind === "superseded_attempt") return;
            return inner.addRecord(c, r);
          },
        });
      },
    }),
  },
  {
    // Records written without the lease (a failed turn whose holder lost the lease, RECORD-8
    // records) are dropped: only failMessage keeps a record. A RECORD-8 record travels with its
    // commit on a store that declares recordsWithCommit: dropped there too.
    name: "addRecordNoop",
    breaks: "RECORD-4",
    options: () => ({
      conversationStore: ({ now }) => {
        const inner = new MemoryConversationStore({ now });
        return storeWith(inner, {
          addRecord: async () => {},
          commitTurn: async (c, { record: _dropped, ...commit }) => inner.commitTurn(c, commit),
        });
      },
    }),
  },
  // ---- mutation round of 2026-12-03: bugs above the ledger ----
  {
    // The payment goes through, then the tool reports a definite decline: the turn commits an
    // error for a payment that happened, and the user is told it did not.
    name: "paidThenDeclined",
    breaks: "RECORD-3",
    options: () => ({
      dispatcher: (tools, ledger, defaults) =>
        realDispatcher(
          wrapTools(tools, async (tool, args, context) => {
            const result = await tool.run(args, context);
            if (tool.name === "send_payment") throw new ToolError("card declined", { disposition: "definite", code: "declined" });
            return result;
          }),
          ledger,
          defaults,
        ),
    }),
  },
  {
    // The store keeps every record with each call's and each key's effect rewritten to
    // not_happened (a column that defaults the effect and is never written).
    name: "storedRecordsDeny",
    breaks: "RECORD-4",
    options: () => ({
      conversationStore: ({ now }) => {
        const inner = new MemoryConversationStore({ now });
        return storeWith(inner, {
          failMessage: (c, f, id, record) => inner.failMessage(c, f, id, denyingEffects(record)),
          addRecord: (c, record) => inner.addRecord(c, denyingEffects(record)),
          commitTurn: (c, commit) => inner.commitTurn(c, commit.record === undefined ? commit : { ...commit, record: denyingEffects(commit.record) }),
        });
      },
    }),
  },
  {
    // The store keeps each record as given and, beside it, a copy that denies every effect (a
    // second writer, a summary row): what the runner reported is kept, and so is a lie.
    name: "storedDenyingCopy",
    breaks: "RECORD-5",
    options: () => ({
      conversationStore: ({ now }) => {
        const inner = new MemoryConversationStore({ now });
        return storeWith(inner, {
          failMessage: async (c, f, id, record) => {
            await inner.failMessage(c, f, id, record);
            await inner.addRecord(c, denyingEffects(record));
          },
          addRecord: async (c, record) => {
            await inner.addRecord(c, record);
            await inner.addRecord(c, denyingEffects(record));
          },
        });
      },
    }),
  },
];

/** A record with every call's and every key's effect said to be not_happened. */
function denyingEffects(record: JsonValue): JsonValue {
  const copy = structuredClone(record) as { calls?: { effect?: string }[]; effects?: { effect?: string }[] };
  for (const x of copy.calls ?? []) if (x.effect !== undefined) x.effect = "not_happened";
  for (const x of copy.effects ?? []) if (x.effect !== undefined) x.effect = "not_happened";
  return copy as JsonValue;
}
