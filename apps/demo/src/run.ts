import { randomBytes } from "node:crypto";
import { runChaos, type ChaosProgress, type ChaosResult } from "./chaos.js";
import { runIncident, type IncidentResult } from "./incident.js";
import { defaultNamespace, openLedger } from "./ledger.js";
import type { DemoOptions } from "./options.js";

export interface DemoResult {
  /** The one JSON object `--json` prints. */
  demo: "dispatch-once";
  seed: string;
  ledger: {
    kind: "sqlite" | "postgres" | "redis";
    location: string;
    durability: "durable" | "volatile";
    /** Why the demo's tool is a keyed_write: a volatile ledger refuses unkeyed_write tools. */
    note?: string;
    warnings: string[];
  };
  incident: IncidentResult;
  chaos: ChaosResult;
  durationMs: number;
  /**
   * What the whole process used, read by the CLI once the run has ended; absent when `runDemo`
   * is called directly. Benchmarks read it (`pnpm bench --demo-scale`) rather than a wrapper, so
   * the numbers are the same wherever the demo runs.
   */
  process?: DemoProcessUsage;
}

/** `process.resourceUsage()` of the CLI's process at the end of the run: every thread counts. */
export interface DemoProcessUsage {
  /** Since the process started (module loading and both phases included). */
  wallMs: number;
  /** User CPU of every thread of the process. */
  cpuUserMs: number;
  /** System CPU of every thread of the process. */
  cpuSystemMs: number;
  /**
   * Peak resident set of the process, in KiB (`time -v`'s "kbytes"): Linux's VmHWM of the
   * process's own memory; elsewhere getrusage's ru_maxrss, which Linux would carry over from a
   * spawning parent's memory across execve.
   */
  maxRssKiB: number;
}

export interface RunHooks {
  onPhase?(phase: "incident" | "chaos"): void;
  onProgress?(progress: ChaosProgress): void;
}

export async function runDemo(options: DemoOptions, hooks: RunHooks = {}): Promise<DemoResult> {
  const started = Date.now();
  // Per run: conversation ids (and so keys) and, by default, the ledger's table never repeat.
  const runId = randomBytes(4).toString("hex");
  const namespace = options.ledgerNamespace ?? defaultNamespace(runId);
  const open = await openLedger(options.ledger, namespace, options.keepLedger);
  try {
    hooks.onPhase?.("incident");
    const incident = await runIncident({ ledger: open.ledger, runId, seed: options.seed, timeScale: options.incidentTimeScale, provider: options.provider });
    hooks.onPhase?.("chaos");
    const chaos = await runChaos({
      turns: options.turns,
      failureRate: options.failureRate,
      dropRate: options.dropRate,
      rewordRate: options.rewordRate,
      seed: options.seed,
      timeScale: options.timeScale,
      concurrency: options.concurrency,
      redeliveries: options.redeliveries,
      // The chaos run drives a Dispatch-Once runner; under the AI SDK the app owns the loop, so
      // its chaos run is the OpenAI one (the mock and the stream the AI SDK incident uses).
      provider: options.provider === "ai-sdk" ? "openai" : options.provider,
      ledger: open.ledger,
      runId,
      ...(hooks.onProgress ? { onProgress: hooks.onProgress } : {}),
    });
    return {
      demo: "dispatch-once",
      seed: options.seed,
      ledger: {
        kind: open.kind,
        location: open.location,
        durability: open.durability,
        ...(open.durability === "volatile"
          ? {
              note:
                "this ledger declares itself VOLATILE (it can lose acknowledged rows): the dispatcher refuses unkeyed_write tools on it " +
                "unless allowVolatileLedgerForUnkeyedWrites is set. send_payment is a keyed_write: the Idempotency-Key forwarded to the " +
                "payments API still collapses a repeat if the ledger forgets a row.",
            }
          : {}),
        warnings: open.warnings,
      },
      incident,
      chaos,
      durationMs: Date.now() - started,
    };
  } finally {
    await open.close();
  }
}
