// TEMPORARY until L1's core types land: structural copies of the operator contract.
import type { Ledger, LedgerRow, RowState, StoredError } from "@dispatch-once/core";

export interface ListRowsQuery {
  state?: RowState | RowState[];
  toolName?: string;
  conversationId?: string;
  olderThanMs?: number;
  limit?: number;
  cursor?: string;
}
export interface ListRowsPage {
  rows: LedgerRow[];
  cursor?: string;
}
export type Resolution = { outcome: "completed"; result: string } | { outcome: "failed"; error: StoredError } | { outcome: "not_performed" };
export interface ResolveRequest {
  key: string;
  resolution: Resolution;
  actor: string;
  reason: string;
  expectedFence?: number;
}
export interface AuditEntry {
  at: number;
  actor: string;
  action: string;
  fromState: RowState;
  toState: RowState;
  fence: number;
  reason: string;
  outcome?: Resolution["outcome"];
}
export type OperatorLedger = Ledger & {
  listRows?(query?: ListRowsQuery): Promise<ListRowsPage>;
  resolve?(request: ResolveRequest): Promise<LedgerRow>;
  auditTrail?(key: string): Promise<AuditEntry[]>;
};
export const MAX_LIST_LIMIT = 1000;
