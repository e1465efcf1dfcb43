import {
  SpanKind,
  SpanStatusCode,
  metrics,
  trace,
  type Attributes,
  type Counter,
  type Histogram,
  type Meter,
  type Span,
  type Tracer,
} from "@opentelemetry/api";
import { describeValue, InvalidArgumentError, type DispatchEvent, type RunEffect } from "@dispatch-once/core";
import { checkKnownOptions, checkOptionValues, type RunnerEvent } from "@dispatch-once/runner";
import { ATTR, METRIC, SPAN } from "./attributes.js";

export const INSTRUMENTATION_NAME = "@dispatch-once/opentelemetry";
export const INSTRUMENTATION_VERSION = "0.1.0";

export interface TelemetryOptions {
  /**
   * Default: the global tracer provider's tracer (a no-op until an SDK registers one).
   * @default the global tracer provider's tracer named "@dispatch-once/opentelemetry"
   * @example dispatchTelemetry({ tracer: tracerProvider.getTracer("billing-agent") })
   */
  tracer?: Tracer;
  /**
   * Default: the global meter provider's meter (a no-op until an SDK registers one).
   * @default the global meter provider's meter named "@dispatch-once/opentelemetry"
   * @example dispatchTelemetry({ meter: meterProvider.getMeter("billing-agent") })
   */
  meter?: Meter;
  /**
   * Open spans kept at most, of each kind: run spans and turn spans are bounded separately (a run
   * whose last ledger write was refused never ends on its own); past it, the oldest of that kind is
   * ended with outcome `not_recorded`. Default 10 000.
   * @default 10_000
   * @example dispatchTelemetry({ maxOpenSpans: 1_000 })
   */
  maxOpenSpans?: number;
  /**
   * Monotonic milliseconds, for durations; the dispatcher's events carry no timestamps.
   * @default () => performance.now()
   * @example dispatchTelemetry({ now: () => Number(process.hrtime.bigint()) / 1e6 })
   */
  now?: () => number;
}

interface Open {
  span: Span;
  startedAt: number;
  /** Tool name for a run; unused for a turn. */
  toolName: string;
  runStartedAt?: number;
  /** A run's fence: a lost claim's late report must not end its key's new holder's span. */
  fence?: number;
}

/**
 * The one place where Dispatch-Once events become spans and metrics. Attach `onDispatchEvent`
 * to `new Dispatcher({ onEvent })` and `onRunnerEvent` to the runner's `onEvent`; core itself
 * never depends on OpenTelemetry.
 */
export class DispatchTelemetry {
  private readonly tracer: Tracer;
  private readonly maxOpen: number;
  private readonly now: () => number;
  private readonly runs = new Map<string, Open>();
  private readonly turns = new Map<string, Open>();
  private readonly counters: Record<
    Exclude<keyof typeof METRIC, "RUN_DURATION" | "TURN_DURATION">,
    Counter
  >;
  private readonly runDuration: Histogram;
  private readonly turnDuration: Histogram;

