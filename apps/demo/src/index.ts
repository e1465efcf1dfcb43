export { runChaos, planTurn, POSITIONS, IN_WINDOW, SPLIT, MESSAGES_PER_CONVERSATION } from "./chaos.js";
export type {
  ChaosResult,
  ChaosOptions,
  ChaosProgress,
  SideTotals,
  RouteResult,
  RouteSide,
  PositionCounts,
  TurnPlan,
  PlannedFailure,
  PlanRates,
} from "./chaos.js";
export { auditMessage, addAudit, emptyTally, recordsOf, MISREPORT_REASONS } from "./oracle.js";
export type { MisreportReason, MessageEvidence, MessageAudit, AuditTally, LoggedPayment } from "./oracle.js";
export { runIncident, CHAPTER, RESET_AFTER_ACCEPT_MS, INCIDENT_PAYMENT, DEMO_PROVIDERS, PROVIDER_API } from "./incident.js";
export type { IncidentResult, IncidentSide, TimelineEntry, TimelineKind, DemoProvider } from "./incident.js";
export { parseArgs, parseLedgerSpec, DemoUsageError, DEFAULT_OPTIONS, USAGE } from "./options.js";
export type { DemoOptions, LedgerSpec } from "./options.js";
export { wilson, oneIn, type RateEstimate } from "./stats.js";
export { Rng } from "./prng.js";
export { runDemo, type DemoResult, type DemoProcessUsage, type RunHooks } from "./run.js";
export { renderText, ProgressBar } from "./text.js";
export { renderReport } from "./report.js";
