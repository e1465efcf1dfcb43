import { MAX_FAILED_TURNS_LIMIT, type ConversationStore, type FailedTurn, type FailedTurnsQuery, type LedgerRow, type StalledMessage, type StalledMessagesQuery } from "@dispatch-once/core";
import { checkTargetOptions, listingOptions, stringOption, supports, type Command, type CommandContext, type OptionValues } from "../context.js";
import { formatAge, parseDuration } from "../duration.js";
import { UnsupportedOperationError } from "../errors/unsupported-operation-error.js";
import { UsageError } from "../errors/usage-error.js";
import { iso, table } from "../format.js";
import { openConversationStore, openLedger, parseTarget, type OpenedConversationStore } from "../target.js";
import { isRecordRowName } from "../record-rows.js";

/** Turns shown when --limit is not given. */
const DEFAULT_TURN_ROWS = 100;

/** Longest error message quoted in a RE-SEND verdict (the whole record is in --json). */
const MAX_REASON_CHARS = 80;

/**
 * Whether a re-send of the failed message's id would help now, in words: the store's
 * `reopenable` (TURN-12, TURN-17) first, since a message that would not reopen only gets its
 * stored failure back whatever its record says; then the record's `retryable`, which the runner
 * wrote at the failure (RECORD-5), except beside a call no re-send settles (an unknown outcome, an
 * effect that happened and was never completed), which an older runner's record may list as
 * retryable. "unknown" when the store does not say (a store written before
 * `reopenable` existed): the record alone cannot tell, since a later message may have been bound.
 */
export function resendVerdict(turn: FailedTurn): string {
  if (turn.reopenable === undefined) return "unknown";
  if (!turn.reopenable) return "no: a later message was bound";
  const record = isObject(turn.failure) ? turn.failure : {};
  // A record an older runner wrote may say retryable beside a call no re-send settles (RECORD-5).
  if (record["retryable"] === true && !callsOf(record).some(notSettledByResend)) return "yes";
  if (record["retryable"] !== false && record["retryable"] !== true) return "yes: it reopens; the record does not say if that helps";
  return `no: ${whyNotRetryable(record)}`;
}

/** The reason a runner's failed-turn record says a re-send cannot help (RECORD-5), as far as it shows. */
function whyNotRetryable(record: Record<string, unknown>): string {
  if (record["position"] === "turn_limit") return "the turn reached the runner's maxTurns";
  if (record["position"] === "commit_refused") return "the store refused the turn's commit";
  // A reopened message's retry taken up after its re-send window by the runner (TURN-12).
  if (record["position"] === "past_resend_window") return "its retry was taken up after the re-send window (past_resend_window)";
  const calls = callsOf(record);
  if (calls.some((c) => c["status"] === "outcome_unknown")) return "an effect's outcome is unknown (settle it first: reconcile, resolve)";
  if (calls.some((c) => c["status"] === "result_not_storable")) return "an effect happened but its result could not be stored";
  if (calls.some(notSettledByResend)) return "an effect happened and was never recorded as completed (its row is, or may become, an operator's: check it first)";
  const error = isObject(record["error"]) ? record["error"] : undefined;
  if (error === undefined) return "the record says a re-send cannot help";
  const text = `${String(error["name"] ?? "Error")}: ${String(error["message"] ?? "")}`;
  return `the record says a re-send cannot help (${text.length > MAX_REASON_CHARS ? `${text.slice(0, MAX_REASON_CHARS)}…` : text})`;
}

/** The ledger's retention `turns` judges re-sends by when neither --retention nor DISPATCH_ONCE_RETENTION is given: the adapters' default. */
export const DEFAULT_LEDGER_RETENTION_MS = 86_400_000;

/**
 * The RE-SEND verdict with the runner's re-send window (TURN-12, LEDGER-13): a re-send of a turn
 * that failed longer ago than the window is refused by the runner (`past_resend_window`), because
 * past the ledger's retention it would meet no row for the calls its failed attempts made and run
 * them again. The window is the runner's `resendWindowMs`: by default 23/24 of the ledger's
 * retention, as the runner derives it. A re-send that returns the stored failure (a later message
 * bound) runs nothing and keeps its verdict.
 */