  constructor(options: TelemetryOptions = {}) {
    checkTelemetryOptions(options);
    this.tracer = options.tracer ?? trace.getTracer(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION);
    const meter = options.meter ?? metrics.getMeter(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION);
    this.maxOpen = options.maxOpenSpans ?? 10_000;
    this.now = options.now ?? (() => performance.now());
    const counter = (name: string, description: string) => meter.createCounter(name, { description, unit: "{event}" });
    this.counters = {
      CLAIMS: counter(METRIC.CLAIMS, "Claims won (the tool runs)"),
      TAKEOVERS: counter(METRIC.TAKEOVERS, "Claims won over another attempt's expired claim"),
      REPLAYS: counter(METRIC.REPLAYS, "Calls answered from a finished ledger row without running"),
      WAITS: counter(METRIC.WAITS, "Polls of another attempt's live in-flight claim"),
      OUTCOMES: counter(METRIC.OUTCOMES, "Claimed runs by the ledger state they ended in"),
      UNKNOWNS: counter(METRIC.UNKNOWNS, "Claimed runs whose outcome was recorded unknown"),
      RECONCILIATIONS: counter(METRIC.RECONCILIATIONS, "Reconcile probe answers"),
      LEASE_LOSSES: counter(METRIC.LEASE_LOSSES, "Claims lost while the tool ran"),
      RUN_TIMEOUTS: counter(METRIC.RUN_TIMEOUTS, "Runs that outlived their bound, answered in_flight_elsewhere (the effect may still happen)"),
      LEDGER_RETRIES: counter(METRIC.LEDGER_RETRIES, "Ledger operations sent again after ledger_unavailable"),
      TURNS: counter(METRIC.TURNS, "Runner turns by outcome"),
      ATTEMPTS: counter(METRIC.ATTEMPTS, "Streamed attempts of a turn"),
      RETRIES: counter(METRIC.RETRIES, "Attempts retried after a failed stream"),
      ABANDONED_CALLS: counter(METRIC.ABANDONED_CALLS, "Tool calls cut off before content_block_stop (never run)"),
    };
    this.runDuration = meter.createHistogram(METRIC.RUN_DURATION, { description: "Wall time of a claimed tool run", unit: "s" });
    this.turnDuration = meter.createHistogram(METRIC.TURN_DURATION, { description: "Wall time of a turn, all attempts", unit: "s" });
  }

  /** For `DispatcherOptions.onEvent`. Never throws: telemetry must not change a dispatch. */
  readonly onDispatchEvent = (event: DispatchEvent): void => {
    try {
      this.dispatchEvent(event);
    } catch {
      // A broken exporter or meter is not the caller's failure.
    }
  };

  /** For the runner's `onEvent`. Never throws. */
  readonly onRunnerEvent = (event: RunnerEvent): void => {
    try {
      this.runnerEvent(event);
    } catch {
      // as above
    }
  };

  /** End every span still open (at shutdown), marked `not_recorded`. */
  endAll(): void {
    for (const key of [...this.runs.keys()]) this.endRun(key, "not_recorded");
    for (const id of [...this.turns.keys()]) this.endTurn(id, "not_recorded", undefined);
  }

