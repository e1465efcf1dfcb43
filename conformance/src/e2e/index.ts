import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { MemoryConversationStore } from "@dispatch-once/anthropic";
import type { CallDispatcher, Ledger, ToolDefinition } from "@dispatch-once/core";
import { createPaymentsClient } from "@dispatch-once/mock-payments";
import { ConformanceFailure } from "../failure.js";
import { randomSeed, registerChecks, type TestRegistrar } from "../ledger/index.js";
import type { Check, Counterexample, LedgerFixture, LedgerSubject } from "../types.js";
import { checkOracle, type OracleViolation } from "./oracle.js";
import { scenarioArbitrary, type Scenario } from "./scenario.js";
import {
  argsSignature,
  newWorker,
  programProvider,
  runMessage,
  startWorld,
  type CaseContext,
  type World,
  type Worker,
} from "./world.js";

export { scenarioArbitrary, type Scenario } from "./scenario.js";
export type { OracleViolation } from "./oracle.js";

export interface EndToEndOptions {
  /** End-to-end runs (random scenarios). Default 100; CI certifies with at least 1,000. */
  runs?: number;
  seed?: number;
  path?: string;
  /** Lease given to claims; short so that a dead worker's claim expires quickly. Default 100 ms. */
  leaseMs?: number;
  /** Replace the dispatcher (the kit's own tests pass broken ones to prove it notices). */
  dispatcher?: (tools: ToolDefinition<any, any>[], ledger: Ledger) => CallDispatcher;
}

export const END_TO_END_CHECK_NAME =
  "end to end: random conversations, stream cuts at every position, downstream faults, worker deaths and every replay route perform each effect exactly once";

interface CaseRun {
  violations: OracleViolation[];
  timeline: string[];
}

async function runCase(world: World, subject: LedgerSubject, scenario: Scenario, options: EndToEndOptions): Promise<CaseRun> {
  const fixture: LedgerFixture = await subject.create();
  const account = `acct_${randomUUID().slice(0, 12)}`;
  const ctx: CaseContext = {
    scenario,
    account,
    client: createPaymentsClient({ baseURL: world.payments.url, token: account }),
    store: new MemoryConversationStore(),
    timeline: [],
    outcomes: [],
    events: [],
    pendingDownstream: new Map(),
    pendingDeaths: new Map(),
    started: Date.now(),
  };
  for (const conversation of scenario.conversations) {
    for (const message of conversation.messages) {
      for (const [index, fault] of Object.entries(message.downstream)) {
        const call = message.calls[Number(index)];
        if (call !== undefined && fault !== undefined) ctx.pendingDownstream.set(argsSignature(call.tool, call.args), fault);
      }
      const dying = message.death === undefined ? undefined : message.calls[message.death.call];
      if (dying !== undefined && message.death !== undefined) ctx.pendingDeaths.set(argsSignature(dying.tool, dying.args), message.death);
    }
  }
  programProvider(world, scenario, account);
  let first = true;
  const factory = {
    // The first worker uses the fixture's ledger; every later one a second view of the same namespace.
    ledger: async () => {
      if (first) {
        first = false;
        return fixture.ledger;
      }
      return fixture.reopen();
    },
    leaseMs: options.leaseMs ?? 100,
    ...(options.dispatcher ? { dispatcher: options.dispatcher } : {}),
  };
  let workers = 0;
  const spawn = (name: string, attempts?: number) => {
    workers++;
    return newWorker(world, ctx, name, factory, attempts);
  };
  try {
    // Conversations run concurrently, as several workers serving several users.
    await Promise.all(
      scenario.conversations.map(async (conversation) => {
        let primary: Worker = await spawn(`w${conversation.id.slice(5)}`);
        for (const message of conversation.messages) {
          if (primary.dead) primary = await spawn(`${primary.name}*`);
          await runMessage(ctx, conversation.id, message, spawn, primary);
          const snapshot = await ctx.store.load(conversation.id);
          // A message left unanswered ends the conversation: the user gave up.
          if (snapshot.pendingMessageId !== undefined) break;
        }
      }),
    );
    // Dead workers' claims may still be expiring; let every lease lapse before reading the oracle.
    const violations = await checkOracle(ctx, world.payments.effects({ account }));
    return { violations, timeline: renderTimeline(ctx, workers) };
  } finally {
    await fixture.destroy().catch(() => {});
  }
}

