/**
 * Attribute and instrument names, defined like OpenTelemetry semantic conventions (spec §13,
 * proposed). Metric attributes stay low-cardinality: keys, conversation ids and messages go on
 * spans only.
 */
export const ATTR = {
  TOOL_NAME: "dispatch_once.tool.name",
  KEY: "dispatch_once.key",
  ORDINAL: "dispatch_once.ordinal",
  FENCE: "dispatch_once.fence",
  TAKEOVER: "dispatch_once.takeover",
  OUTCOME: "dispatch_once.outcome",
  RUN_OK: "dispatch_once.run.ok",
  /** On a run's `dispatch_once.run_timed_out` event: the bound the run outlived, in ms (DISPATCH-18). */
  RUN_TIMEOUT_MS: "dispatch_once.run.timeout_ms",
  REPLAY_STATE: "dispatch_once.replay.state",
  LEASE_LOST_REASON: "dispatch_once.lease_lost.reason",
  RECONCILE_CAUSE: "dispatch_once.reconcile.cause",
  RECONCILE_VERDICT: "dispatch_once.reconcile.verdict",
  RECONCILE_SETTLED: "dispatch_once.reconcile.settled",
  RECORD_WRITE: "dispatch_once.record.write",
  /** On a run span that ends `released`: whether the call as a whole may still have happened (an earlier run's, or a resumed turn's earlier holder's). */
  RELEASED_EFFECT_MAY_HAVE_HAPPENED: "dispatch_once.released.effect_may_have_happened",
  /**
   * On every run span's end and on `dispatch_once.outcomes`: what the run established about its
   * effect (OTEL-5), in the failed-turn record's words: `happened` (a result, stored or not),
   * `not_happened`, or `may_have_happened`. A `failed` or `not_recorded` run whose payment went
   * through says `happened`.
   */
  EFFECT: "dispatch_once.effect",
  /** The outcome a run's last write would have recorded, on a run span that ends `not_recorded` (OTEL-4). */
  RECORD_OUTCOME: "dispatch_once.record.outcome",
  /** The ledger operation sent again after ledger_unavailable: `claim`, or a record write (`complete`, `fail`, `markUnknown`, `release`). */
  LEDGER_OPERATION: "dispatch_once.ledger.operation",
  CONVERSATION_ID: "dispatch_once.conversation.id",
  TURN_INDEX: "dispatch_once.turn.index",
  ATTEMPT: "dispatch_once.attempt",
  TURN_OUTCOME: "dispatch_once.turn.outcome",
  STOP_REASON: "dispatch_once.turn.stop_reason",
  FAILURE_POSITION: "dispatch_once.stream.failure_position",
} as const;

export const SPAN = {
  /** A claimed run of a tool: from run_started to the ledger write that ends it. */
  RUN: "dispatch_once.run",
  /** A turn of the runner: from its first attempt to commit or failure. */
  TURN: "dispatch_once.turn",
} as const;

export const METRIC = {
  CLAIMS: "dispatch_once.claims",
  TAKEOVERS: "dispatch_once.takeovers",
  REPLAYS: "dispatch_once.replays",
  WAITS: "dispatch_once.waits",
  OUTCOMES: "dispatch_once.outcomes",
  UNKNOWNS: "dispatch_once.unknowns",
  RECONCILIATIONS: "dispatch_once.reconciliations",
  LEASE_LOSSES: "dispatch_once.lease_losses",
  /** Runs given up on at their bound (DISPATCH-18): answered in_flight_elsewhere while the effect may still happen. */
  RUN_TIMEOUTS: "dispatch_once.run_timeouts",
  /** Ledger operations sent again because the ledger was out of reach (DISPATCH-10, DISPATCH-16). */
  LEDGER_RETRIES: "dispatch_once.ledger_retries",
  RUN_DURATION: "dispatch_once.run.duration",
  TURNS: "dispatch_once.turns",
  ATTEMPTS: "dispatch_once.attempts",
  RETRIES: "dispatch_once.retries",
  ABANDONED_CALLS: "dispatch_once.abandoned_calls",
  TURN_DURATION: "dispatch_once.turn.duration",
} as const;
