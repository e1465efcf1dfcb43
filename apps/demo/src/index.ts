export { runChaos, planTurn, POSITIONS, IN_WINDOW, SPLIT } from "./chaos.js";
export type { ChaosResult, ChaosOptions, ChaosProgress, SideTotals, RouteResult, PositionCounts, TurnPlan, PlannedFailure } from "./chaos.js";
export { runIncident, CHAPTER, RESET_AFTER_ACCEPT_MS, INCIDENT_PAYMENT } from "./incident.js";
export type { IncidentResult, IncidentSide, TimelineEntry, TimelineKind } from "./incident.js";
export { parseArgs, parseLedgerSpec, DemoUsageError, DEFAULT_OPTIONS, USAGE } from "./options.js";
export type { DemoOptions, LedgerSpec } from "./options.js";
export { wilson, oneIn, type RateEstimate } from "./stats.js";
export { Rng } from "./prng.js";
