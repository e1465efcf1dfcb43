/**
 * Worker-thread entry: runs the whole demo (incident, then the chaos run's guarded side and,
 * in a worker of its own, its naive side) and posts its phases, progress and result. The CLI
 * runs it in a worker so the demo's heap can be capped (`resourceLimits`): V8 sizes a heap
 * that allocates fast at several times what it keeps live, and a process's own heap cannot be
 * capped once it runs.
 */
import { parentPort, workerData } from "node:worker_threads";
import type { ChaosProgress } from "./chaos.js";
import type { DemoOptions } from "./options.js";
import { runDemo, type DemoResult } from "./run.js";

export type DemoThreadMessage =
  | { type: "phase"; phase: "incident" | "chaos" }
  | { type: "progress"; progress: ChaosProgress }
  | { type: "result"; result: DemoResult }
  | { type: "error"; message: string; stack?: string };

const port = parentPort;
if (port === null) throw new Error("demo-thread must run in a worker thread");
const post = (message: DemoThreadMessage) => port.postMessage(message);
const { options, progress } = workerData as { options: DemoOptions; progress: boolean };
runDemo(options, {
  onPhase: (phase) => post({ type: "phase", phase }),
  ...(progress ? { onProgress: (p: ChaosProgress) => post({ type: "progress", progress: p }) } : {}),
}).then(
  (result) => post({ type: "result", result }),
  (error: unknown) => {
    const e = error instanceof Error ? error : new Error(String(error));
    post({ type: "error", message: e.message, ...(e.stack !== undefined ? { stack: e.stack } : {}) });
  },
);