  private dispatchEvent(event: DispatchEvent): void {
    const tool = { [ATTR.TOOL_NAME]: event.toolName };
    switch (event.type) {
      case "claimed": {
        this.counters.CLAIMS.add(1, { ...tool, [ATTR.TAKEOVER]: event.takeover });
        if (event.takeover) this.counters.TAKEOVERS.add(1, tool);
        // The key's open run is superseded, not ended: it may still report under its fence (its
        // run_timed_out, its refused write, which ends it: OTEL-4). A run that never reports again
        // ends at endAll or past maxOpenSpans, as any unended run.
        const previous = this.runs.get(event.key);
        if (previous !== undefined) {
          this.runs.delete(event.key);
          if (previous.fence !== undefined && previous.fence !== event.fence) this.open(this.runs, supersededId(event.key, previous.fence), previous);
          else this.endSpan(previous, "not_recorded");
        }
        const span = this.tracer.startSpan(SPAN.RUN, {
          kind: SpanKind.INTERNAL,
          attributes: {
            ...tool,
            [ATTR.KEY]: event.key,
            [ATTR.ORDINAL]: event.ordinal,
            [ATTR.FENCE]: event.fence,
            [ATTR.TAKEOVER]: event.takeover,
          },
        });
        this.open(this.runs, event.key, { span, startedAt: this.now(), toolName: event.toolName, fence: event.fence });
        return;
      }
      case "run_started": {
        const run = this.runs.get(event.key);
        if (run !== undefined) run.runStartedAt = this.now();
        run?.span.addEvent("dispatch_once.run_started");
        return;
      }
      case "run_finished": {
        // A run that lost its claim finishes while a takeover's run holds the key: not that span's (OTEL-4).
        const run = this.runOf(event.key, event.fence);
        if (run?.runStartedAt !== undefined) {
          this.runDuration.record((this.now() - run.runStartedAt) / 1000, { ...tool, [ATTR.RUN_OK]: event.ok });
        }
        run?.span.addEvent("dispatch_once.run_finished", { [ATTR.RUN_OK]: event.ok });
        return;
      }
      case "replayed":
        this.counters.REPLAYS.add(1, { ...tool, [ATTR.REPLAY_STATE]: event.state, ...(event.effect !== undefined ? { [ATTR.EFFECT]: event.effect } : {}) });
        return;
      case "waiting":
        this.counters.WAITS.add(1, tool);
        return;
      case "lease_lost":
        this.counters.LEASE_LOSSES.add(1, { ...tool, [ATTR.LEASE_LOST_REASON]: event.reason });
        this.runOf(event.key, event.fence)?.span.addEvent("dispatch_once.lease_lost", { [ATTR.LEASE_LOST_REASON]: event.reason });
        return;
      case "run_timed_out":
        this.counters.RUN_TIMEOUTS.add(1, tool);
        // The dispatch is answered but the run goes on: its span stays open until its fence's
        // late `recorded`/`record_failed` (or maxOpenSpans, endAll) ends it; a takeover's claim does not.
        // Only that fence's span (OTEL-4); a read (no fence) claimed nothing and has no span.
        if (event.fence !== undefined) this.runOf(event.key, event.fence)?.span.addEvent("dispatch_once.run_timed_out", { [ATTR.RUN_TIMEOUT_MS]: event.runTimeoutMs });
        return;
      case "request_differs":
        this.runs.get(event.key)?.span.addEvent("dispatch_once.request_differs");
        return;
      case "claim_retry":
        // The ledger is out of reach before the tool runs (DISPATCH-16): the leading sign of unknown rows to come.
        this.counters.LEDGER_RETRIES.add(1, { ...tool, [ATTR.LEDGER_OPERATION]: "claim" });
        return;
      case "record_retry":
        this.counters.LEDGER_RETRIES.add(1, { ...tool, [ATTR.LEDGER_OPERATION]: event.write });
        // The run's outcome is known and its record is being sent again (DISPATCH-10): the span stays open until it lands or is given up.
        this.runOf(event.key, event.fence)?.span.addEvent("dispatch_once.record_retry", { [ATTR.RECORD_WRITE]: event.write, [ATTR.ATTEMPT]: event.attempt });
        return;
      case "reconciled": {
        const attributes: Attributes = {
          ...tool,
          [ATTR.RECONCILE_CAUSE]: event.cause,
          [ATTR.RECONCILE_VERDICT]: event.verdict,
          [ATTR.RECONCILE_SETTLED]: event.settled,
        };
        this.counters.RECONCILIATIONS.add(1, attributes);
        // On demand (no fence) the key's open run, if any; a run's probe only on that run's span (OTEL-4).
        (event.fence === undefined ? this.runs.get(event.key) : this.runOf(event.key, event.fence))?.span.addEvent("dispatch_once.reconciled", attributes);
        return;
      }
      case "released":
        // Said on the run's span by `recorded`, which comes first and ends it: by now the key's open
        // span, if any, is another run's (a takeover's).
        return;
      case "record_failed": {
        // The run's last write never landed (refused, or the ledger out of reach): its span ends
        // now, or no exporter would ever see the run whose outcome the ledger lacks (OTEL-4).
        // A run that lost its claim reports this while a takeover's run holds the key: that span is not this run's.
        // An event of an older core carries no effect: then nothing better than "may have happened" is known.
        const effect = event.effect ?? "may_have_happened";
        this.counters.OUTCOMES.add(1, { ...tool, [ATTR.OUTCOME]: "not_recorded", [ATTR.EFFECT]: effect });
        const id = this.runIdOf(event.key, event.fence);
        if (id === undefined) return;
        this.runs.get(id)?.span.setAttributes({ [ATTR.RECORD_WRITE]: event.write, [ATTR.RECORD_OUTCOME]: event.state });
        this.endRun(id, "not_recorded", effect);
        return;
      }
      case "recorded": {
        const effect = event.effect ?? recordedEffect(event.state, event.effectMayHaveHappened);
        this.counters.OUTCOMES.add(1, { ...tool, [ATTR.OUTCOME]: event.state, [ATTR.EFFECT]: effect });
        if (event.state === "unknown") this.counters.UNKNOWNS.add(1, tool);
        // A released run whose call may have happened is not a "did not happen" (RECORD-8).
        if (event.effectMayHaveHappened !== undefined) {
          this.runs.get(event.key)?.span.setAttribute(ATTR.RELEASED_EFFECT_MAY_HAVE_HAPPENED, event.effectMayHaveHappened);
        }
        this.endRun(event.key, event.state, effect);
        return;
      }
    }
  }