function renderTimeline(ctx: CaseContext, workers: number): string[] {
  const lines = [...ctx.timeline]
    .sort((a, b) => a.at - b.at)
    .map((e) => `t=${String(e.at).padStart(4)}ms ${e.who.padEnd(6)} ${e.what}`);
  lines.push(`(${workers} workers; effects performed downstream are listed in the violation)`);
  return lines;
}

/** Runs a certification makes unless told otherwise: CI certifies every ledger with 1,000. */
export const DEFAULT_END_TO_END_RUNS = 1000;

function envInteger(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === "") return undefined;
  const n = Number(raw);
  if (!Number.isSafeInteger(n)) throw new Error(`${name} must be an integer, got ${JSON.stringify(raw)}`);
  return n;
}

/** The end-to-end level as checks (issue 6, level 2), named after CONF-2. */
export function endToEndChecks(subject: LedgerSubject, options: EndToEndOptions = {}): Check[] {
  // CI sizes runs and pins seeds through the environment, as the ledger level does.
  const runs = options.runs ?? envInteger("CONFORMANCE_E2E_RUNS") ?? DEFAULT_END_TO_END_RUNS;
  const seed = options.seed ?? envInteger("CONFORMANCE_SEED") ?? randomSeed();
  return [
    {
      rule: "CONF-2",
      name: `${END_TO_END_CHECK_NAME} (${options.path === undefined ? `${runs} runs` : "replay"}, seed ${seed})`,
      applicable: true,
      run: () => runEndToEnd(subject, { ...options, runs, seed }),
    },
  ];
}

/** Registers the end-to-end level with any describe/it runner, as registerLedgerChecks does the ledger level. */
export function registerEndToEndChecks(subject: LedgerSubject, t: TestRegistrar, options: EndToEndOptions = {}): void {
  // Shrinking a failure replays whole conversations; allow for it beyond the runs themselves.
  registerChecks(`${subject.name} end to end (spec CONF-2)`, endToEndChecks(subject, options), t, 1_800_000);
}

export async function runEndToEnd(subject: LedgerSubject, options: EndToEndOptions = {}): Promise<void> {
  const world = await startWorld();
  try {
    const seed = options.seed ?? randomSeed();
    const property = fc.asyncProperty(scenarioArbitrary(), async (scenario) => {
      const run = await runCase(world, subject, scenario, options);
      if (run.violations.length > 0) {
        const [v] = run.violations;
        throw new ConformanceFailure(`${v!.rule}: ${v!.message}`, { violates: v!.rule });
      }
    });
    const details = await fc.check(property, {
      numRuns: options.runs ?? 100,
      seed,
      ...(options.path === undefined ? {} : { path: options.path }),
      // Shrinking replays whole conversations over HTTP; keep it bounded.
      endOnFailure: false,
      interruptAfterTimeLimit: 600_000,
    });
    if (!details.failed) return;
    const report = fc.defaultReportMessage(details) ?? "property failed";
    const shrunk = details.counterexample?.[0] as Scenario | undefined;
    const replay = shrunk === undefined ? undefined : await runCase(world, subject, shrunk, options);
    const violation = replay?.violations[0];
    const violates =
      violation?.rule ?? (details.errorInstance instanceof ConformanceFailure ? details.errorInstance.violates : undefined);
    const timeline = replay?.timeline ?? [];
    const counterexample: Counterexample = {
      seed: details.seed,
      path: details.counterexamplePath ?? "",
      timeline,
      report,
      value: shrunk,
      ...(violates === undefined ? {} : { violates }),
    };
    throw new ConformanceFailure(
      [
        `an effect was not performed exactly once${violates ? ` (breaks ${violates})` : ""}: ${
          violation?.message ?? (details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance))
        }`,
        `shrunk scenario after ${details.numRuns} runs and ${details.numShrinks} shrinks: ${JSON.stringify(shrunk)}`,
        "timeline of the shrunk scenario:",
        ...timeline.map((l) => `  ${l}`),
        replay !== undefined && replay.violations.length === 0 ? "  (the shrunk scenario passed on replay: timing-dependent)" : "",
        `seed ${details.seed}, path "${details.counterexamplePath}" (replay: --seed ${details.seed} --path "${details.counterexamplePath}")`,
      ]
        .filter((l) => l !== "")
        .join("\n"),
      { ...(violates === undefined ? {} : { violates }), counterexample },
    );
  } finally {
    await world.close();
  }
}
