import { Dispatcher, MAX_LIST_LIMIT, MemoryLedger, type EffectClass, type Ledger, type LedgerCapabilities, type ToolRegistry } from "@dispatch-once/core";
import { checkRowDefinition, MAX_ORDINAL_TRIED } from "@dispatch-once/core/internal";

/** How one tool's effect is kept from happening twice, as `dispatch-once audit` reports it. */
export interface ToolGuardReport {
  name: string;
  effect: EffectClass;
  /** Whether a replay of the turn could perform this effect twice without Dispatch-Once. */
  canDoubleFire: boolean;
  /**
   * What guards it: `keyed downstream` (the Idempotency-Key is forwarded and the API
   * deduplicates), `ledger only` (the claim is the only guard), `reconcile probe` (a lost
   * response can be checked downstream), `volatile ledger refusal` (the dispatcher refuses
   * to run it on the given ledger), or `none needed` (a read).
   */
  guards: string[];
  identity: readonly string[] | "all arguments" | "n/a";
  /** Why the tool is risky, when it is; `audit --strict` exits 5 when any tool has one. */
  risk?: string;
  /**
   * With a ledger: how many of the tool's rows were checked, and how many its definition in the
   * module no longer keys as the ledger holds them (IDENT-4: its identity or schema changed while
   * rows made under the previous one are within retention), with a few of them.
   */
  rowsKeyedElsewhere?: RowKeyCheck;
}

/** The result of re-deriving the keys of one tool's ledger rows from the module's definition. */
export interface RowKeyCheck {
  checked: number;
  mismatched: number;
  /**
   * How many of the checked rows were made under one of the tool's former names (IDENT-11): a
   * re-run of their turn finds them (IDENT-10), so they count as mismatched only when the tool's
   * schema refuses their stored request.
   */
  formerNameRows: number;
  /** Up to five rows whose key the definition does not derive again. */
  examples: { key: string; conversationId: string; turnIndex: number; state: string; why: string }[];
  /** True when the scan stopped at `maxRows` rows: more rows may be keyed under another definition. */
  truncated: boolean;
}

// The ordinals tried for a row; the same bound as the dispatcher's IDENT-10 guard (one reading, core/internal).
export { MAX_ORDINAL_TRIED };
/** The rows `auditTools` reads at most from a ledger, by default. */
export const DEFAULT_MAX_AUDIT_ROWS = 10_000;

/**
 * Re-derive the key of every write row of the ledger (up to `maxRows`) from the registry's
 * definition of its tool: the row's conversation, turn index and stored request, at ordinals 0 to
 * MAX_ORDINAL_TRIED. A row whose key none of them gives was keyed under another definition of the
 * tool (IDENT-4): a replay of its turn (a re-sent failed or stalled message) gets a new key, meets
 * no row and runs the effect again. Rows of tools the registry does not define, rows without a
 * conversation and turn (keys a caller derived itself), and tools that refuse differing requests
 * (client-assigned keys, IDENT-6) are not checked. A row of a former name a tool lists (IDENT-11)
 * is that tool's, covered unless its schema refuses the stored request. The row check is core's `checkRowDefinition`, which
 * the dispatcher applies at run time to the rows of a re-run turn (IDENT-10).
 */
