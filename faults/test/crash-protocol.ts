/** What the crash suite's parent and its runner processes say to each other (IPC), and a runner's settings. */

/**
 * Where a runner process stops: after the payments API accepted the call, before the ledger row
 * completes; after the row completes (the provider holds the stream's last event, message_stop or
 * response.completed, meanwhile); after that event, before the turn's commit; inside the commit's transaction; after the commit, before
 * whatever the runner writes next.
 */
export type CrashPoint = "after_accept" | "after_complete" | "before_commit" | "during_commit" | "after_commit" | "at_call";

/**
 * The chaos suite's unnamed points (chaos.test.ts): right before or right after the `n`-th call
 * (1-based) of a conversation store or ledger write method, whatever the turn is doing then; or
 * ("commit", a PostgreSQL conversation store's method) parked on that call's COMMIT, sent once
 * the parent lets it go; on a SQLite store or ledger ("commit" too) the process stops or kills
 * itself inside that call's write transaction (`inTransaction`), holding the file's write lock.
 */
export interface CallPoint {
  method: string;
  n: number;
  side: "before" | "after" | "commit";
}

export type LedgerConfig = (
  | { kind: "sqlite"; path: string }
  | { kind: "postgres"; url: string; schema: string }
  | { kind: "redis"; url: string; prefix: string }
) & {
  /** The server ledgers' bound on one operation (PostgreSQL timeoutMs, Redis commandTimeoutMs); their default (5 s) when absent. */
  timeoutMs?: number;
};

export type ConversationStoreConfig = { kind: "sqlite"; path: string } | { kind: "postgres"; url: string; schema: string };

/** Which stream side the runner process runs: the Anthropic Messages API, the OpenAI Responses API, or OpenAI Chat Completions (ChatCompletionsRunner). */
export type ProviderKind = "anthropic" | "openai" | "openai-chat";

export interface CrashWorkerConfig {
  provider: ProviderKind;
  providerUrl: string;
  paymentsUrl: string;
  account: string;
  ledger: LedgerConfig;
  store: ConversationStoreConfig;
  /** The dispatcher's lease and the conversation's turn lease. */
  leaseMs: number;
  crashAt?: CrashPoint;
  /** Which passage of `crashAt` stops the process (default the first). */
  occurrence?: number;
  /** With crashAt "at_call": which store or ledger call stops the process. */
  call?: CallPoint;
  /**
   * With a "commit" call on a SQLite store or ledger: inside the call's write transaction the
   * process SIGSTOPs itself ("stop": the parent sees it stopped, and SIGCONTs it later) or SIGKILLs
   * itself ("kill"). Default "kill".
   */
  inTransaction?: "kill" | "stop";
  /** The runner sends a tool_choice that forces a call (Anthropic `{ type: "any" }`, OpenAI `"required"`): STREAM-18 resets it after a message's first turn. */
  forceToolChoice?: boolean;
}

/** "stop": the worker SIGSTOPs itself from its event loop, where no SQLite transaction is open (better-sqlite3's are synchronous). */
export type ToWorker = { type: "send"; conversationId: string; message: { id: string; content: string } } | { type: "continue" } | { type: "stop" };

export type FromWorker =
  | { type: "ready" }
  | { type: "reached"; point: CrashPoint; detail?: string }
  | { type: "answered"; result: SentResult }
  | { type: "refused"; code: string; message: string; record?: FailedRecord; effects?: { key: string; name: string; effect: string }[] }
  | RecordWriteFailed;

/**
 * A record write (complete, fail, markUnknown, release) the ledger refused, as the worker saw it at
 * the ledger's edge (outside the dispatcher), with what the dispatch that sent it then did: raised
 * an error to the runner ("raised", its code), answered with an outcome all the same ("returned":
 * a re-send of the write went through), or had answered before the write was sent ("earlier": a
 * run that outlived its bound, DISPATCH-18). The oracle excuses a live owner's expired in-flight
 * row only with such a report, "raised", for the row's key and fence (DISPATCH-10): a process
 * that never wrote its record, or swallowed the failure, sends none.
 */
export interface RecordWriteFailed {
  type: "record_failed";
  key: string;
  fence: number;
  write: "complete" | "fail" | "markUnknown" | "release";
  error: string;
  answered: "raised" | "returned" | "earlier";
  raised?: { code: string; message: string };
}

/** The parts of a SendResult the suite reads (it crosses IPC as JSON). */
export interface SentResult {
  appended: boolean;
  fromStore: boolean;
  turns: { turnIndex: number; text: string; calls: { name: string; key?: string; replayed?: boolean; result?: unknown; error?: unknown }[] }[];
  records?: RecordLike[];
}

export interface FailedRecord {
  kind: "failed_turn";
  messageId: string;
  turnIndex: number;
  retryable: boolean;
  resumed?: boolean;
  effects: { key: string; name: string; effect: string }[];
  calls: { key?: string; status: string; effect: string }[];
}

/** Any record kept beside a conversation (failed turn, superseded attempt, committed turn). */
export interface RecordLike {
  kind: string;
  messageId: string;
  turnIndex: number;
  resumed?: boolean;
  listed?: boolean;
  effects?: { key: string; effect: string }[];
  calls?: { key?: string; effect: string; status?: string; state?: string }[];
}
