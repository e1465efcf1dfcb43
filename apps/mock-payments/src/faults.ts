import { MockPaymentsError } from "./errors.js";
import { SeededRandom } from "./prng.js";
import {
  FAULT_OUTCOMES,
  WRITE_OPERATIONS,
  faultPlanSchema,
  faultSpecSchema,
  injectedFaultSchema,
  summarizeIssues,
  type FaultOutcome,
  type FaultPlan,
  type FaultSpec,
  type InjectedFault,
  type Operation,
} from "./schemas.js";

export type FaultSource = "header" | "queue" | "plan" | "global" | "baseline" | "none";

/** What was decided for one request; kept in order so determinism can be checked. */
export interface FaultDecision {
  seq: number;
  operation: Operation;
  account: string;
  source: FaultSource;
  outcome: FaultOutcome | "none";
  latencyMs: number;
}

export interface QueuedFault {
  fault: InjectedFault;
  remaining: number;
}

export interface FaultState {
  queued: QueuedFault[];
  global: InjectedFault | null;
  plan: FaultPlan | null;
  baselineLatencyMs: number;
}

/**
 * Decides the fault for each request. Precedence: the request's own `x-mock-fault` header, then
 * the first matching queued fault (consumed), then the seeded plan, then the global fault, then
 * the baseline latency. A decision is made once, synchronously, when the request reaches its route.
 */
export class FaultController {
  private queue: QueuedFault[] = [];
  private global: InjectedFault | null = null;
  private plan: FaultPlan | null = null;
  private random: SeededRandom | null = null;
  private log: FaultDecision[] = [];
  private seq = 0;

  /** `logLimit`: decisions kept for `decisions()`, the oldest forgotten first (default: all). */
  constructor(
    private readonly baselineLatencyMs: number,
    private readonly logLimit = Number.POSITIVE_INFINITY,
  ) {}

  inject(fault: InjectedFault, times = 1): void {
    const parsed = validate(injectedFaultSchema, fault, "fault");
    if (!Number.isInteger(times) || times < 1) {
      throw new MockPaymentsError("invalid_fault", `times must be a positive integer, got ${String(times)}`);
    }
    this.queue.push({ fault: parsed, remaining: times });
  }

  setGlobal(fault: InjectedFault | null): void {
    this.global = fault === null ? null : validate(injectedFaultSchema, fault, "fault");
  }

  setPlan(plan: FaultPlan | null): void {
    if (plan === null) {
      this.plan = null;
      this.random = null;
      return;
    }
    this.plan = validate(faultPlanSchema, plan, "fault plan");
    this.random = new SeededRandom(this.plan.seed);
  }

  /** Forget queued, global and planned faults and the decision log. The baseline latency stays. */
  clear(): void {
    this.queue = [];
    this.global = null;
    this.plan = null;
    this.random = null;
    this.log = [];
    this.seq = 0;
  }

  state(): FaultState {
    return {
      queued: this.queue.map((q) => ({ fault: { ...q.fault }, remaining: q.remaining })),
      global: this.global,
      plan: this.plan,
      baselineLatencyMs: this.baselineLatencyMs,
    };
  }

  decisions(): FaultDecision[] {
    return this.log.map((d) => ({ ...d }));
  }

  /** `header` is an already-parsed x-mock-fault value, or null when the request carried none. */
  decide(operation: Operation, account: string, header: FaultSpec | null): FaultDecision {
    let source: FaultSource = "none";
    let spec: FaultSpec = {};
    const queued = header === null ? this.takeQueued(operation, account) : null;
    if (header !== null) {
      source = "header";
      spec = header;
    } else if (queued !== null) {
      source = "queue";
      spec = queued;
    } else if (this.plan !== null && this.random !== null && (this.plan.operations ?? WRITE_OPERATIONS).includes(operation)) {
      source = "plan";
      spec = drawFromPlan(this.plan, this.random);
    } else if (this.global !== null && matches(this.global, operation, account)) {
      source = "global";
      spec = this.global;
    } else if (this.baselineLatencyMs > 0) {
      source = "baseline";
    }
    const decision: FaultDecision = {
      seq: ++this.seq,
      operation,
      account,
      source,
      outcome: spec.outcome ?? "none",
      latencyMs: spec.latencyMs ?? this.baselineLatencyMs,
    };
    this.log.push(decision);
    if (this.log.length > this.logLimit) this.log.shift();
    return decision;
  }

  private takeQueued(operation: Operation, account: string): FaultSpec | null {
    const index = this.queue.findIndex((q) => matches(q.fault, operation, account));
    if (index < 0) return null;
    const entry = this.queue[index]!;
    entry.remaining -= 1;
    if (entry.remaining === 0) this.queue.splice(index, 1);
    return entry.fault;
  }
}

function matches(fault: InjectedFault, operation: Operation, account: string): boolean {
  if (!(fault.operations ?? WRITE_OPERATIONS).includes(operation)) return false;
  return fault.account === undefined || fault.account === account;
}

function drawFromPlan(plan: FaultPlan, random: SeededRandom): FaultSpec {
  // Always two draws per request, whatever the outcome, so one request's fault never shifts the
  // stream for the next.
  const u = random.next();
  const v = random.next();
  const p = plan.probabilities ?? {};
  let outcome: FaultOutcome | undefined;
  let edge = 0;
  for (const name of FAULT_OUTCOMES) {
    edge += p[name] ?? 0;
    if (u < edge) {
      outcome = name;
      break;
    }
  }
  let latencyMs: number | undefined;
  if (typeof plan.latencyMs === "number") latencyMs = plan.latencyMs;
  else if (plan.latencyMs !== undefined) {
    latencyMs = plan.latencyMs.min + Math.floor(v * (plan.latencyMs.max - plan.latencyMs.min + 1));
  }
  const spec: FaultSpec = {};
  if (outcome !== undefined) spec.outcome = outcome;
  if (latencyMs !== undefined) spec.latencyMs = latencyMs;
  return spec;
}

/**
 * The `x-mock-fault` header: either a bare outcome name (`drop_after_accept`) or a JSON
 * FaultSpec (`{"latencyMs":820,"outcome":"drop_after_accept"}`).
 */
export function parseFaultHeader(raw: string): { ok: true; spec: FaultSpec } | { ok: false; reason: string } {
  const value = raw.trim();
  if ((FAULT_OUTCOMES as readonly string[]).includes(value)) return { ok: true, spec: { outcome: value as FaultOutcome } };
  let json: unknown;
  try {
    json = JSON.parse(value);
  } catch {
    return { ok: false, reason: `expected an outcome name (${FAULT_OUTCOMES.join(", ")}) or a JSON fault spec` };
  }
  const parsed = faultSpecSchema.safeParse(json);
  if (!parsed.success) {
    return { ok: false, reason: summarizeIssues(parsed.error).map((i) => `${i.path}: ${i.message}`).join("; ") };
  }
  return { ok: true, spec: parsed.data };
}

function validate<T>(schema: { safeParse(v: unknown): { success: true; data: T } | { success: false; error: import("zod").ZodError } }, value: unknown, what: string): T {
  const parsed = schema.safeParse(value);
  if (!parsed.success) {
    throw new MockPaymentsError(
      "invalid_fault",
      `invalid ${what}: ${summarizeIssues(parsed.error).map((i) => `${i.path}: ${i.message}`).join("; ")}`,
    );
  }
  return parsed.data;
}