export function resendVerdictAt(turn: FailedTurn, pastWindow: boolean, windowText: string): string {
  // A store that judged the window says reopenable false for a turn past it: the window is why.
  if (!pastWindow || (turn.reopenable === false && turn.pastReopenWindow !== true)) return resendVerdict(turn);
  return `no: its re-send window has passed (${windowText}): the runner refuses the re-send (past_resend_window), since the ledger may have swept its calls' rows; send a new message`;
}

/** The runner's default re-send window for a ledger retention (TURN-12): 23/24 of it. */
export function defaultResendWindowMs(retentionMs: number): number {
  return Math.floor((retentionMs * 23) / 24);
}

function callsOf(record: Record<string, unknown>): Record<string, unknown>[] {
  return Array.isArray(record["calls"]) ? record["calls"].filter(isObject) : [];
}

/**
 * A call of a failed-turn record that no re-send settles, as the runner judges it (RECORD-5,
 * `notSettledByResend` in @dispatch-once/runner): its outcome is unknown, or its effect happened
 * and it was never completed. Read from the calls, since a record an older runner wrote may say
 * `retryable: true` beside one.
 */
function notSettledByResend(call: Record<string, unknown>): boolean {
  return call["status"] === "outcome_unknown" || (call["effect"] === "happened" && call["status"] !== "completed");
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export const turnsCommand: Command = {
  name: "turns",
  summary: "list failed turns (--failed) or stalled messages (--stalled: in progress, no live turn lease) of the conversation store",
  options: {
    failed: { type: "boolean" },
    stalled: { type: "boolean" },
    ledger: { type: "string", short: "l" },
    "ledger-table": { type: "string" },
    "ledger-schema": { type: "string" },
    "ledger-prefix": { type: "string" },
    store: { type: "string", short: "s" },
    schema: { type: "string" },
    "table-prefix": { type: "string" },
    conversation: { type: "string" },
    "older-than": { type: "string" },
    limit: { type: "string" },
    "page-size": { type: "string" },
    retention: { type: "string" },
    "resend-window": { type: "string" },
    json: { type: "boolean" },
  },
  positionals: [0, 0],
  help: `Usage: dispatch-once turns --failed --store <target> [options]
       dispatch-once turns --stalled --store <target> [--ledger <target>] [options]

List the user messages whose turn failed and was recorded (state "failed") and that no re-send
has reopened, oldest failure first, with their turn index, failed-turn record, and whether a
re-send would help now. A re-send of such a message (the same message id) retries it at the same
turn index only while no other message of its conversation has been bound since (TURN-12); once
one has (a new message takes the failed turn's index), a re-send returns the stored failure and
runs nothing, although the record, written at the failure, may still say "retryable": true.
The RE-SEND column (and "resend" in --json, beside the store's "reopenable") says which:
  yes                            the store would reopen it, and its record says a retry can help
  no: a later message was bound  a re-send only returns the stored failure
  yes: it reopens; ...           the store would reopen it; the record does not say more
  no: <why>                      the record, or one of its calls, says a retry cannot help (an
                                 effect left unknown, or one that happened and was never completed, ...)
  no: its re-send window has passed (<age>): ...
                                 a runner refuses such a re-send (TURN-12): past the ledger's
                                 retention its calls' rows may be gone (LEDGER-13), and running
                                 them again would pay a payment that happened twice. Measured on
                                 the store's clock from the turn's FIRST failure, as the runner
                                 measures it (a retry that failed again does not restart it), or
                                 from the message's binding where the store dates it (earlier:
                                 its first holder's calls; for a message bound where a failed one
                                 stopped, that one's: its calls met those rows), by the store in the listing's own
                                 query ("firstFailedAt" and "pastReopenWindow" in --json); for a
                                 store that keeps only the last failure, from that, as the runner
                                 then does too; "pastResendWindow" in --json
  unknown                        the store does not say whether a re-send would reopen it

--stalled lists instead the messages in progress (bound to a turn index, neither committed nor
failed) whose conversation's turn lease was released, or expired at least --older-than ago on the
store's clock (TURN-22): a runner died or gave up mid-turn (after a payment ran, before the commit)
and nobody re-sent the message. Nothing answers it, and the user was told nothing, until the same
message id is re-sent (or the conversation gets a new message, whose runner resumes it first,
TURN-15). A message a live lease holds is never listed. STALLED SINCE is the lapsed lease's expiry,
or, for a released lease (no release time is kept), the message's binding. With --ledger, LEDGER
names the ledger's rows of that turn (conversation and turn index): what its calls did (not
Dispatch-Once's own bookkeeping rows, which hold no effect).

Options:
      --failed                 list failed turns (see above)
      --stalled                list stalled messages (see above); exactly one of the two
  -s, --store <target>         the conversation store: a SQLite file (./chat.db or
                               sqlite:./chat.db) or postgres://... / postgresql://...
                               Default: the DISPATCH_ONCE_STORE environment variable.
      --schema <name>          PostgreSQL schema (default public)
      --table-prefix <prefix>  table name prefix (default dispatch_once_)
      --conversation <id>      only this conversation's failed turns
      --older-than <age>       only turns that failed (--stalled: whose lease lapsed) at least
                               this long ago: 30s, 10m, 2h, 7d
      --limit <n>              print at most n turns (default ${DEFAULT_TURN_ROWS}; 0 = all)
      --page-size <n>          turns asked of the store per page (default and most ${MAX_FAILED_TURNS_LIMIT})
      --retention <age>        your application's ledger retention (its retentionMs), e.g. 7d: a
                               failure older than that is not worth a re-send (see above). Default:
                               the DISPATCH_ONCE_RETENTION environment variable, else 24h, the
                               adapters' default
      --resend-window <age>    your runner's resendWindowMs, e.g. 23h. Default: 23/24 of the
                               retention, as the runner derives it
      --json                   one JSON object per line
  -l, --ledger <target>        with --stalled: the ledger, to show each stalled turn's rows
                               (--ledger-table, --ledger-schema, --ledger-prefix as list's
                               --table, --schema, --prefix)

Examples:
  dispatch-once turns --failed --store postgres://app@db/app --older-than 1h
  dispatch-once turns --stalled --store postgres://app@db/app --schema chat --older-than 15m --ledger postgres://app@db/app`,
  async run({ io, values, command }) {
    if (values["failed"] === true && values["stalled"] === true) throw new UsageError("say which: one of --failed and --stalled, not both", command);
    if (values["failed"] !== true && values["stalled"] !== true) throw new UsageError("say which turns: --failed or --stalled", command);
    const target = stringOption(values, "store") ?? io.env["DISPATCH_ONCE_STORE"];
    if (target === undefined || target === "") throw new UsageError("no conversation store: pass --store <target> or set DISPATCH_ONCE_STORE", command);
    if (values["stalled"] === true) return listStalled(io, values, command, target);
    for (const name of ["ledger", "ledger-table", "ledger-schema", "ledger-prefix"]) {
      if (values[name] !== undefined) throw new UsageError(`--${name} is for --stalled`, command);
    }
    const query: FailedTurnsQuery = {};
    const { conversationId, olderThanMs, limit, pageSize, json } = listingOptions(values, command, { limit: DEFAULT_TURN_ROWS, maxPageSize: MAX_FAILED_TURNS_LIMIT });
    if (conversationId !== undefined) query.conversationId = conversationId;
    if (olderThanMs !== undefined) query.olderThanMs = olderThanMs;
    checkTargetOptions(parseTarget(target, io.cwd).kind, values, { sqlite: ["table-prefix"], postgres: ["schema", "table-prefix"] }, "conversation store", command);
    const schema = stringOption(values, "schema");
    const tablePrefix = stringOption(values, "table-prefix");
    const retentionGiven = stringOption(values, "retention");
    const retentionEnv = io.env["DISPATCH_ONCE_RETENTION"];
    const retentionText = retentionGiven ?? (retentionEnv !== undefined && retentionEnv.trim() !== "" ? retentionEnv.trim() : undefined);
    const retentionMs = retentionText === undefined ? DEFAULT_LEDGER_RETENTION_MS : parseDuration(retentionText, retentionGiven !== undefined ? "--retention" : "DISPATCH_ONCE_RETENTION", command);
    const retentionShown = retentionText?.trim() ?? "24h, the adapters' default: pass --retention";
    const windowGiven = stringOption(values, "resend-window");
    const windowMs = windowGiven === undefined ? defaultResendWindowMs(retentionMs) : parseDuration(windowGiven, "--resend-window", command);
    if (windowMs > retentionMs) throw new UsageError(`--resend-window (${windowGiven}) must not exceed the ledger's retention (${retentionShown}): a runner refuses such a window`, command);
    const windowShown = windowGiven?.trim() ?? `23/24 of the ledger's retention, ${retentionShown}`;

    const opened = await openConversationStore(target, {
      cwd: io.cwd,
      ...(schema !== undefined ? { schema } : {}),
      ...(tablePrefix !== undefined ? { tablePrefix } : {}),
    });
    const store: ConversationStore = opened.store;
    try {
      if (store.listFailedTurns === undefined) throw new UnsupportedOperationError("listFailedTurns", opened.display);
      const now = Date.now();
      const printed: string[][] = [];
      const listed: FailedTurn[] = [];
      let count = 0;
      let more = false;
      let cursor: string | undefined;
      // A store that keeps the first failure judges the window itself, from the first failure or
      // the binding where it dates it (TURN-12), in the listing's own query: reopenable and pastReopenWindow, as a runner's
      // re-send with that window would meet them (TURN-17).
      const windowed = store.capabilities?.supports?.reopenWindow === true;
      if (windowed) query.reopenWithinMs = windowMs;
      do {
        const want = limit === 0 ? pageSize : Math.min(pageSize, limit - count);
        const page = await store.listFailedTurns({ ...query, limit: want, ...(cursor !== undefined ? { cursor } : {}) });
        for (const turn of page.turns) {
          count += 1;
          listed.push(turn);
        }
        cursor = page.cursor;
        if (limit !== 0 && count >= limit && cursor !== undefined) more = true;
      } while (cursor !== undefined && (limit === 0 || count < limit));
      // Otherwise: which of them failed longer ago than the window, from their LAST failure (the
      // only time such a store keeps, and what the runner counts from for it), on the STORE's
      // clock (its olderThanMs), not this machine's: listed after them, so a turn that crosses the
      // line meanwhile is counted past it. They come first in the same order, so at most as many.
      const past = new Set<string>();
      let pastCursor: string | undefined;
      if (!windowed) {
        do {
          const page = await store.listFailedTurns({ ...query, olderThanMs: Math.max(query.olderThanMs ?? 0, windowMs), limit: pageSize, ...(pastCursor !== undefined ? { cursor: pastCursor } : {}) });
          for (const turn of page.turns) past.add(`${turn.conversationId}\u0000${turn.messageId}`);
          pastCursor = page.cursor;
        } while (pastCursor !== undefined && past.size < listed.length);
      }
      for (const turn of listed) {
        const pastResendWindow = windowed ? turn.pastReopenWindow === true : past.has(`${turn.conversationId}\u0000${turn.messageId}`);
        const resend = resendVerdictAt(turn, pastResendWindow, windowShown);
        if (json) io.stdout(`${JSON.stringify({ ...turn, resend, pastResendWindow })}\n`);
        else printed.push([turn.conversationId, turn.messageId, turn.turnIndex === undefined ? "-" : String(turn.turnIndex), turn.failedAt === 0 ? "unknown" : iso(turn.failedAt), turn.failedAt === 0 ? "-" : formatAge(now - turn.failedAt), resend]);
      }
      if (!json && printed.length > 0) io.stdout(table(["CONVERSATION", "MESSAGE", "TURN", "FAILED AT", "AGE", "RE-SEND"], printed));
      io.stderr(`${count} failed turn${count === 1 ? "" : "s"}${more ? " (more may match: raise --limit, or --limit 0 for all)" : ""}\n`);
      return 0;
    } finally {
      await store.close();
    }
  },
};

/** `turns --stalled` (TURN-22): the store's stalled messages, each with its turn's ledger rows when --ledger is given. */
async function listStalled(io: CommandContext["io"], values: OptionValues, command: string, target: string): Promise<number> {
  const query: StalledMessagesQuery = {};
  const { conversationId, olderThanMs, limit, pageSize, json } = listingOptions(values, command, { limit: DEFAULT_TURN_ROWS, maxPageSize: MAX_FAILED_TURNS_LIMIT });
  if (conversationId !== undefined) query.conversationId = conversationId;
  if (olderThanMs !== undefined) query.olderThanMs = olderThanMs;
  for (const name of ["retention", "resend-window"]) {
    if (values[name] !== undefined) throw new UsageError(`--${name} is for --failed`, command);
  }
  checkTargetOptions(parseTarget(target, io.cwd).kind, values, { sqlite: ["table-prefix"], postgres: ["schema", "table-prefix"] }, "conversation store", command);
  const ledgerTarget = stringOption(values, "ledger");
  if (ledgerTarget === undefined) {
    for (const name of ["ledger-table", "ledger-schema", "ledger-prefix"]) {
      if (values[name] !== undefined) throw new UsageError(`--${name} needs --ledger`, command);
    }
  }
  const schema = stringOption(values, "schema");
  const tablePrefix = stringOption(values, "table-prefix");
  const opened: OpenedConversationStore = await openConversationStore(target, {
    cwd: io.cwd,
    ...(schema !== undefined ? { schema } : {}),
    ...(tablePrefix !== undefined ? { tablePrefix } : {}),
  });
  const store: ConversationStore = opened.store;
  try {
    if (store.listStalledMessages === undefined) throw new UnsupportedOperationError("listStalledMessages", opened.display);
    const listed: StalledMessage[] = [];
    let more = false;
    let cursor: string | undefined;
    do {
      const want = limit === 0 ? pageSize : Math.min(pageSize, limit - listed.length);
      const page = await store.listStalledMessages({ ...query, limit: want, ...(cursor !== undefined ? { cursor } : {}) });
      listed.push(...page.messages);
      cursor = page.cursor;
      if (limit !== 0 && listed.length >= limit && cursor !== undefined) more = true;
    } while (cursor !== undefined && (limit === 0 || listed.length < limit));
    const rowsOf = ledgerTarget === undefined || listed.length === 0 ? undefined : await ledgerRowsOf(io, values, ledgerTarget, listed);
    const now = Date.now();
    const printed: string[][] = [];
    for (const message of listed) {
      const rows = rowsOf?.get(turnKey(message.conversationId, message.turnIndex));
      if (json) io.stdout(`${JSON.stringify(rows === undefined ? message : { ...message, ledgerRows: rows.map((r) => ({ key: r.key, toolName: r.toolName, state: r.state })) })}\n`);
      else {
        const ledger = rows === undefined ? "-" : rows.length === 0 ? "no row" : rows.map((r) => `${r.toolName} ${r.state}`).join(", ");
        const dated = message.stalledSince !== 0;
        printed.push([message.conversationId, message.messageId, String(message.turnIndex), dated ? iso(message.stalledSince) : "unknown", dated ? formatAge(now - message.stalledSince) : "-", message.leaseOwner ?? "(released)", ledger]);
      }
    }
    if (!json && printed.length > 0) io.stdout(table(["CONVERSATION", "MESSAGE", "TURN", "STALLED SINCE", "AGE", "LEASE OWNER", "LEDGER"], printed));
    io.stderr(`${listed.length} stalled message${listed.length === 1 ? "" : "s"}${more ? " (more may match: raise --limit, or --limit 0 for all)" : ""}\n`);
    return 0;
  } finally {
    await store.close();
  }
}

function turnKey(conversationId: string, turnIndex: number): string {
  return `${conversationId}\u0000${turnIndex}`;
}

/** Each listed turn's ledger rows, read by conversation (the ledger lists no turn index) and kept by turn. */
async function ledgerRowsOf(io: CommandContext["io"], values: OptionValues, target: string, listed: readonly StalledMessage[]): Promise<Map<string, LedgerRow[]>> {
  const table = stringOption(values, "ledger-table");
  const schema = stringOption(values, "ledger-schema");
  const prefix = stringOption(values, "ledger-prefix");
  const opened = await openLedger(target, {
    cwd: io.cwd,
    onWarning: (message) => io.stderr(`${message}\n`),
    ...(table !== undefined ? { table } : {}),
    ...(schema !== undefined ? { schema } : {}),
    ...(prefix !== undefined ? { prefix } : {}),
  });
  const ledger = opened.ledger;
  try {
    if (!supports(ledger, "listRows") || ledger.listRows === undefined) throw new UnsupportedOperationError("listRows", opened.display);
    const wanted = new Map(listed.map((m) => [turnKey(m.conversationId, m.turnIndex), [] as LedgerRow[]]));
    for (const conversationId of new Set(listed.map((m) => m.conversationId))) {
      let cursor: string | undefined;
      do {
        const page = await ledger.listRows({ conversationId, ...(cursor !== undefined ? { cursor } : {}) });
        for (const row of page.rows) {
          // EFFECT-8: Dispatch-Once's own bookkeeping rows tell nothing of what the turn's calls did.
          if (row.turnIndex !== undefined && !isRecordRowName(row.toolName)) wanted.get(turnKey(conversationId, row.turnIndex))?.push(row);
        }
        cursor = page.cursor;
      } while (cursor !== undefined);
    }
    return wanted;
  } finally {
    await ledger.close();
  }
}
