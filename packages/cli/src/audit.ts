import type { EffectClass, LedgerCapabilities, ToolRegistry } from "@dispatch-once/core";

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
}

/**
 * Audit a registry: which tools can double-fire and how each is guarded. With the ledger's
 * capabilities, also whether the dispatcher would refuse a tool on that ledger (LEDGER-14).
 */
export function auditTools(registry: ToolRegistry, capabilities?: LedgerCapabilities): ToolGuardReport[] {
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
    return report;
  });
}