  private runnerEvent(event: RunnerEvent): void {
    const id = `${event.conversationId}\u0000${event.turnIndex}`;
    const turn = this.turns.get(id);
    switch (event.type) {
      case "attempt_started": {
        this.counters.ATTEMPTS.add(1);
        if (turn === undefined) {
          const span = this.tracer.startSpan(SPAN.TURN, {
            kind: SpanKind.INTERNAL,
            attributes: { [ATTR.CONVERSATION_ID]: event.conversationId, [ATTR.TURN_INDEX]: event.turnIndex },
          });
          this.open(this.turns, id, { span, startedAt: this.now(), toolName: "" });
        }
        this.turns.get(id)?.span.addEvent("dispatch_once.attempt_started", { [ATTR.ATTEMPT]: event.attempt });
        return;
      }
      case "stream_failed":
        turn?.span.addEvent("dispatch_once.stream_failed", { [ATTR.ATTEMPT]: event.attempt, [ATTR.FAILURE_POSITION]: event.position });
        return;
      case "retry_scheduled":
        this.counters.RETRIES.add(1);
        turn?.span.addEvent("dispatch_once.retry_scheduled", { [ATTR.ATTEMPT]: event.attempt, "dispatch_once.retry.delay_ms": event.delayMs });
        return;
      case "call_abandoned":
        this.counters.ABANDONED_CALLS.add(1, { [ATTR.TOOL_NAME]: event.name });
        turn?.span.addEvent("dispatch_once.call_abandoned", { [ATTR.TOOL_NAME]: event.name, [ATTR.ATTEMPT]: event.attempt });
        return;
      case "call_resolved":
        turn?.span.addEvent("dispatch_once.call_resolved", {
          [ATTR.TOOL_NAME]: event.name,
          [ATTR.ATTEMPT]: event.attempt,
          "dispatch_once.call.ok": event.ok,
          ...(event.key !== undefined ? { [ATTR.KEY]: event.key } : {}),
          ...(event.replayed !== undefined ? { "dispatch_once.call.replayed": event.replayed } : {}),
        });
        return;
      case "attempt_superseded":
        turn?.span.addEvent("dispatch_once.attempt_superseded", { [ATTR.ATTEMPT]: event.attempt });
        return;
      case "turn_committed": {
        const outcome = event.committed ? "committed" : "not_committed";
        this.counters.TURNS.add(1, { [ATTR.TURN_OUTCOME]: outcome });
        this.endTurn(id, outcome, event.stopReason);
        return;
      }
      case "turn_failed":
        this.counters.TURNS.add(1, { [ATTR.TURN_OUTCOME]: "failed" });
        this.endTurn(id, "failed", undefined);
        return;
      default:
        // text_delta, call_complete, call_unresolved, attempt_discarded: visible through the others.
        return;
    }
  }

  /**
   * Where the open span of the run that holds `fence` on `key` is kept: under the key while it is
   * the key's latest claim, under `supersededId` once a takeover claimed the key (OTEL-4).
   */
  private runIdOf(key: string, fence: number): string | undefined {
    if (this.runs.get(key)?.fence === fence) return key;
    const id = supersededId(key, fence);
    return this.runs.has(id) ? id : undefined;
  }

  /** The open span of the run that holds `fence` on `key`: never another fence's (OTEL-4). */
  private runOf(key: string, fence: number): Open | undefined {
    const id = this.runIdOf(key, fence);
    return id === undefined ? undefined : this.runs.get(id);
  }

