#!/usr/bin/env node
/** `pnpm demo`: the chapter's incident replayed, then measured at scale. */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import type { DemoThreadMessage } from "./demo-thread.js";
import { sideHeapLimits } from "./heap.js";
import { DemoUsageError, USAGE, parseArgs, type DemoOptions } from "./options.js";
import type { DemoProcessUsage, DemoResult, RunHooks } from "./run.js";

async function main(argv: string[]): Promise<number> {
  let options;
  try {
    options = parseArgs(argv);
  } catch (error) {
    if (error instanceof DemoUsageError) {
      process.stderr.write(`demo: ${error.message}\n\n${USAGE}`);
      return 2;
    }
    throw error;
  }
  if (options.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  // A bar redrawn in place only makes sense on a terminal; piped stderr gets the phase lines only.
  // The modules of the run load in the demo's thread; this one loads them only to print.
  const { ProgressBar, renderText } = await import("./text.js");
  const bar = options.progress && !options.json && process.stderr.isTTY ? new ProgressBar(process.stderr) : undefined;
  const say = (line: string) => {
    if (!options.json) process.stderr.write(`${line}\n`);
  };
  const result = await runDemoThread(options, {
    onPhase: (phase) =>
      phase === "incident"
        ? say(`Replaying the incident (about ${Math.ceil(5 * options.incidentTimeScale)} s at the chapter's timings)...`)
        : say(`Chaos run: ${options.turns.toLocaleString("en-US")} turns per side, naive and guarded side by side...`),
    ...(bar ? { onProgress: (p) => bar.update(p) } : {}),
  });
  bar?.done();
  result.process = processUsage();
  if (options.report !== undefined) writeFileSync(options.report, (await import("./report.js")).renderReport(result));
  if (options.json) process.stdout.write(`${JSON.stringify(result)}\n`);
  else {
    process.stdout.write(`\n${renderText(result)}\n`);
    if (options.report !== undefined) process.stdout.write(`HTML report written to ${options.report}\n`);
  }
  // The guarded side must never pay twice nor misreport an effect; a run where it did is a failure, loudly.
  const guardedDuplicates =
    Math.max(0, result.incident.guarded.payments - 1) + result.chaos.routes.reduce((s, r) => s + r.guarded.duplicates, 0);
  const guardedMisreports = result.chaos.routes.reduce((s, r) => s + r.guarded.misreports, 0);
  if (guardedDuplicates > 0 || guardedMisreports > 0) {
    process.stderr.write(
      `demo: Dispatch-Once made ${guardedDuplicates} duplicate payment(s) and misreported ${guardedMisreports} effect(s): ` +
        `this is a bug, please report it with --seed ${options.seed}\n`,
    );
    return 1;
  }
  return 0;
}

function processUsage(): DemoProcessUsage {
  const usage = process.resourceUsage();
  return {
    wallMs: Math.round(performance.now()),
    cpuUserMs: Math.round(usage.userCPUTime / 1000),
    cpuSystemMs: Math.round(usage.systemCPUTime / 1000),
    maxRssKiB: peakRssKiB() ?? usage.maxRSS,
  };
}

/**
 * The peak resident set of this process's own memory (Linux: VmHWM). Not ru_maxrss where there
 * is a choice: Linux carries it across execve, so a demo spawned by a process holding 500 MB (a
 * bench that had just filled a table) reported 500 MB whatever it used itself.
 */
function peakRssKiB(): number | undefined {
  try {
    const match = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync("/proc/self/status", "utf8"));
    return match === null ? undefined : Number(match[1]);
  } catch {
    return undefined;
  }
}

/**
 * Run the demo in a worker thread whose heap is capped (see heap.ts); in this thread when the
 * built worker file is missing (running from source).
 */
async function runDemoThread(options: DemoOptions, hooks: RunHooks): Promise<DemoResult> {
  const file = fileURLToPath(new URL("./demo-thread.js", import.meta.url));
  if (!existsSync(file)) return (await import("./run.js")).runDemo(options, hooks);
  return new Promise((resolve, reject) => {
    const worker = new Worker(file, {
      workerData: { options, progress: hooks.onProgress !== undefined },
      resourceLimits: sideHeapLimits(options.turns),
    });
    let settled = false;
    worker.on("message", (message: DemoThreadMessage) => {
      if (message.type === "phase") hooks.onPhase?.(message.phase);
      else if (message.type === "progress") hooks.onProgress?.(message.progress);
      else if (message.type === "result") {
        settled = true;
        resolve(message.result);
      } else {
        settled = true;
        reject(Object.assign(new Error(message.message), { stack: message.stack }));
      }
    });
    worker.on("error", (error) => {
      settled = true;
      reject(error);
    });
    worker.on("exit", (code) => {
      if (!settled) reject(new Error(`the demo's thread exited with code ${code} before reporting`));
    });
  });
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (error: unknown) => {
    process.stderr.write(`demo: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    process.exitCode = 1;
  },
);