export async function checkRowKeys(registry: ToolRegistry, ledger: Ledger, maxRows: number = DEFAULT_MAX_AUDIT_ROWS): Promise<Map<string, RowKeyCheck>> {
  const checks = new Map<string, RowKeyCheck>();
  if (ledger.listRows === undefined) return checks;
  // keyFor is pure (it validates, projects and hashes); a memory ledger keeps the dispatcher from touching the real one.
  const dispatcher = new Dispatcher({ tools: registry, ledger: new MemoryLedger(), allowVolatileLedgerForUnkeyedWrites: true, logger: { warn: () => {} } });
  const keyFor = dispatcher.keyFor.bind(dispatcher);
  let cursor: string | undefined;
  let seen = 0;
  let truncated = false;
  do {
    const page = await ledger.listRows({ limit: Math.min(MAX_LIST_LIMIT, maxRows - seen), ...(cursor !== undefined ? { cursor } : {}) });
    for (const row of page.rows) {
      seen += 1;
      const check = checkRowDefinition(registry, keyFor, row);
      if (check === undefined) continue;
      // A former name's row is the tool's that lists it (IDENT-11), not a row of a tool the module lacks.
      const tally = checks.get(check.toolName) ?? { checked: 0, mismatched: 0, formerNameRows: 0, examples: [], truncated: false };
      checks.set(check.toolName, tally);
      tally.checked += 1;
      const renamed = check.toolName !== row.toolName;
      if (renamed) tally.formerNameRows += 1;
      if (check.verdict === "same" || (renamed && check.verdict === "other")) continue;
      tally.mismatched += 1;
      if (tally.examples.length < 5) tally.examples.push({ key: row.key, conversationId: row.conversationId as string, turnIndex: row.turnIndex as number, state: row.state, why: check.why });
    }
    cursor = page.cursor;
    if (cursor !== undefined && seen >= maxRows) truncated = true;
  } while (cursor !== undefined && !truncated);
  if (truncated) for (const check of checks.values()) check.truncated = true;
  return checks;
}

/**
 * Audit a registry: which tools can double-fire and how each is guarded. With the ledger's
 * capabilities, also whether the dispatcher would refuse a tool on that ledger (LEDGER-14).
 */
export function auditTools(registry: ToolRegistry, capabilities?: LedgerCapabilities, rowKeys?: Map<string, RowKeyCheck>): ToolGuardReport[] {
  const base = new Map(registry.audit().map((entry) => [entry.name, entry]));
  return registry.list().map((tool) => {
    const entry = base.get(tool.name);
    const report: ToolGuardReport = {
      name: tool.name,
      effect: tool.effect,
      canDoubleFire: entry?.canDoubleFire ?? tool.effect !== "read",
      guards: [],
      identity: entry?.identity ?? "n/a",
    };
    const probe = typeof tool.reconcile === "function";
    switch (tool.effect) {
      case "read":
        report.guards.push("none needed");
        break;
      case "keyed_write":
        report.guards.push("keyed downstream", "ledger claim");
        if (probe) report.guards.push("reconcile probe");
        break;
      case "unkeyed_write":
        report.guards.push("ledger only");
        if (probe) report.guards.push("reconcile probe");
        if (capabilities !== undefined && capabilities.durability !== "durable") {
          report.guards.push("volatile ledger refusal");
          report.risk =
            "the dispatcher refuses this tool on this ledger (it declares itself volatile and could forget the claim); " +
            "use a durable ledger (allowVolatileLedgerForUnkeyedWrites would leave it unguarded)";
        } else if (!probe) {
          report.risk =
            "nothing downstream catches a repeat, and after a lost response the outcome stays unknown until a person " +
            "resolves it: add a reconcile probe, or use an API that takes an Idempotency-Key";
        }
        break;
    }
    const rows = rowKeys?.get(tool.name);
    if (rows !== undefined) {
      report.rowsKeyedElsewhere = rows;
      if (rows.mismatched > 0) {
        const risk =
          `${rows.mismatched} of its ${rows.checked} ledger rows${rows.truncated ? " checked (the scan stopped early)" : ""} were keyed under another definition ` +
          "(its identity or schema changed while they are within retention, IDENT-4): a re-sent failed or stalled message of their turns " +
          "gets a new key and runs the effect again (a keyed downstream sees a new Idempotency-Key). Roll back, or give the changed tool a new name, " +
          "until those rows are past retention; settle their messages first (turns --failed, turns --stalled). First rows: " +
          rows.examples.map((e) => `${e.key} (${e.conversationId} turn ${e.turnIndex}, ${e.state})`).join(", ");
        report.risk = report.risk === undefined ? risk : `${report.risk}; ${risk}`;
      }
    }
    return report;
  });
}