  private open(map: Map<string, Open>, id: string, entry: Open): void {
    // Kept even when the span does not record (no SDK): the run's duration still goes to the meter.
    map.set(id, entry);
    if (map.size > this.maxOpen) {
      const oldest = map.keys().next().value as string;
      if (map === this.runs) this.endRun(oldest, "not_recorded");
      else this.endTurn(oldest, "not_recorded", undefined);
    }
  }

  /** `effect`: what the run established (OTEL-5); a span ended with no word from its run (shutdown, maxOpenSpans) cannot tell. */
  private endRun(id: string, outcome: string, effect: RunEffect = "may_have_happened"): void {
    const run = this.runs.get(id);
    if (run === undefined) return;
    this.runs.delete(id);
    this.endSpan(run, outcome, effect);
  }

  private endSpan(run: Open, outcome: string, effect: RunEffect = "may_have_happened"): void {
    run.span.setAttribute(ATTR.OUTCOME, outcome);
    run.span.setAttribute(ATTR.EFFECT, effect);
    if (outcome === "failed" || outcome === "unknown" || outcome === "not_recorded") {
      run.span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
    }
    run.span.end();
  }

  private endTurn(id: string, outcome: string, stopReason: string | null | undefined): void {
    const turn = this.turns.get(id);
    if (turn === undefined) return;
    this.turns.delete(id);
    this.turnDuration.record((this.now() - turn.startedAt) / 1000, { [ATTR.TURN_OUTCOME]: outcome });
    turn.span.setAttribute(ATTR.TURN_OUTCOME, outcome);
    if (stopReason !== undefined && stopReason !== null) turn.span.setAttribute(ATTR.STOP_REASON, stopReason);
    if (outcome !== "committed") turn.span.setStatus({ code: SpanStatusCode.ERROR, message: outcome });
    turn.span.end();
  }
}

/**
 * The effect of a `recorded` event from a core that does not say it (before OTEL-5): a `failed`
 * row may be a result_not_storable whose effect happened, which such an event cannot tell apart.
 */
function recordedEffect(state: "completed" | "failed" | "unknown" | "released", effectMayHaveHappened: boolean | undefined): RunEffect {
  if (state === "completed") return "happened";
  if (state === "released" && effectMayHaveHappened === false) return "not_happened";
  return "may_have_happened";
}

/** The id of a run span a takeover's claim superseded, kept open for that run's late reports. */
const supersededId = (key: string, fence: number) => `${key}\u0000${fence}`;

/**
 * Checked when the telemetry is made: its handlers never throw (OTEL-3), so a tracer or clock
 * that is not one would be swallowed at every event, and no span or metric would ever appear.
 */
function checkTelemetryOptions(options: unknown): asserts options is TelemetryOptions {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new InvalidArgumentError("options", `must be an object { tracer?, meter?, maxOpenSpans?, now? }, got ${describeValue(options)}`);
  }
  checkKnownOptions(options, ["tracer", "meter", "maxOpenSpans", "now"] satisfies (keyof TelemetryOptions)[]);
  checkOptionValues(options, { maxOpenSpans: "positiveInteger", now: "function" });
  const { tracer, meter } = options as TelemetryOptions;
  if (tracer !== undefined && typeof (tracer as { startSpan?: unknown } | null)?.startSpan !== "function") {
    throw new InvalidArgumentError("options.tracer", `must be an OpenTelemetry Tracer (startSpan), got ${describeValue(tracer)}`);
  }
  if (meter !== undefined && (typeof (meter as { createCounter?: unknown } | null)?.createCounter !== "function" || typeof (meter as { createHistogram?: unknown }).createHistogram !== "function")) {
    throw new InvalidArgumentError("options.meter", `must be an OpenTelemetry Meter (createCounter, createHistogram), got ${describeValue(meter)}`);
  }
}

/** Telemetry over the global providers (no-ops until an SDK registers), or the given tracer and meter. */
export function dispatchTelemetry(options?: TelemetryOptions): DispatchTelemetry {
  return new DispatchTelemetry(options);
}
