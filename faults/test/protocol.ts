/** What the parent and its worker processes say to each other (IPC), and the worker's settings. */

export type StoreConfig =
  | { kind: "sqlite"; path: string; busyTimeoutMs: number }
  | { kind: "postgres"; url: string; schema: string; timeoutMs: number }
  | { kind: "redis"; url: string; prefix: string; timeoutMs: number };

export interface WorkerConfig {
  id: number;
  store: StoreConfig;
  paymentsUrl: string;
  account: string;
  leaseMs: number;
  waitMs: number;
  claimRetryMs: number;
  /** A JSON-lines file the worker appends its dispatcher's events to (the oracle quotes them in a violation). */
  tracePath: string;
}

/** One dispatch of one intent (a replay of the same call has the same conversation, turn and input). */
export interface Call {
  attempt: number;
  conversationId: string;
  turnIndex: number;
  tool: "pay" | "invoice";
  input: Record<string, unknown>;
}

export type Report =
  | { attempt: number; ok: true; key: string; resultJson: string; replayed: boolean }
  | { attempt: number; ok: false; key: string; code: string; message: string; effect: "no" | "yes" | "possibly" };
